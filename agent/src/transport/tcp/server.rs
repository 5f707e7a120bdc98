//! Rank 0's listener, and a node leader's in a two-level gather: it accepts
//! connections on a thread of its own, gives each a thread, authenticates
//! it by the challenge and its proof, answers the rendezvous and the clock
//! exchanges (rank 0's), and collects the payloads of its senders and (rank
//! 0's, in two levels) the other nodes' leaders' digests, each within its
//! budgets (connections not greeted yet, each rank's places, frame bytes in
//! flight, a frame's pace) and deadlines.

use std::collections::{BTreeMap, VecDeque};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rankscope_common::gather::{
    Candidate, ConnectionRefusal, NodeSent, Rejection, Skipped, MAX_LISTED_SKIPPED,
};
use rankscope_common::payload::{self, ClockOffset};

use super::clock::{self, Round, ROUNDS};
use super::control::{Desk, ServedControl, CONTROLLER};
use super::mirror::{MirrorDesk, Mirrors};
use super::places::{Place, Places};
use super::wire::{
    kind, purpose, read_frame, read_frame_within, sealed, write_frame, FrameBudget, Hello, Refusal,
    MAX_CONTROL_BYTES,
};
use super::HANDSHAKE_TIMEOUT;
use crate::sync::lock;
use crate::transport::nodes::{node_led_by, NodeExpected};
use crate::transport::TransportError;

/// Whose listener it is, for what it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Serves {
    /// Rank 0's: the rendezvous and clock of every rank, payloads, and
    /// with `node_size` (a two-level gather of nodes of that many ranks)
    /// the digests of the other nodes' leaders.
    Rank0 { node_size: Option<u32> },
    /// A node leader's: its node's payloads, and its node's mirrors where
    /// it has window control.
    Leader,
    /// Rank 0's under a transport that gathers otherwise (MPI): window
    /// controllers and the mirrors of ranks apart alone, with the statuses
    /// each node's leader relays where the job has nodes of `node_size`.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    WindowFiles { node_size: Option<u32> },
    /// A node leader's under a transport that gathers otherwise (MPI): its
    /// node's mirrors alone.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    NodeWindowFiles,
}

impl Serves {
    /// Whether it is a node leader's listener (which serves no window
    /// controller).
    fn is_a_leaders(self) -> bool {
        matches!(self, Serves::Leader | Serves::NodeWindowFiles)
    }
}

/// What a listener needs to know.
pub(super) struct ServerSettings {
    /// Whose it is.
    pub(super) serves: Serves,
    /// A leader's clock offset to rank 0, from its rendezvous: the ranks
    /// that meet it are given their offset to rank 0 through it.
    pub(super) relay: Option<ClockOffset>,
    /// The ranks whose payloads it takes.
    pub(super) senders: Range<u32>,
    pub(super) token: Vec<u8>,
    /// How long a payload's frame may take to arrive.
    pub(super) payload_timeout: Duration,
    pub(super) session_id: String,
    pub(super) run_id: String,
    pub(super) world_size: u32,
    pub(super) max_frame: u64,
    pub(super) clock_shift_ns: i64,
    /// The rank's window control: rank 0's, served to controllers and to
    /// the ranks' mirrors; a node leader's, to its node's mirrors.
    pub(super) control: Option<ServedControl>,
    /// Whether a node digest's bytes are one of the node of the given
    /// ranks, else why not: checked before the node counts as answered.
    pub(super) check_node: CheckNode,
}

/// [`ServerSettings::check_node`].
pub(super) type CheckNode = fn(&[u8], &NodeExpected<'_>) -> Result<(), String>;

/// What the listener collected.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) payloads: BTreeMap<u32, Candidate>,
    /// The node digests of the other nodes' leaders, by leader.
    pub(super) nodes: BTreeMap<u32, NodeSent>,
    /// The first [`MAX_LISTED_SKIPPED`] connections refused, with why (a
    /// port scan must not grow rank 0's memory).
    pub(super) refused: Vec<Skipped>,
    /// How many more were refused.
    pub(super) unlisted: u64,
}

