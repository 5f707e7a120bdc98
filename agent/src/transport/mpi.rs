//! The MPI transport (cargo feature `mpi`): under `mpirun` or `srun` with
//! MPI, the payloads reach rank 0 over MPI, with no shared file system.
//!
//! Everything goes over a duplicate of the world communicator (or of the
//! program's own), so rankscope's messages never meet the application's,
//! under tags of each session's own (`Tags`), so a send one session
//! abandoned at its deadline is never taken by the next.
//! Every send and receive is non-blocking, polled against a deadline: a
//! rank that never reaches finish cannot hang the others. For that reason the
//! gather is point-to-point rather than one `MPI_Gatherv`: a collective
//! completes for nobody until every rank joined, while rank 0 can take each
//! payload as it arrives and stop at the deadline with what it has (plus
//! any spill files of the missing ranks).
//!
//! - `open`: rank 0 sends the run's identity to every rank, and with it
//!   the endpoint and token of a TCP listener it opens for window files
//!   alone (`tcp::mirror`: a rank that does not see rank 0's session
//!   directory takes part in windows through it; the windows thread never
//!   calls MPI, whatever thread level MPI gives); then each rank
//!   measures its clock against its receiver's by ping-pong
//!   ([`super::clock`]): the rank it sends its payload to, rank 0 or, on
//!   several nodes, its node's leader, which answers each ping at once
//!   with its clock and its own offset to rank 0 (the two are added);
//! - `resync`: the ping-pong again at finish, so drift is known; the
//!   receivers answer while they collect, so a rank that never comes
//!   costs the others nothing;
//! - `gather`: each rank sends its payload's size, then the payload in
//!   chunks of at most 1 GiB (MPI counts are 32-bit). On several nodes
//!   (`gather_levels` 2, [`super::nodes`]) a rank sends it to its node's
//!   leader, and each leader sends rank 0 its node's digest the same way
//!   under tags of its own; rank 0 takes its own node's payloads and the
//!   digests. Rank 0 so exchanges with its node and the leaders alone.
//!
//! MPI is initialised here only when the program has not done it (then
//! rankscope finalises it when the profiler is dropped, after every
//! gather, on a thread that may call MPI); a program that initialised MPI
//! itself keeps it, and can hand its own communicator to
//! [`MpiTransport::with_communicator`]. Where MPI provides less than
//! `MPI_THREAD_SERIALIZED`, every rank must make its transport (its first
//! session) on the same kind of thread: the duplicate of the communicator
//! is a collective call that a rank off MPI's main thread skips. MPI is
//! called only from the threads that start and finish sessions, never from
//! the sampler: any such thread where MPI provides `MPI_THREAD_SERIALIZED`
//! or more (rankscope asks for it), else only MPI's main thread — a
//! session started or finished on another thread then goes through the
//! shared directory ([`super::dir`]) instead, with a notice.

use std::time::{Duration, Instant};

use mpi::environment::Universe;
use mpi::point_to_point::{Destination, Source};
use mpi::request::StaticScope;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::Equivalence;
use mpi::Threading;
use rankscope_common::error::Chain;
use rankscope_common::gather::{Candidate, NodeSent, Rejection, Skipped};
use rankscope_common::payload::{self, ClockOffset, ClockSync, TransportName, MAX_PAYLOAD_BYTES};
use rankscope_common::{Config, Gathered};

use super::clock::{self, Round, ROUNDS};
use super::dir::DirTransport;
use super::nodes::Nodes;
use super::send_buffer::SendBuffer;
use super::tcp::invitation::{accept_invitation, MirrorHost};
use super::tcp::mirror::Mirror;
use super::{Rendezvous, SessionInfo, Transport, TransportError};
use crate::notice::{notice, say};

/// The tags of one session's messages. Each session a transport opens has
/// tags of its own: a send abandoned at one session's deadline stays in
/// MPI, and is never taken as a later session's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tags {
    /// The session's first tag (its run identity); the others follow.
    base: i32,
}

impl Tags {
    /// The first session's first tag.
    const FIRST: i32 = 0x5253;
    /// The tags one session uses.
    const PER_SESSION: i32 = 8;
    /// Sessions told apart before their tags come round again, within the
    /// 32,767 tags every MPI provides.
    const SESSIONS: u32 = 1024;