/// Connections whose greeting has not arrived yet, kept apart from the
/// ranks': at most this many, the oldest cut off to make room for a new
/// one. Strangers flooding the port then cannot keep a rank out: its
/// connection greets in one round trip, mostly before as many newer
/// connections push it out, and a rank cut off tries again.
const MAX_UNGREETED: usize = 64;

/// State shared by the listener and its connection threads.
struct Shared {
    /// Payload frames being received.
    frames: FrameBudget,
    settings: ServerSettings,
    collected: Mutex<Collected>,
    arrived: Condvar,
    /// Each rank's authenticated connections open now.
    places: RankPlaces,
    /// Connections not greeted yet, oldest first, by id.
    ungreeted: Mutex<VecDeque<(u64, TcpStream)>>,
    stop: AtomicBool,
    /// A leader's latest offset to rank 0 (from its rendezvous, then its
    /// resync).
    relay: Mutex<Option<ClockOffset>>,
    /// Held while a node digest is decoded ([`take_node_digest`]).
    decoding: Mutex<()>,
    /// Refused peers being drained ([`drain`]) at once.
    draining: Places,
    /// Rank 0's answers to window controllers.
    desk: Option<Desk>,
    /// The mirrors of the ranks that do not see rank 0's session
    /// directory: rank 0's, or a node leader's for its node.
    mirrors: Option<MirrorDesk>,
}

impl Shared {
    /// Takes `stream` in among the connections not greeted yet, cutting
    /// the oldest off past [`MAX_UNGREETED`]; `false` when it cannot
    /// be kept track of (no file descriptor for its handle): then it is
    /// not served.
    fn admit(&self, id: u64, stream: &TcpStream) -> bool {
        let Ok(handle) = stream.try_clone() else {
            return false;
        };
        let mut waiting = lock(&self.ungreeted);
        if waiting.len() >= MAX_UNGREETED {
            if let Some((_, oldest)) = waiting.pop_front() {
                let _ = oldest.shutdown(Shutdown::Both);
            }
        }
        waiting.push_back((id, handle));
        true
    }

    /// Connection `id` is no longer waiting for its greeting; `false` if it
    /// was cut off meanwhile.
    fn leave(&self, id: u64) -> bool {
        let mut waiting = lock(&self.ungreeted);
        match waiting.iter().position(|(waiting_id, _)| *waiting_id == id) {
            Some(at) => {
                waiting.remove(at);
                true
            }
            None => false,
        }
    }
}

/// The authenticated connections a listener keeps, as places of each
/// rank's own: a connection that proves it is rank r takes one of rank r's
/// places and never another rank's, so peers that claim some ranks cannot
/// keep the others out.
struct RankPlaces(Box<[Places]>);

impl RankPlaces {
    /// Each rank's places: its rendezvous or resync and its payload at
    /// once (and, where the listener serves mirrors, its mirror and a
    /// window payload).
    fn for_listener(settings: &ServerSettings) -> Self {
        let each = match settings.serves {
            Serves::Rank0 { .. } | Serves::Leader if settings.control.is_some() => 4,
            _ => 2,
        };
        RankPlaces(
            (0..settings.world_size)
                .map(|_| Places::new(each))
                .collect(),
        )
    }

    /// One of `rank`'s places, where one is free.
    fn take(&self, rank: u32) -> Option<Place<'_>> {
        self.0.get(rank as usize)?.take(false)
    }
}

/// Rank 0's listener, or a node leader's: a thread accepting connections,
/// a thread for each.
pub(super) struct Server {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// The ranks whose mirrors it serves now.
    #[cfg(test)]
    pub(super) fn mirrored_ranks(&self) -> Vec<u32> {
        (self.shared.mirrors.as_ref()).map_or_else(Vec::new, MirrorDesk::ranks)
    }