    /// The tags of the session of index `k` ([`SessionInfo::index`]).
    fn of_session(k: u32) -> Self {
        Tags {
            base: Self::FIRST + Self::PER_SESSION * (k % Self::SESSIONS) as i32,
        }
    }

    /// Rank 0's run identity, at the start.
    fn run(self) -> i32 {
        self.base
    }

    /// A clock ping.
    fn ping(self) -> i32 {
        self.base + 1
    }

    /// A clock ping's answer.
    fn pong(self) -> i32 {
        self.base + 2
    }

    /// A node leader's invitation to its listener for its node's mirrors.
    fn leader_invitation(self) -> i32 {
        self.base + 3
    }

    /// The size of what is `sent`.
    fn size(self, sent: Sent) -> i32 {
        match sent {
            Sent::Payload => self.base + 4,
            Sent::NodeDigest => self.base + 6,
        }
    }

    /// The chunks of what is `sent`.
    fn chunk(self, sent: Sent) -> i32 {
        self.size(sent) + 1
    }
}

/// rankscope's communicator, with the tags of the session it carries.
#[derive(Clone, Copy)]
struct Channel<'a> {
    comm: &'a SimpleCommunicator,
    tags: Tags,
}
/// Largest message: MPI counts are `int`.
const CHUNK_BYTES: usize = 1 << 30;
/// A clock ping: the sender's clock.
const PING_BYTES: usize = 8;
/// A clock answer: the ping echoed, the receiver's clock, and its offset
/// to rank 0 where it knows it.
const PONG_BYTES: usize = 32;
/// Longest message of rank 0's at the start accepted: the run id, and
/// the invitation to its listener for window files.
const MAX_RUN_MESSAGE_BYTES: usize = 64 << 10;

/// Gathers over MPI.
pub struct MpiTransport {
    /// rankscope's duplicate of the communicator; `None` when the
    /// transport was made on a thread that may not call MPI (then every
    /// session goes through the directory).
    comm: Option<SimpleCommunicator>,
    /// Set when rankscope initialised MPI: dropping it finalises.
    _universe: Option<Universe>,
    clock_shift_ns: i64,
    /// MPI may be called from any thread, one at a time (else only from
    /// MPI's main thread).
    any_thread: bool,
    /// This session went through the shared directory: MPI could not be
    /// called from the thread that started it.
    fell_back: bool,
    /// The job's nodes, where it gathers in two levels.
    nodes: Option<Nodes>,
    /// This rank's clock offset to rank 0, as last measured: what it
    /// tells the ranks that measure theirs against it.
    offset: Option<ClockOffset>,
    /// What window files travelling over TCP need of the configuration.
    config: Config,
    /// Rank 0's listener for the window files of ranks that do not see
    /// its session directory (`tcp::mirror`), or a node leader's for its
    /// node's, while the session runs.
    host: Option<MirrorHost>,
    /// A rank's mirror of rank 0's window files, over that listener.
    mirror: Option<Mirror>,
    /// The tags of the session open now.
    tags: Tags,
}

/// What one rank sends another at finish: its size first, then its
/// chunks, under tags of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// A rank's payload, to rank 0 or to its node's leader.
    Payload,
    /// A node leader's digest of its node, to rank 0.
    NodeDigest,
}

impl MpiTransport {
    /// MPI as the launcher started it: initialised here unless the program
    /// already did. Call only under an MPI launcher (a singleton
    /// `MPI_Init` without one can hang).
    pub fn from_launcher(config: &Config) -> Result<Self, TransportError> {
        let universe =
            mpi::initialize_with_threading(Threading::Serialized).map(|(universe, _)| universe);
        let world = match &universe {
            Some(universe) => universe.world(),
            // Already initialised by the program: its world is there too.
            None => SimpleCommunicator::world(),
        };
        let mut transport = Self::with_communicator(&world, config);
        transport._universe = universe;
        Ok(transport)
    }