    pub(super) fn start(
        listener: TcpListener,
        settings: ServerSettings,
    ) -> Result<Self, TransportError> {
        listener
            .set_nonblocking(true)
            .map_err(|source| TransportError::Io {
                path: "listener".into(),
                source,
            })?;
        let relay = settings.relay;
        let desk = (settings.control.clone())
            .filter(|_| !settings.serves.is_a_leaders())
            .map(|control| Desk::new(control, settings.world_size, settings.token.clone()));
        let role = match settings.serves {
            Serves::Leader | Serves::NodeWindowFiles => Mirrors::Leader,
            Serves::Rank0 { node_size } | Serves::WindowFiles { node_size } => {
                Mirrors::Rank0 { node_size }
            }
        };
        let mirrors = (settings.control.clone()).map(|control| {
            MirrorDesk::new(
                control,
                settings.run_id.clone(),
                (role, settings.world_size),
            )
        });
        let places = RankPlaces::for_listener(&settings);
        let shared = Arc::new(Shared {
            desk,
            mirrors,
            places,
            settings,
            collected: Mutex::default(),
            arrived: Condvar::new(),
            frames: FrameBudget::default(),
            ungreeted: Mutex::default(),
            stop: AtomicBool::new(false),
            relay: Mutex::new(relay),
            decoding: Mutex::new(()),
            draining: Places::new(MAX_DRAINING),
        });
        let accepting = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("rankscope-listener".into())
            .spawn(move || accept_loop(&listener, &accepting))
            .map_err(|source| TransportError::Io {
                path: "listener thread".into(),
                source,
            })?;
        Ok(Server {
            shared,
            thread: Some(thread),
        })
    }