    /// Over a communicator the program owns (duplicated: rankscope's
    /// messages never mix with the program's). The program initialised MPI
    /// and finalises it, after the session finished.
    pub fn with_communicator(comm: &SimpleCommunicator, config: &Config) -> Self {
        let any_thread = mpi::environment::threading_support() >= Threading::Serialized;
        let comm = (any_thread || is_thread_main()).then(|| comm.duplicate());
        if comm.is_none() {
            notice!(
                "MPI was initialised below MPI_THREAD_SERIALIZED and the profiler's first \
                 session started off its main thread: every session goes through the shared \
                 directory instead"
            );
        }
        MpiTransport {
            comm,
            _universe: None,
            clock_shift_ns: config.clock_shift_ns,
            any_thread,
            fell_back: false,
            nodes: None,
            offset: None,
            config: config.clone(),
            host: None,
            mirror: None,
            tags: Tags::of_session(0),
        }
    }

    /// Where the job has nodes, the mirrors of a node's ranks go through
    /// its leader (but those of rank 0's node): a leader hosts its node's
    /// on loopback and sends its members the way there (empty where it
    /// cannot), and returns its host; a member returns the endpoint its
    /// leader sent. Rank 0's `invitation` (its endpoint and token) and the
    /// `run` go with it.
    fn lead_node(
        &self,
        comm: &SimpleCommunicator,
        session: &SessionInfo<'_>,
        (invitation, run): (&str, &str),
        deadline: Instant,
    ) -> (Option<String>, Option<MirrorHost>) {
        let Some((nodes, rank)) = self.nodes.as_ref().zip(Some(session.rank)) else {
            return (None, None);
        };
        let Some(leader) = nodes.leader(rank) else {
            return (None, None);
        };
        let tag = self.tags.leader_invitation();
        if leader != rank {
            let word = receive(comm, leader as i32, tag, MAX_RUN_MESSAGE_BYTES, deadline);
            let word = word.and_then(|word| String::from_utf8(word).ok());
            let through = word.and_then(|w| w.split_once('\0').map(|(at, _)| at.to_string()));
            return (through, None);
        }
        let members = nodes.node_of(rank, session.world_size);
        let token = invitation
            .split_once('\0')
            .map(|(_, token)| token.as_bytes());
        let host = token.and_then(|token| {
            let node = (rank + 1..members.end, token);
            MirrorHost::for_node(&self.config, session, run, node)
                .map_err(|e| {
                    notice!(
                        "this node's ranks keep their window connections to rank 0: {}",
                        Chain(&e)
                    )
                })
                .ok()
        });
        let word = host
            .as_ref()
            .map(MirrorHost::invitation)
            .unwrap_or_default();
        for member in rank + 1..members.end {
            send(comm, member as i32, word.as_bytes(), tag, deadline);
        }
        (None, host)
    }

    /// Gathers in two levels over `nodes`, where the job has them.
    pub(crate) fn in_nodes(mut self, nodes: Option<Nodes>) -> Self {
        self.nodes = nodes;
        self
    }

    /// Whether this thread may call MPI now; if not, says so (`step` names
    /// what goes through the directory instead).
    fn may_call_mpi(&self, step: &str) -> bool {
        if self.any_thread || is_thread_main() {
            return true;
        }
        notice!(
            "MPI was initialised below MPI_THREAD_SERIALIZED and this is not its main thread: \
             the {step} goes through the shared directory instead"
        );
        false
    }

    /// rankscope's communicator with the open session's tags, where it
    /// has one.
    fn channel(&self) -> Option<Channel<'_>> {
        Some(Channel {
            comm: self.comm.as_ref()?,
            tags: self.tags,
        })
    }

    fn now(&self) -> i64 {
        clock::wall_now_ns(self.clock_shift_ns)
    }

    /// Measures this rank's clock offset to rank 0: against its
    /// receiver's clock ([`receiver_of`]), that receiver's offset added.
    /// With `answer_all`, then answers the pings of the ranks that measure
    /// theirs against this one until each has, or `deadline` (at finish
    /// the gather answers them as it collects).
    fn sync_clocks(
        &mut self,
        session: &SessionInfo<'_>,
        deadline: Instant,
        answer_all: bool,
    ) -> Option<ClockOffset> {
        let on = self.channel()?;
        let nodes = self.nodes.as_ref();
        let offset = match session.rank {
            // Rank 0's offset to itself is measured as exactly nothing.
            0 => Some(ClockOffset {
                offset_ns: 0,
                round_trip_ns: 0,
            }),
            rank => measure(on, receiver_of(nodes, rank), self.clock_shift_ns, deadline),
        };
        if answer_all {
            let measuring = sent_to(nodes, session.rank, session.world_size).len();
            let mut answers = ClockAnswers::new(on, offset, self.clock_shift_ns);
            let mut polls = 0;
            while answers.done() < measuring && Instant::now() < deadline {
                match answers.answer_waiting(deadline) {
                    true => polls = 0,
                    false => back_off(&mut polls),
                }
            }
        }
        self.offset = offset;
        offset
    }
}

/// This rank's offset to rank 0, measured against the clock of `receiver`
/// (rank 0, or the node leader that knows its own offset to it) over
/// [`ROUNDS`] pings, or as many as are answered by `deadline`.
fn measure(
    on: Channel<'_>,
    receiver: u32,
    shift_ns: i64,
    deadline: Instant,
) -> Option<ClockOffset> {
    let receiver = receiver as i32;
    let mut rounds = Vec::with_capacity(ROUNDS);
    let mut receivers_offset = None;
    for _ in 0..ROUNDS {
        let sent_ns = clock::wall_now_ns(shift_ns);
        let ping = sent_ns.to_le_bytes();
        if !send(on.comm, receiver, &ping, on.tags.ping(), deadline) {
            break;
        }
        // An answer to an earlier ping (one that came late) is passed over.
        let answer = loop {
            match receive(on.comm, receiver, on.tags.pong(), PONG_BYTES, deadline) {
                Some(answer) if answer.starts_with(&ping) => break Some(answer),
                Some(_) => continue,
                None => break None,
            }
        };
        let Some(answer) = answer.filter(|a| a.len() >= 16) else {
            break;
        };
        let received_ns = clock::wall_now_ns(shift_ns);
        let receiver_ns = i64::from_le_bytes(answer[8..16].try_into().ok()?);
        rounds.push(Round {
            sent_ns,
            peer_ns: receiver_ns,
            received_ns,
        });
        receivers_offset = clock::decode(&answer[16..]);
    }
    // The receiver's clock minus this rank's, turned around.
    let theirs = clock::estimate(&rounds);
    if theirs.is_none() {
        notice!("rank {receiver} did not answer the clock exchange; this rank's offset is unknown");
    }
    let to_receiver = ClockOffset {
        offset_ns: theirs?.offset_ns.saturating_neg(),
        ..theirs?
    };
    if receivers_offset.is_none() {
        notice!(
            "rank {receiver} does not know its own clock offset to rank 0: this rank's offset is \
             unknown"
        );
    }
    Some(clock::through_leader(to_receiver, receivers_offset?))
}

/// The answering side of a clock exchange: each ping answered at once
/// with this rank's clock and its offset to rank 0.
struct ClockAnswers<'a> {
    on: Channel<'a>,
    /// This rank's offset to rank 0, where known.
    offset: Option<ClockOffset>,
    shift_ns: i64,
    /// Pings answered, by rank.
    answered: std::collections::HashMap<i32, usize>,
}

impl<'a> ClockAnswers<'a> {
    fn new(on: Channel<'a>, offset: Option<ClockOffset>, shift_ns: i64) -> Self {
        ClockAnswers {
            on,
            offset,
            shift_ns,
            answered: Default::default(),
        }
    }

    /// Answers the pings waiting, whoever sent them; whether there were any.
    fn answer_waiting(&mut self, deadline: Instant) -> bool {
        let mut any = false;
        let (comm, tags) = (self.on.comm, self.on.tags);
        while let Some(status) = comm.any_process().immediate_probe_with_tag(tags.ping()) {
            any = true;
            let peer = status.source_rank();
            // Received whatever its size, so that it is not probed again
            // (it comes from a rank of this job, on rankscope's own
            // communicator: a size past a ping's is a bug, not an attack).
            let count = usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
            let mut ping = vec![0u8; count];
            comm.process_at_rank(peer)
                .receive_into_with_tag(&mut ping[..], tags.ping());
            if count != PING_BYTES {
                continue;
            }
            let mut answer = ping;
            answer.extend_from_slice(&clock::wall_now_ns(self.shift_ns).to_le_bytes());
            if let Some(offset) = &self.offset {
                answer.extend_from_slice(&clock::encode(offset));
            }
            send(comm, peer, &answer, tags.pong(), deadline);
            *self.answered.entry(peer).or_default() += 1;
        }
        any
    }