    /// Waits until every rank it waits for answered ([`ServerSettings::
    /// all_answered`]) or `deadline`, then stops listening and hands over
    /// what was collected.
    pub(super) fn finish(mut self, deadline: Instant) -> Collected {
        let settings = &self.shared.settings;
        let mut collected = lock(&self.shared.collected);
        while !settings.all_answered(&collected) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            collected = self
                .shared
                .arrived
                .wait_timeout(collected, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        // Stopped under the lock: a payload arriving from now on is refused,
        // not acknowledged and then lost.
        self.shared.stop.store(true, Ordering::SeqCst);
        let taken = std::mem::take(&mut *collected);
        drop(collected);
        self.stop();
        // Refusals of connections that ended after the wait.
        let mut taken = taken;
        let mut late = std::mem::take(&mut *lock(&self.shared.collected));
        taken.refused.append(&mut late.refused);
        let unlisted = taken.unlisted + late.unlisted;
        if unlisted > 0 {
            taken.refused.push(Skipped {
                source: "more connections".into(),
                reason: Rejection::Connection(ConnectionRefusal::Unlisted(unlisted)),
            });
        }
        taken
    }

    /// A leader's offset to rank 0 measured again (its resync): the ranks
    /// that resync with it from now on are given theirs through it.
    pub(super) fn relay(&self, offset: Option<ClockOffset>) {
        *lock(&self.shared.relay) = offset;
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let source = format!("connection from {peer}");
                let id = next_id;
                next_id += 1;
                if !shared.admit(id, &stream) {
                    refuse(shared, source, ConnectionRefusal::NoResources);
                    let _ = stream.shutdown(Shutdown::Both);
                    continue;
                }
                let serving = Arc::clone(shared);
                let spawned = std::thread::Builder::new()
                    .name("rankscope-peer".into())
                    .spawn(move || serve_connection(stream, id, source, &serving));
                if spawned.is_err() {
                    shared.leave(id);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Serves connection `id` and records why it was refused, if it was.
fn serve_connection(mut stream: TcpStream, id: u64, source: String, shared: &Shared) {
    let mut reached = Reached::Connected;
    let result = serve(&mut stream, id, &mut reached, shared);
    let was_waiting = shared.leave(id);
    if let Err(refusal) = result {
        // Cut off while it waited for its greeting: its read failed for that.
        let refusal = match reached == Reached::Connected && !was_waiting {
            true => ConnectionRefusal::Evicted,
            false => refusal,
        };
        refuse(shared, source, refusal);
        // A peer told why reads it before the connection ends (after the
        // refusal counts: this may take a while; a few at once).
        if reached != Reached::Connected {
            if let Some(_draining) = shared.draining.take(false) {
                drain(&mut stream);
            }
        }
    }
}

/// How far a connection got.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reached {
    /// Its greeting has not arrived.
    Connected,
    /// Its greeting arrived; its proof was not checked, or failed.
    Greeted,
    /// It proved the job token.
    Authenticated,
}

fn refuse(shared: &Shared, source: String, refusal: ConnectionRefusal) {
    let mut collected = lock(&shared.collected);
    if collected.refused.len() < MAX_LISTED_SKIPPED {
        collected.refused.push(Skipped {
            source,
            reason: Rejection::Connection(refusal),
        });
    } else {
        collected.unlisted += 1;
    }
}

/// How long a refusal's frame may take to leave: it is small enough for
/// the socket's buffer, so only a peer that stopped reading waits.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);
/// Refused peers drained at once; past it, one is closed at once.
const MAX_DRAINING: usize = 64;

/// One connection, from the challenge to the end of what it came for;
/// `reached` says how far it got. A peer that proved the token is told why
/// it was refused, under rank 0's seal, and whether to try again
/// ([`Refusal`]); one that did not is told unsealed (it cannot check the
/// seal), and gives up.
fn serve(
    stream: &mut TcpStream,
    id: u64,
    reached: &mut Reached,
    shared: &Shared,
) -> Result<(), ConnectionRefusal> {
    // The handshake and a clock exchange are quick, whoever the peer is.
    let handshake = Instant::now() + HANDSHAKE_TIMEOUT;
    stream
        .set_nonblocking(false)
        .map_err(|_| ConnectionRefusal::Stalled)?;
    let _ = stream.set_nodelay(true);
    let mut challenge = [0u8; 32];
    getrandom::fill(&mut challenge).map_err(|_| ConnectionRefusal::Malformed("no randomness"))?;
    write_frame(stream, kind::CHALLENGE, &challenge, handshake)?;
    let greeting = read_frame(stream, kind::HELLO, MAX_CONTROL_BYTES, handshake)?;
    // Greeted: out of the room newer connections are made in, so that it
    // is not cut off while its proof is checked.
    if !shared.leave(id) {
        return Err(ConnectionRefusal::Evicted);
    }
    *reached = Reached::Greeted;
    let hello = Hello::read(&greeting)?;
    let token = &shared.settings.token;
    if !hello.proves(token, &challenge) {
        tell_refused(stream, &Refusal::body(&ConnectionRefusal::BadToken));
        return Err(ConnectionRefusal::BadToken);
    }
    *reached = Reached::Authenticated;
    let reply = |kind: u8, body: &[u8]| sealed(token, &challenge, hello.nonce, kind, body);
    let peer = Peer {
        hello: &hello,
        challenge: &challenge,
        id,
        reply: &reply,
    };
    let served = serve_rank(stream, &peer, shared, handshake);
    if let Err(refusal) = &served {
        tell_refused(stream, &reply(kind::REFUSED, &Refusal::body(refusal)));
    }
    served
}

/// Tells the peer its refusal (a frame small enough for the socket's
/// buffer).
fn tell_refused(stream: &mut TcpStream, body: &[u8]) {
    let _ = write_frame(stream, kind::REFUSED, body, Instant::now() + REFUSAL_WRITE);
}

/// Takes (and drops) what a peer told its refusal was still sending, until
/// it closes, within [`REFUSAL_WRITE`]: closed with its bytes unread, the
/// connection would be reset, and the peer might never read why.
fn drain(stream: &mut TcpStream) {
    use std::io::Read;
    let until = Instant::now() + REFUSAL_WRITE;
    let _ = stream.shutdown(Shutdown::Write);
    let mut sink = [0u8; 16 << 10];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// An authenticated peer: its greeting, the connection's challenge and id,
/// and how rank 0 seals its replies to it.
struct Peer<'a> {
    hello: &'a Hello<'a>,
    challenge: &'a [u8],
    id: u64,
    reply: &'a dyn Fn(u8, &[u8]) -> Vec<u8>,
}

/// What an authenticated rank (or controller) came for, in one of its own
/// places where it may come here for that.
fn serve_rank(
    stream: &mut TcpStream,
    peer: &Peer<'_>,
    shared: &Shared,
    handshake: Instant,
) -> Result<(), ConnectionRefusal> {
    let hello = peer.hello;
    shared.settings.takes(hello.rank, hello.what)?;
    // A controller's places are the desk's own.
    let _place = match hello.rank {
        CONTROLLER => None,
        rank => Some(shared.places.take(rank).ok_or(ConnectionRefusal::TooMany)?),
    };
    let reply = peer.reply;
    match hello.what {
        purpose::RENDEZVOUS | purpose::RESYNC => {
            answer_clock(stream, hello.what, reply, shared, handshake)
        }
        purpose::TRIGGER | purpose::STATUS => match &shared.desk {
            Some(desk) => {
                let greeting = (hello.what, peer.challenge, hello.nonce);
                desk.serve(stream, greeting, reply, &shared.stop)
            }
            None => Err(ConnectionRefusal::Malformed(
                "window control where none is served",
            )),
        },
        purpose::MIRROR | purpose::WINDOW_PAYLOAD => {
            let Some(mirrors) = &shared.mirrors else {
                return Err(ConnectionRefusal::Malformed(
                    "a mirror where none is served",
                ));
            };
            if hello.what == purpose::MIRROR {
                return mirrors.serve(stream, (hello.rank, peer.id), reply, &shared.stop);
            }
            let settings = &shared.settings;
            let limits = (settings.max_frame, settings.payload_timeout);
            mirrors.take_window_payload(stream, hello.rank, &shared.frames, limits)?;
            let until = Instant::now() + HANDSHAKE_TIMEOUT;
            write_frame(stream, kind::ACK, &reply(kind::ACK, &[]), until)
        }
        purpose::PAYLOAD | purpose::NODE_DIGEST => {
            if hello.what == purpose::PAYLOAD {
                take_payload(stream, hello.rank, shared)?;
            } else {
                take_node_digest(stream, hello.rank, shared)?;
            }
            let _ = write_frame(
                stream,
                kind::ACK,
                &reply(kind::ACK, &[]),
                handshake.max(Instant::now() + HANDSHAKE_TIMEOUT),
            );
            Ok(())
        }
        _ => Err(ConnectionRefusal::Malformed("an unknown purpose")),
    }
}

impl ServerSettings {
    /// Whether every rank it waits for answered: each of its senders by
    /// its payload, or (rank 0 in two levels) by its node leader's digest.
    fn all_answered(&self, collected: &Collected) -> bool {
        let Serves::Rank0 {
            node_size: Some(size),
        } = self.serves
        else {
            return collected.payloads.len() >= self.senders.len();
        };
        let by_leader = |rank: u32| size > 0 && collected.nodes.contains_key(&(rank - rank % size));
        // A rank that sent its payload too (its leader did not take it) is
        // counted once.
        let twice = collected
            .payloads
            .keys()
            .filter(|&&rank| by_leader(rank))
            .count();
        let by_digests: usize = collected.nodes.values().map(|node| node.ranks.len()).sum();
        collected.payloads.len() + by_digests - twice >= self.senders.len()
    }

    /// The ranks of the node `leader` leads, where it leads one whose
    /// digest this listener takes.
    fn node_of(&self, leader: u32) -> Option<Range<u32>> {
        match self.serves {
            Serves::Rank0 {
                node_size: Some(size),
            } => node_led_by(leader, size, self.world_size),
            _ => None,
        }
    }

    /// Whether rank `rank` may come here for `what`; else why not.
    fn takes(&self, rank: u32, what: u8) -> Result<(), ConnectionRefusal> {
        if matches!(what, purpose::TRIGGER | purpose::STATUS) {
            // A window controller, at rank 0's listener alone.
            return match rank == CONTROLLER && self.control.is_some() && !self.serves.is_a_leaders()
            {
                true => Ok(()),
                false => Err(ConnectionRefusal::NotHere {
                    rank,
                    what: "window control",
                }),
            };
        }
        if matches!(what, purpose::MIRROR | purpose::WINDOW_PAYLOAD) && self.control.is_none() {
            return Err(ConnectionRefusal::NotHere {
                rank,
                what: "window files",
            });
        }
        if rank >= self.world_size {
            return Err(ConnectionRefusal::OutsideWorld {
                rank,
                world_size: self.world_size,
            });
        }
        let (here, what) = match what {
            purpose::PAYLOAD => (
                self.senders.contains(&rank) && self.serves != Serves::NodeWindowFiles,
                "payload",
            ),
            purpose::NODE_DIGEST => (self.node_of(rank).is_some(), "node digest"),
            // A leader serves its node's mirrors; the payloads go to rank 0.
            purpose::MIRROR | purpose::WINDOW_PAYLOAD => match self.serves {
                Serves::Leader | Serves::NodeWindowFiles => (
                    what == purpose::MIRROR && self.senders.contains(&rank),
                    "window files",
                ),
                _ => (rank > 0, "window files"),
            },
            purpose::RENDEZVOUS | purpose::RESYNC => match self.serves {
                Serves::Rank0 { .. } => (rank > 0, "clock"),
                Serves::Leader => (self.senders.contains(&rank), "clock"),
                Serves::WindowFiles { .. } | Serves::NodeWindowFiles => (false, "clock"),
            },
            // Refused as not the protocol once admitted.
            _ => (true, ""),
        };
        match here {
            true => Ok(()),
            false => Err(ConnectionRefusal::NotHere { rank, what }),
        }
    }
}

/// A rendezvous or a resync: the rendezvous is given the run's identity
/// first, then both measure the clock.
fn answer_clock(
    stream: &mut TcpStream,
    what: u8,
    reply: &dyn Fn(u8, &[u8]) -> Vec<u8>,
    shared: &Shared,
    handshake: Instant,
) -> Result<(), ConnectionRefusal> {
    let settings = &shared.settings;
    if what == purpose::RENDEZVOUS {
        let run = reply(kind::RUN, settings.run_id.as_bytes());
        write_frame(stream, kind::RUN, &run, handshake)?;
    }
    let mut offset = ping_pong(stream, settings.clock_shift_ns, handshake)?;
    if settings.serves == Serves::Leader {
        // The peer's offset to this leader, carried on to rank 0's clock
        // (unknown where the leader's own is).
        let relay = *lock(&shared.relay);
        offset = match (clock::decode(&offset), relay) {
            (Some(to_leader), Some(leader)) => {
                clock::encode(&clock::through_leader(to_leader, leader)).to_vec()
            }
            _ => Vec::new(),
        };
    }
    write_frame(
        stream,
        kind::OFFSET,
        &reply(kind::OFFSET, &offset),
        handshake,
    )
}

/// Reads rank `rank`'s payload and keeps it, if it is that rank's of this
/// session and run, the first it sent, before the gather stopped.
fn take_payload(
    stream: &mut TcpStream,
    rank: u32,
    shared: &Shared,
) -> Result<(), ConnectionRefusal> {
    let settings = &shared.settings;
    let payload_of = |bytes: Vec<u8>, peer: String| {
        let payload = payload::decode(&bytes)
            .map_err(|_| ConnectionRefusal::WrongPayload("it does not decode"))?;
        let header = &payload.header;
        if header.rank.rank != rank {
            return Err(ConnectionRefusal::WrongPayload("it is another rank's"));
        }
        if header.session.id != settings.session_id {
            return Err(ConnectionRefusal::WrongPayload("it is another session's"));
        }
        if header.session.run_id.as_deref() != Some(settings.run_id.as_str()) {
            return Err(ConnectionRefusal::WrongPayload("it is another run's"));
        }
        Ok(Candidate {
            source: format!("rank {rank} over TCP from {peer}"),
            payload: Ok(payload),
        })
    };
    let kept = Kept {
        slot: |collected| &mut collected.payloads,
        source: |candidate| candidate.source.as_str(),
    };
    take_frame(stream, (rank, kind::PAYLOAD), shared, kept, payload_of)
}

/// Reads node leader `leader`'s digest and keeps it, the first it sent,
/// before the gather stopped, where it is one of its node
/// ([`ServerSettings::check_node`]; whether it is of this job is checked by
/// the report's analysis). One refused leaves the node awaited: a peer
/// with the token that sends garbage first cannot answer for it.
fn take_node_digest(
    stream: &mut TcpStream,
    leader: u32,
    shared: &Shared,
) -> Result<(), ConnectionRefusal> {
    let Some(ranks) = shared.settings.node_of(leader) else {
        return Err(ConnectionRefusal::NotHere {
            rank: leader,
            what: "node digest",
        });
    };
    let settings = &shared.settings;
    let digest_of = |bytes: Vec<u8>, peer: String| {
        let expected = NodeExpected {
            ranks: ranks.clone(),
            session_id: &settings.session_id,
            run_id: &settings.run_id,
        };
        // One digest decoded at a time: peers with the token that send
        // many at once cannot multiply what their decoding holds.
        let checked = {
            let _one = lock(&shared.decoding);
            if shared.stop.load(Ordering::SeqCst) {
                return Err(ConnectionRefusal::Late);
            }
            (settings.check_node)(&bytes, &expected)
        };
        checked.map_err(ConnectionRefusal::WrongDigest)?;
        let source = format!(
            "node digest of rank {leader} (ranks {}..{}) over TCP from {peer}",
            ranks.start, ranks.end
        );
        Ok(NodeSent {
            source,
            leader,
            ranks,
            bytes,
        })
    };
    let kept = Kept {
        slot: |collected| &mut collected.nodes,
        source: |node| node.source.as_str(),
    };
    take_frame(stream, (leader, kind::NODE_DIGEST), shared, kept, digest_of)
}

/// Where [`take_frame`] keeps what it took: `slot` picks the map of what
/// was collected, by sender; `source` says where a kept one came from.
struct Kept<T> {
    slot: fn(&mut Collected) -> &mut BTreeMap<u32, T>,
    source: fn(&T) -> &str,
}

/// Reads `sender`'s frame of `kind` and keeps what `make` makes of it and
/// its peer's address, where `kept` says: the first `sender` sent, before
/// the gather stopped.
fn take_frame<T>(
    stream: &mut TcpStream,
    (sender, kind): (u32, u8),
    shared: &Shared,
    kept: Kept<T>,
    make: impl FnOnce(Vec<u8>, String) -> Result<T, ConnectionRefusal>,
) -> Result<(), ConnectionRefusal> {
    let duplicate = |collected: &mut Collected| {
        (kept.slot)(collected)
            .get(&sender)
            .map(|first| ConnectionRefusal::DuplicateRank {
                rank: sender,
                first: (kept.source)(first).to_string(),
            })
    };
    if let Some(refusal) = duplicate(&mut lock(&shared.collected)) {
        return Err(refusal);
    }
    let settings = &shared.settings;
    let until = Instant::now() + settings.payload_timeout;
    // The frame's bytes count against the budget until it is kept.
    let (bytes, _held) =
        read_frame_within(stream, kind, settings.max_frame, until, &shared.frames)?;
    let taken = make(bytes, peer_of(stream))?;
    {
        let mut collected = lock(&shared.collected);
        if shared.stop.load(Ordering::SeqCst) {
            return Err(ConnectionRefusal::Late);
        }
        if let Some(refusal) = duplicate(&mut collected) {
            return Err(refusal);
        }
        (kept.slot)(&mut collected).insert(sender, taken);
    }
    shared.arrived.notify_all();
    Ok(())
}

/// The address of `stream`'s peer, for the report.
fn peer_of(stream: &TcpStream) -> String {
    stream
        .peer_addr()
        .map_or_else(|_| "an unknown address".into(), |a| a.to_string())
}

/// Rank 0's side of a ping-pong: the peer's offset, encoded for it (empty
/// when no round could be used).
fn ping_pong(
    stream: &mut TcpStream,
    clock_shift_ns: i64,
    deadline: Instant,
) -> Result<Vec<u8>, ConnectionRefusal> {
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let sent_ns = clock::wall_now_ns(clock_shift_ns);
        write_frame(stream, kind::PING, &[], deadline)?;
        let answer = read_frame(stream, kind::PONG, MAX_CONTROL_BYTES, deadline)?;
        let received_ns = clock::wall_now_ns(clock_shift_ns);
        let peer_ns = answer
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_le_bytes)
            .ok_or(ConnectionRefusal::Malformed(
                "a clock reading of the wrong length",
            ))?;
        rounds.push(Round {
            sent_ns,
            peer_ns,
            received_ns,
        });
    }
    Ok(clock::estimate(&rounds)
        .map(|o| clock::encode(&o).to_vec())
        .unwrap_or_default())
}