    /// The ranks whose every ping was answered.
    fn done(&self) -> usize {
        self.answered.values().filter(|&&n| n >= ROUNDS).count()
    }
}

impl Drop for MpiTransport {
    fn drop(&mut self) {
        // Freeing the communicator (and finalising MPI, where rankscope
        // initialised it) calls MPI: a thread that may not call it leaves
        // both to the process's end, and says so where MPI is left
        // unfinalised (an MPI launcher may count that as a failure).
        if self.any_thread || mpi::environment::is_finalized() || is_thread_main() {
            return;
        }
        std::mem::forget(self.comm.take());
        if let Some(universe) = self._universe.take() {
            say!(
                "the profiler was dropped off MPI's main thread, which alone may call MPI here: \
                 MPI, which rankscope initialised, is left unfinalised"
            );
            std::mem::forget(universe);
        }
    }
}

/// Whether this is MPI's main thread (the one that initialised it).
fn is_thread_main() -> bool {
    let mut flag: std::os::raw::c_int = 0;
    // SAFETY: MPI is initialised (a transport exists); the call only writes
    // the flag, and is allowed from any thread at any threading level.
    unsafe { mpi::ffi::MPI_Is_thread_main(&mut flag) };
    flag != 0
}

// SAFETY: MPI handles are plain integers or pointers into the MPI library.
// The transport is used by one thread at a time (a session takes it from
// the profiler for its length), never by the sampler or the signal
// watcher, and calls MPI only where `may_call_mpi` allows: from any thread
// where MPI provides MPI_THREAD_SERIALIZED or more, else from MPI's main
// thread alone.
unsafe impl Send for MpiTransport {}

impl Transport for MpiTransport {
    fn name(&self) -> TransportName {
        if self.fell_back {
            TransportName::Dir
        } else {
            TransportName::Mpi
        }
    }

    fn open(
        &mut self,
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Rendezvous, TransportError> {
        self.tags = Tags::of_session(session.index);
        self.fell_back = self.comm.is_none() || !self.may_call_mpi("session");
        let tags = self.tags;
        let Some(comm) = self.comm.as_ref().filter(|_| !self.fell_back) else {
            return DirTransport.open(session, deadline);
        };
        if comm.size() as u32 != session.world_size || comm.rank() as u32 != session.rank {
            return Err(TransportError::Mpi(
                "the communicator's rank or size differs from the launcher's",
            ));
        }
        // Rank 0's run identity is everyone's; with it goes the invitation
        // to its listener for window files (a rank that does not see rank
        // 0's session directory takes part in windows through it).
        let run_id = if session.rank == 0 {
            let run = clock::session_run_id(session.run_id, "mpi", self.now());
            let node_size = self.nodes.as_ref().map(Nodes::size);
            self.host = MirrorHost::start(&self.config, session, &run, node_size)
                .map_err(|e| {
                    notice!(
                        "windows reach only the ranks that see this session directory: {}",
                        Chain(&e)
                    )
                })
                .ok();
            let message = match &self.host {
                Some(host) => format!("{run}\0{}", host.invitation()),
                None => run.clone(),
            };
            for peer in 1..comm.size() {
                send(comm, peer, message.as_bytes(), tags.run(), deadline);
            }
            Some(run)
        } else {
            let message = receive(comm, 0, tags.run(), MAX_RUN_MESSAGE_BYTES, deadline)
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
            let (run, invitation) = match &message {
                Some(message) => match message.split_once('\0') {
                    Some((run, invitation)) => (Some(run.to_string()), Some(invitation)),
                    None => (Some(message.clone()), None),
                },
                None => {
                    notice!("rank 0 sent no run identity in time; the launcher's is used");
                    (session.run_id.map(str::to_string), None)
                }
            };
            if let (Some(invitation), Some(run)) = (invitation, &run) {
                let (through, host) = self.lead_node(comm, session, (invitation, run), deadline);
                self.host = host;
                let accepted = (run.as_str(), through.as_deref());
                self.mirror = accept_invitation(invitation, &self.config, session, accepted);
            }
            run
        };
        Ok(Rendezvous {
            run_id,
            clock_sync: ClockSync::MpiPingpong,
            offset: self.sync_clocks(session, deadline, true),
            endpoint: None,
        })
    }

    fn close(&mut self) {
        self.host = None;
        self.mirror = None;
    }

    fn window_written(&self, index: u32, file: &std::path::Path) {
        if let Some(mirror) = &self.mirror {
            mirror.window_written(index, file);
        }
    }

    fn resync(&mut self, session: &SessionInfo<'_>, deadline: Instant) -> Option<ClockOffset> {
        if self.fell_back || !self.may_call_mpi("clock comparison") {
            return None;
        }
        self.sync_clocks(session, deadline, false)
    }

    fn gather(
        &mut self,
        payload: &[u8],
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Option<Gathered>, TransportError> {
        if let Some(mirror) = self.mirror.take() {
            // The session's last window, closed as it finished, goes first.
            mirror.finish(deadline);
        }
        let usable = !self.fell_back && self.may_call_mpi("gather");
        let Some(on) = self.channel().filter(|_| usable) else {
            return DirTransport.gather(payload, session, deadline);
        };
        let nodes = self.nodes.as_ref();
        let mut answers = ClockAnswers::new(on, self.offset, self.clock_shift_ns);
        if session.rank != 0 {
            match nodes.and_then(|nodes| Some((nodes, nodes.leader(session.rank)?))) {
                Some((nodes, leader)) if leader == session.rank => {
                    forward_node(on, nodes, payload, session, (deadline, &mut answers));
                }
                Some((_, leader)) => {
                    if !send_sized(on, leader as i32, Sent::Payload, payload, deadline) {
                        say!(
                            "rank {leader}, this node's leader, did not take this rank's payload \
                             in time; it is in the spill file"
                        );
                    }
                }
                None => {
                    if !send_sized(on, 0, Sent::Payload, payload, deadline) {
                        say!("rank 0 did not take this rank's payload in time; it is in the spill file");
                    }
                }
            }
            return Ok(None);
        }
        let world = session.world_size;
        // Rank 0 takes its node's payloads (every rank's, in one level) and
        // each other node's digest from its leader.
        let expected = sent_to(nodes, 0, world);
        let mut arrived = Vec::new();
        let mut digests = Vec::new();
        for (peer, sent, bytes) in collect(on, expected, (deadline, &mut answers)) {
            match sent {
                Sent::Payload => arrived.push(payload_of(peer, bytes)),
                Sent::NodeDigest => digests.push((peer as u32, bytes)),
            }
        }
        let mut sent = Vec::new();
        let mut refused = Vec::new();
        // Digests come from leaders only where the job has nodes.
        if let Some(nodes) = nodes {
            for (leader, bytes) in digests {
                let ranks = nodes.node_of(leader, world);
                let source = format!(
                    "node digest of rank {leader} (ranks {}..{}) over MPI",
                    ranks.start, ranks.end
                );
                match bytes {
                    Ok(bytes) => sent.push(NodeSent {
                        source,
                        leader,
                        ranks,
                        bytes,
                    }),
                    Err(reason) => refused.push(Skipped { source, reason }),
                }
            }
        }
        let answered: Vec<_> = sent.iter().map(|node| node.ranks.clone()).collect();
        let rescued = super::rescued_by_rank_0(&answered);
        let mut gathered = super::gathered_by(payload, arrived, session, &rescued);
        gathered.skipped.extend(refused);
        if nodes.is_some() {
            gathered.add_nodes(sent);
        }
        Ok(Some(gathered))
    }
}

/// What `rank` takes at finish, and from whom: rank 0 the payloads of its
/// node's other ranks (of every rank, in one level) and each other node's
/// digest from its leader; a leader its node's other ranks' payloads; any
/// other rank nothing. Those ranks measure their clocks against `rank`'s.
fn sent_to(nodes: Option<&Nodes>, rank: u32, world: u32) -> Vec<(i32, Sent)> {
    let Some(nodes) = nodes else {
        return match rank {
            0 => payloads_of(1..world),
            _ => Vec::new(),
        };
    };
    let node = nodes.node_of(rank, world);
    if node.start != rank {
        return Vec::new();
    }
    let mut sent = payloads_of(rank + 1..node.end);
    if rank == 0 {
        let leaders = (node.end..world).step_by(nodes.size() as usize);
        sent.extend(leaders.map(|leader| (leader as i32, Sent::NodeDigest)));
    }
    sent
}

/// The rank `rank` sends its payload (or digest) to and measures its clock
/// against: its node's leader, else rank 0.
fn receiver_of(nodes: Option<&Nodes>, rank: u32) -> u32 {
    match nodes.and_then(|nodes| nodes.leader(rank)) {
        Some(leader) if leader != rank => leader,
        _ => 0,
    }
}

/// The payloads of `ranks`, to be taken.
fn payloads_of(ranks: std::ops::Range<u32>) -> Vec<(i32, Sent)> {
    ranks.map(|rank| (rank as i32, Sent::Payload)).collect()
}

/// `peer`'s payload as received: decoded, or why there is none.
fn payload_of(peer: i32, bytes: Result<Vec<u8>, Rejection>) -> Candidate {
    Candidate {
        source: format!("rank {peer} over MPI"),
        payload: bytes.and_then(|bytes| payload::decode(&bytes).map_err(Rejection::Payload)),
    }
}

/// A node leader's gather: its node's payloads, taken until the time to
/// forward is what is left ([`Nodes::members_by`]) while it `answers` their
/// clock pings, digested with its own into one node digest, sent to rank
/// 0; said where that failed (the payloads are in their spill files).
fn forward_node(
    on: Channel<'_>,
    nodes: &Nodes,
    payload: &[u8],
    session: &SessionInfo<'_>,
    (deadline, answers): (Instant, &mut ClockAnswers<'_>),
) {
    let members = sent_to(Some(nodes), session.rank, session.world_size);
    let arrived = collect(on, members, (Nodes::members_by(deadline), answers))
        .into_iter()
        .map(|(peer, _, bytes)| payload_of(peer, bytes))
        .collect();
    let Some(digest) = nodes.digest_node(payload, (arrived, Vec::new()), session) else {
        return;
    };
    if !send_sized(on, 0, Sent::NodeDigest, &digest, deadline) {
        say!(
            "rank 0 did not take this node's digest in time; its ranks' payloads are in their \
             spill files"
        );
    }
}

/// Takes what each of `expected` sends (its size, then its chunks) as it
/// arrives, until all of it came or `deadline` passed, meanwhile answering
/// the clock pings of the ranks that send it (`answers`); in the order it
/// arrived.
fn collect(
    on: Channel<'_>,
    mut pending: Vec<(i32, Sent)>,
    (deadline, answers): (Instant, &mut ClockAnswers<'_>),
) -> Vec<(i32, Sent, Result<Vec<u8>, Rejection>)> {
    let mut arrived = Vec::new();
    let mut polls = 0;
    while !pending.is_empty() && Instant::now() < deadline {
        let before = pending.len();
        let answered = answers.answer_waiting(deadline);
        pending.retain(|&(peer, sent)| match probe_size(on, peer, sent) {
            None => true,
            Some(size) => {
                arrived.push((peer, sent, receive_sized(on, peer, sent, size, deadline)));
                false
            }
        });
        match answered || pending.len() < before {
            true => polls = 0,
            false => back_off(&mut polls),
        }
    }
    arrived
}

/// Waits until `deadline` for a message of `source` with `tag` of at most
/// `max` bytes, and receives it. A message past `max` is left unreceived.
fn receive(
    comm: &SimpleCommunicator,
    source: i32,
    tag: i32,
    max: usize,
    deadline: Instant,
) -> Option<Vec<u8>> {
    let process = comm.process_at_rank(source);
    let mut polls = 0u32;
    loop {
        if let Some(status) = process.immediate_probe_with_tag(tag) {
            let count = usize::try_from(status.count(u8::equivalent_datatype())).ok()?;
            if count > max {
                return None;
            }
            let mut buffer = vec![0u8; count];
            process.receive_into_with_tag(&mut buffer[..], tag);
            return Some(buffer);
        }
        if Instant::now() >= deadline {
            return None;
        }
        back_off(&mut polls);
    }
}

/// The size `peer` announced for what it sends, if it has sent it.
fn probe_size(on: Channel<'_>, peer: i32, sent: Sent) -> Option<u64> {
    let size_tag = on.tags.size(sent);
    let process = on.comm.process_at_rank(peer);
    let status = process.immediate_probe_with_tag(size_tag)?;
    let mut bytes = [0u8; 8];
    if status.count(u8::equivalent_datatype()) != bytes.len() as i32 {
        // Not a size (left unreceived): refused as past every limit.
        return Some(u64::MAX);
    }
    process.receive_into_with_tag(&mut bytes[..], size_tag);
    Some(u64::from_le_bytes(bytes))
}

/// Receives the chunks of what `peer` sends, of `size` bytes.
fn receive_sized(
    on: Channel<'_>,
    peer: i32,
    sent: Sent,
    size: u64,
    deadline: Instant,
) -> Result<Vec<u8>, Rejection> {
    if size > MAX_PAYLOAD_BYTES {
        return Err(Rejection::TooLarge { bytes: size });
    }
    let chunk_tag = on.tags.chunk(sent);
    let mut bytes = Vec::with_capacity(size as usize);
    while (bytes.len() as u64) < size {
        let left = size as usize - bytes.len();
        match receive(on.comm, peer, chunk_tag, left.min(CHUNK_BYTES), deadline) {
            Some(chunk) if !chunk.is_empty() => bytes.extend_from_slice(&chunk),
            _ => {
                return Err(Rejection::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{} of {size} bytes arrived before the deadline",
                        bytes.len()
                    ),
                )))
            }
        }
    }
    Ok(bytes)
}

/// Sends `bytes` to `peer`: its size, then its chunks. Past `deadline`
/// the send is left to MPI and `false` returned: the rank goes on (its
/// spill file holds the same payload).
fn send_sized(on: Channel<'_>, peer: i32, sent: Sent, bytes: &[u8], deadline: Instant) -> bool {
    let (size_tag, chunk_tag) = (on.tags.size(sent), on.tags.chunk(sent));
    let size = (bytes.len() as u64).to_le_bytes();
    send(on.comm, peer, &size, size_tag, deadline)
        && bytes
            .chunks(CHUNK_BYTES)
            .all(|chunk| send(on.comm, peer, chunk, chunk_tag, deadline))
}

/// Sends `bytes` to `peer` with `tag`: a non-blocking send, polled until it
/// completes or `deadline` passes; then it is left to MPI (which may still
/// deliver it) and `false` returned.
fn send(comm: &SimpleCommunicator, peer: i32, bytes: &[u8], tag: i32, deadline: Instant) -> bool {
    // A copy that outlives this call: MPI may read an abandoned send's
    // buffer at any time.
    let buffer = SendBuffer::new(bytes);
    // SAFETY: freed below only once the send completed.
    let lent = unsafe { buffer.bytes() };
    let mut request = comm
        .process_at_rank(peer)
        .immediate_send_with_tag(StaticScope, lent, tag);
    let mut polls = 0;
    loop {
        match request.test() {
            Ok(_) => {
                // SAFETY: the send completed; nothing reads the bytes.
                unsafe { buffer.free() };
                return true;
            }
            Err(pending) if Instant::now() >= deadline => {
                // SAFETY: the request is abandoned, never waited on; the
                // buffer is not freed, so MPI may still read it.
                let _ = unsafe { pending.into_raw() };
                return false;
            }
            Err(pending) => {
                request = pending;
                back_off(&mut polls);
            }
        }
    }
}

/// Waits between two polls: spins briefly (a ping-pong answer is
/// microseconds away), then sleeps up to 2 ms (a payload may be seconds
/// away). `polls` counts the polls so far.
fn back_off(polls: &mut u32) {
    *polls += 1;
    match *polls {
        0..=2_000 => std::thread::yield_now(),
        _ => std::thread::sleep(Duration::from_micros(u64::from(
            (*polls).min(4_000) - 2_000,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sessions_tags_are_its_own_within_the_tags_every_mpi_has() {
        let all = |tags: Tags| {
            let sent = [Sent::Payload, Sent::NodeDigest];
            let mut all = vec![tags.run(), tags.ping(), tags.pong()];
            all.extend(sent.iter().flat_map(|&s| [tags.size(s), tags.chunk(s)]));
            all
        };
        let mut seen = std::collections::BTreeSet::new();
        for k in 0..Tags::SESSIONS {
            for tag in all(Tags::of_session(k)) {
                assert!(seen.insert(tag), "session {k}: tag {tag} taken before");
                assert!((0..=32_767).contains(&tag));
            }
        }
        assert_eq!(Tags::of_session(Tags::SESSIONS), Tags::of_session(0));
    }
}
