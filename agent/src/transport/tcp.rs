//! The TCP transport, for torchrun and any launcher that sets RANK,
//! WORLD_SIZE, MASTER_ADDR and MASTER_PORT: no shared file system and no
//! MPI needed. Rank 0 listens on `RANKSCOPE_ADDR` (default MASTER_ADDR) at
//! `RANKSCOPE_PORT` (default MASTER_PORT + 1) from session start to the end
//! of its gather; the other ranks connect three times:
//!
//! - at session start, the rendezvous: rank 0 gives the run's identity and
//!   measures the rank's clock offset by ping-pong ([`super::clock`]);
//! - at finish, the same ping-pong again (drift), then the payload.
//!
//! Every connection opens with a fresh 32-byte challenge from rank 0 that
//! the peer answers with an HMAC-SHA256 under the job token (compared in
//! constant time); a peer that fails, sends anything but the protocol,
//! announces a frame past `max_frame_bytes`, goes silent, or claims a rank
//! already received is cut off and named in the report, and never reaches
//! it. Every read and write has a timeout and every wait a deadline, and
//! each connection has a thread of its own: one slow peer delays nobody.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use rankscope_common::env::RankEnv;
use rankscope_common::gather::{
    Candidate, ConnectionRefusal, Rejection, Skipped, MAX_LISTED_SKIPPED,
};
use rankscope_common::payload::{self, ClockOffset, ClockSync, TransportName};
use rankscope_common::{Config, Gathered};
use sha2::{Digest, Sha256};

use super::clock::{self, Round, ROUNDS};
use super::dir::DirTransport;
use super::token_file;
use super::{Rendezvous, SessionInfo, Transport, TransportError};
use crate::notice::{notice, say};
use crate::sync::lock;

/// Message kinds: one byte before each frame's length.
mod kind {
    pub const CHALLENGE: u8 = 1;
    pub const HELLO: u8 = 2;
    pub const RUN: u8 = 4;
    pub const PING: u8 = 5;
    pub const PONG: u8 = 6;
    pub const OFFSET: u8 = 7;
    pub const PAYLOAD: u8 = 8;
    pub const ACK: u8 = 9;
}

/// What a connection is for.
mod purpose {
    pub const RENDEZVOUS: u8 = 1;
    pub const RESYNC: u8 = 2;
    pub const PAYLOAD: u8 = 3;
}

/// Largest control frame (everything but a payload).
const MAX_CONTROL_BYTES: u64 = 4096;
/// How long a connection's greeting (and a clock exchange) may take, all
/// of it: a peer slower than that is cut off, however it drips its bytes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A greeting: rank, purpose, the peer's nonce, its proof.
const HELLO_BYTES: usize = 4 + 1 + 16 + 32;
/// How long a rank tries to reach rank 0 at session start.
const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(30);

/// Gathers over authenticated TCP connections to rank 0.
pub struct TcpTransport {
    /// Rank 0's listener: `host:port`.
    endpoint: String,
    token: Vec<u8>,
    /// The token is rank 0's, made at each rendezvous and read by the
    /// others from the session directory (a one-machine job given none).
    shared_token: bool,
    max_frame: u64,
    payload_timeout: Duration,
    clock_shift_ns: i64,
    /// Rank 0's listener while a session runs.
    server: Option<Server>,
    /// Rank 0 could not listen: this session gathers through the directory.
    fallback: Option<DirTransport>,
    /// A rank other than 0 reached rank 0 at the session's start.
    reached: bool,
}

/// Why the TCP transport could not be set up.
fn unavailable(what: &'static str) -> TransportError {
    TransportError::Tcp(what)
}

impl TcpTransport {
    /// The transport for the rank `env` describes, with `config`'s address,
    /// port and token (defaults from torchrun's variables).
    pub fn for_rank(config: &Config, env: &RankEnv) -> Result<Self, TransportError> {
        let (master_addr, master_port) = env.master.clone().unzip();
        let host = config
            .addr
            .clone()
            .or(master_addr)
            .ok_or_else(|| unavailable("no address: set MASTER_ADDR or RANKSCOPE_ADDR"))?;
        let port = match (config.port, master_port) {
            (Some(port), _) => port,
            (None, Some(master)) => master
                .checked_add(1)
                .ok_or_else(|| unavailable("MASTER_PORT + 1 is not a port: set RANKSCOPE_PORT"))?,
            (None, None) => return Err(unavailable("no port: set MASTER_PORT or RANKSCOPE_PORT")),
        };
        let endpoint = format!("{host}:{port}");
        // A job on one machine that was given no token: rank 0 makes one
        // at the rendezvous and leaves it for the others (`token_file`).
        let shared_token = config.token.is_none()
            && env.world_size > 1
            && env.local_world_size == Some(env.world_size);
        let token = match &config.token {
            Some(token) => token.as_bytes().to_vec(),
            None if shared_token => Vec::new(),
            None => {
                // Derived: anyone who knows the run id, address and port can
                // derive it too, and is told so.
                notice!(
                    "no RANKSCOPE_TOKEN: the TCP gather's token is derived from the launcher's \
                     run id (`{}`) and {endpoint}, which anyone who can read them can derive \
                     too, and so add or replace a rank's data; set RANKSCOPE_TOKEN to a secret \
                     per job (rankscope launch does)",
                    env.job_id.as_deref().unwrap_or("none")
                );
                let mut hasher = Sha256::new();
                hasher.update(b"rankscope job token\0");
                hasher.update(env.job_id.as_deref().unwrap_or("").as_bytes());
                hasher.update(b"\0");
                hasher.update(endpoint.as_bytes());
                hasher.finalize().to_vec()
            }
        };
        Ok(TcpTransport {
            endpoint,
            token,
            shared_token,
            max_frame: config.max_frame_bytes,
            payload_timeout: Duration::from_secs_f64(config.gather_timeout_s),
            clock_shift_ns: config.clock_shift_ns,
            server: None,
            fallback: None,
            reached: false,
        })
    }

    fn now(&self) -> i64 {
        clock::wall_now_ns(self.clock_shift_ns)
    }

    /// Connects to rank 0 for `what`, retrying with backoff until `deadline`.
    fn connect(&self, rank: u32, what: u8, deadline: Instant) -> Option<Link> {
        let mut pause = Duration::from_millis(10);
        loop {
            if let Some(stream) = self.try_connect(rank, what, deadline) {
                return Some(stream);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Rank 0 gathers through the session directory this session.
    fn fall_back(
        &mut self,
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Rendezvous, TransportError> {
        let mut fallback = DirTransport;
        let rendezvous = fallback.open(session, deadline);
        self.fallback = Some(fallback);
        rendezvous
    }

    /// A one-machine job given no token: rank 0 makes one (once: later
    /// sessions of this process keep it) and leaves it for this launch in
    /// the session directory; the others read it there by `deadline`.
    /// `false` (said in a notice) where that failed.
    fn share_token(&mut self, session: &SessionInfo<'_>, deadline: Instant) -> bool {
        let dir = session.session_dir;
        let run = session.run_id.unwrap_or("");
        if session.rank == 0 {
            let made = match self.token.is_empty() {
                true => token_file::fresh(),
                false => Ok(self.token.clone()),
            };
            let left = made.and_then(|token| {
                token_file::write(dir, &self.endpoint, run, &token).map(|()| token)
            });
            return match left {
                Ok(token) => {
                    self.token = token;
                    true
                }
                Err(e) => {
                    notice!(
                        "cannot leave the job token in {}: {e}; the ranks gather through the \
                         session directory instead (set RANKSCOPE_TOKEN)",
                        dir.display()
                    );
                    false
                }
            };
        }
        match token_file::read(dir, &self.endpoint, run, deadline) {
            Some(token) => {
                self.token = token;
                true
            }
            None => {
                notice!(
                    "rank 0 left no job token in {} in time; this rank's data stays in its \
                     spill file (set RANKSCOPE_TOKEN to the same secret on every rank)",
                    dir.display()
                );
                false
            }
        }
    }

    fn try_connect(&self, rank: u32, what: u8, deadline: Instant) -> Option<Link> {
        let address = self.endpoint.to_socket_addrs().ok()?.next()?;
        let timeout = deadline
            .saturating_duration_since(Instant::now())
            .min(HANDSHAKE_TIMEOUT);
        let mut stream =
            TcpStream::connect_timeout(&address, timeout.max(Duration::from_millis(1))).ok()?;
        stream.set_nodelay(true).ok()?;
        let handshake = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
        let challenge =
            read_frame(&mut stream, kind::CHALLENGE, MAX_CONTROL_BYTES, handshake).ok()?;
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).ok()?;
        let mut hello = Vec::with_capacity(HELLO_BYTES);
        hello.extend_from_slice(&rank.to_le_bytes());
        hello.push(what);
        hello.extend_from_slice(&nonce);
        hello.extend_from_slice(&proof(&self.token, &challenge, rank, what, &nonce));
        write_frame(&mut stream, kind::HELLO, &hello, handshake).ok()?;
        Some(Link {
            stream,
            challenge,
            nonce,
        })
    }

    /// A reply of rank 0's of `kind`, by `deadline`, if rank 0 sealed it
    /// (proving it knows the token).
    fn read_reply(&self, link: &mut Link, kind: u8, deadline: Instant) -> Option<Vec<u8>> {
        let frame = read_frame(&mut link.stream, kind, MAX_CONTROL_BYTES, deadline).ok()?;
        let body = unsealed(&self.token, &link.challenge, &link.nonce, kind, &frame);
        if body.is_none() {
            notice!(
                "a reply claiming to be rank 0's at {} was not: ignored",
                self.endpoint
            );
        }
        body
    }

    /// The peer's side of a ping-pong: answers rank 0's pings with this
    /// rank's clock, then reads the offset rank 0 worked out.
    fn answer_clock(&self, link: &mut Link, deadline: Instant) -> Option<ClockOffset> {
        for _ in 0..ROUNDS {
            read_frame(&mut link.stream, kind::PING, MAX_CONTROL_BYTES, deadline).ok()?;
            write_frame(
                &mut link.stream,
                kind::PONG,
                &self.now().to_le_bytes(),
                deadline,
            )
            .ok()?;
        }
        let offset = self.read_reply(link, kind::OFFSET, deadline)?;
        clock::decode(&offset)
    }
}

/// A rank's connection to rank 0, after its greeting.
struct Link {
    stream: TcpStream,
    challenge: Vec<u8>,
    nonce: [u8; 16],
}

impl Transport for TcpTransport {
    fn name(&self) -> TransportName {
        match self.fallback {
            Some(_) => TransportName::Dir,
            None => TransportName::Tcp,
        }
    }

    fn close(&mut self) {
        // Dropping the listener stops it.
        self.server = None;
        self.fallback = None;
    }

    fn open(
        &mut self,
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Rendezvous, TransportError> {
        let deadline = deadline.min(Instant::now() + RENDEZVOUS_TIMEOUT);
        if self.shared_token && !self.share_token(session, deadline) {
            if session.rank == 0 {
                return self.fall_back(session, deadline);
            }
            self.reached = false;
            return Ok(Rendezvous {
                run_id: session.run_id.map(str::to_string),
                clock_sync: ClockSync::TcpPingpong,
                offset: None,
                endpoint: Some(self.endpoint.clone()),
            });
        }
        if session.rank == 0 {
            let run_id = clock::session_run_id(session.run_id, "tcp", self.now());
            let listener = match TcpListener::bind(&self.endpoint) {
                Ok(listener) => listener,
                Err(e) => {
                    // The job must not fail for its profiler: the session
                    // directory (if shared) still gathers what it can.
                    notice!(
                        "cannot listen at {}: {e}; the ranks gather through the session \
                         directory instead (set RANKSCOPE_PORT to a free port)",
                        self.endpoint
                    );
                    return self.fall_back(session, deadline);
                }
            };
            self.server = Some(Server::start(
                listener,
                ServerSettings {
                    token: self.token.clone(),
                    payload_timeout: self.payload_timeout,
                    session_id: session.session_id.to_string(),
                    run_id: run_id.clone(),
                    world_size: session.world_size,
                    max_frame: self.max_frame,
                    clock_shift_ns: self.clock_shift_ns,
                },
            )?);
            return Ok(Rendezvous {
                run_id: Some(run_id),
                clock_sync: ClockSync::TcpPingpong,
                offset: Some(ClockOffset {
                    offset_ns: 0,
                    round_trip_ns: 0,
                }),
                endpoint: Some(self.endpoint.clone()),
            });
        }
        let met = self
            .connect(session.rank, purpose::RENDEZVOUS, deadline)
            .and_then(|mut link| {
                let run = self.read_reply(&mut link, kind::RUN, deadline)?;
                let run = String::from_utf8(run).ok()?;
                let offset = self.answer_clock(&mut link, deadline);
                Some((run, offset))
            });
        self.reached = met.is_some();
        let (run_id, offset) = match met {
            Some((run, offset)) => (Some(run), offset),
            None => {
                notice!(
                    "rank 0 at {} did not answer the rendezvous in time; the launcher's run \\
                     identity is used and the clock offset is unknown",
                    self.endpoint
                );
                (session.run_id.map(str::to_string), None)
            }
        };
        Ok(Rendezvous {
            run_id,
            clock_sync: ClockSync::TcpPingpong,
            offset,
            endpoint: Some(self.endpoint.clone()),
        })
    }

    fn resync(&mut self, session: &SessionInfo<'_>, deadline: Instant) -> Option<ClockOffset> {
        if session.rank == 0 {
            return Some(ClockOffset {
                offset_ns: 0,
                round_trip_ns: 0,
            });
        }
        if !self.reached {
            return None;
        }
        let mut link = self.connect(session.rank, purpose::RESYNC, deadline)?;
        self.answer_clock(&mut link, deadline)
    }

    fn gather(
        &mut self,
        payload: &[u8],
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Option<Gathered>, TransportError> {
        if let Some(fallback) = &mut self.fallback {
            return fallback.gather(payload, session, deadline);
        }
        if session.rank != 0 {
            if !self.reached {
                // Rank 0 did not answer at the start: the spill file is the send.
                return Ok(None);
            }
            let sent = self
                .connect(session.rank, purpose::PAYLOAD, deadline)
                .and_then(|mut link| {
                    write_frame(&mut link.stream, kind::PAYLOAD, payload, deadline).ok()?;
                    // Rank 0 may take a while to decode: the ACK by the deadline.
                    let ack_by = deadline.max(Instant::now() + HANDSHAKE_TIMEOUT);
                    self.read_reply(&mut link, kind::ACK, ack_by)
                });
            if sent.is_none() {
                say!("rank 0 did not take this rank's payload in time; it is in the spill file");
            }
            return Ok(None);
        }
        let server = self.server.take().ok_or(unavailable(
            "rank 0's listener is not running: the session did not open it",
        ))?;
        let collected = server.finish(deadline);
        let mut gathered =
            super::gathered_by_rank0(payload, collected.payloads.into_values().collect(), session);
        gathered.skipped.extend(collected.refused);
        Ok(Some(gathered))
    }
}

/// What rank 0's listener needs to know.
struct ServerSettings {
    token: Vec<u8>,
    /// How long a payload's frame may take to arrive.
    payload_timeout: Duration,
    session_id: String,
    run_id: String,
    world_size: u32,
    max_frame: u64,
    clock_shift_ns: i64,
}

/// What the listener collected.
#[derive(Default)]
struct Collected {
    payloads: BTreeMap<u32, Candidate>,
    /// The first [`MAX_LISTED_SKIPPED`] connections refused, with why (a
    /// port scan must not grow rank 0's memory).
    refused: Vec<Skipped>,
    /// How many more were refused.
    unlisted: u64,
}

/// Connections that have not authenticated yet, kept apart from the
/// ranks': at most this many, the oldest cut off to make room for a new
/// one. Strangers flooding the port then cannot keep a rank out: its
/// connection gets in and authenticates in one round trip, long before as
/// many newer connections push it out.
const MAX_UNAUTHENTICATED: usize = 64;

/// The longest a peer may go without sending a byte of a frame it began:
/// a stalled frame gives back its share of the frame budget then, not at
/// the gather's deadline.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of payload frames rank 0 holds at once, across all its
/// connections (each frame is within `max_frame_bytes` too): a frame takes
/// its whole length from the budget (all of it, for a frame larger than
/// the budget) before its body is read, waiting for room, so that many
/// peers sending large frames at once cannot take rank 0's memory, and no
/// two frames each hold part of the budget while waiting for the rest.
const FRAMES_IN_FLIGHT_BYTES: u64 = 512 << 20;

/// The bytes of frames held now, against [`FRAMES_IN_FLIGHT_BYTES`].
#[derive(Default)]
struct FrameBudget {
    held: Mutex<u64>,
    freed: Condvar,
}

impl FrameBudget {
    /// Takes `bytes` once they fit (or nothing else is held), by
    /// `deadline`; they are given back when the [`Held`] is dropped.
    fn take(&self, bytes: u64, deadline: Instant) -> Result<Held<'_>, ConnectionRefusal> {
        let mut taken = lock(&self.held);
        while *taken > 0 && *taken + bytes > FRAMES_IN_FLIGHT_BYTES {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnectionRefusal::Stalled);
            }
            taken = self
                .freed
                .wait_timeout(taken, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *taken += bytes;
        Ok(Held {
            budget: Some(self),
            bytes,
        })
    }
}

/// Bytes of a frame held against a [`FrameBudget`]; given back on drop.
struct Held<'a> {
    budget: Option<&'a FrameBudget>,
    bytes: u64,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(budget) = self.budget {
            *lock(&budget.held) -= self.bytes;
            budget.freed.notify_all();
        }
    }
}

/// State shared by the listener and its connection threads.
struct Shared {
    /// Payload frames being received.
    frames: FrameBudget,
    settings: ServerSettings,
    collected: Mutex<Collected>,
    arrived: Condvar,
    /// Authenticated connections open now.
    connections: AtomicUsize,
    /// Connections not authenticated yet, oldest first, by id.
    unauthenticated: Mutex<VecDeque<(u64, TcpStream)>>,
    stop: AtomicBool,
}

impl Shared {
    /// Takes `stream` in among the unauthenticated connections, cutting
    /// the oldest off past [`MAX_UNAUTHENTICATED`]; `false` when it cannot
    /// be kept track of (no file descriptor for its handle): then it is
    /// not served.
    fn admit(&self, id: u64, stream: &TcpStream) -> bool {
        let Ok(handle) = stream.try_clone() else {
            return false;
        };
        let mut waiting = lock(&self.unauthenticated);
        if waiting.len() >= MAX_UNAUTHENTICATED {
            if let Some((_, oldest)) = waiting.pop_front() {
                let _ = oldest.shutdown(Shutdown::Both);
            }
        }
        waiting.push_back((id, handle));
        true
    }

    /// Connection `id` is no longer waiting to authenticate; `false` if it
    /// was cut off meanwhile.
    fn leave(&self, id: u64) -> bool {
        let mut waiting = lock(&self.unauthenticated);
        match waiting.iter().position(|(waiting_id, _)| *waiting_id == id) {
            Some(at) => {
                waiting.remove(at);
                true
            }
            None => false,
        }
    }
}

/// Rank 0's listener: a thread accepting connections, a thread for each.
struct Server {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(listener: TcpListener, settings: ServerSettings) -> Result<Self, TransportError> {
        listener
            .set_nonblocking(true)
            .map_err(|source| TransportError::Io {
                path: "listener".into(),
                source,
            })?;
        let shared = Arc::new(Shared {
            settings,
            collected: Mutex::default(),
            arrived: Condvar::new(),
            frames: FrameBudget::default(),
            connections: AtomicUsize::new(0),
            unauthenticated: Mutex::default(),
            stop: AtomicBool::new(false),
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

    /// Waits until every other rank's payload arrived or `deadline`, then
    /// stops listening and hands over what was collected.
    fn finish(mut self, deadline: Instant) -> Collected {
        let expected = self.shared.settings.world_size.saturating_sub(1) as usize;
        let mut collected = lock(&self.shared.collected);
        while collected.payloads.len() < expected {
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

/// Where a connection got to, for what to count and say when it ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reached {
    /// Still among the unauthenticated (or cut off from them).
    Waiting,
    /// Authenticated, and out of the waiting list.
    LeftWaiting,
    /// Counted among the authenticated connections.
    Counted,
}

/// Serves connection `id` and records why it was refused, if it was.
fn serve_connection(stream: TcpStream, id: u64, source: String, shared: &Shared) {
    let mut reached = Reached::Waiting;
    let result = serve(stream, id, &mut reached, shared);
    if reached == Reached::Counted {
        shared.connections.fetch_sub(1, Ordering::SeqCst);
    }
    let was_waiting = shared.leave(id);
    if let Err(refusal) = result {
        // Cut off while it waited to authenticate: its read failed for that.
        let refusal = if reached == Reached::Waiting && !was_waiting {
            ConnectionRefusal::Evicted
        } else {
            refusal
        };
        refuse(shared, source, refusal);
    }
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

/// One connection, from the challenge to the end of what it came for;
/// `reached` says how far it got.
fn serve(
    mut stream: TcpStream,
    id: u64,
    reached: &mut Reached,
    shared: &Shared,
) -> Result<(), ConnectionRefusal> {
    let settings = &shared.settings;
    // The handshake and a clock exchange are quick, whoever the peer is.
    let handshake = Instant::now() + HANDSHAKE_TIMEOUT;
    stream
        .set_nonblocking(false)
        .map_err(|_| ConnectionRefusal::Stalled)?;
    let _ = stream.set_nodelay(true);
    let mut challenge = [0u8; 32];
    getrandom::fill(&mut challenge).map_err(|_| ConnectionRefusal::Malformed("no randomness"))?;
    write_frame(&mut stream, kind::CHALLENGE, &challenge, handshake)?;
    let hello = read_frame(&mut stream, kind::HELLO, MAX_CONTROL_BYTES, handshake)?;
    if hello.len() != HELLO_BYTES {
        return Err(ConnectionRefusal::Malformed(
            "a greeting of the wrong length",
        ));
    }
    let rank = u32::from_le_bytes(hello[..4].try_into().expect("4 bytes"));
    let what = hello[4];
    let nonce = &hello[5..21];
    let mut mac = Hmac::<Sha256>::new_from_slice(&settings.token).expect("HMAC takes any key");
    mac.update(&challenge);
    mac.update(&rank.to_le_bytes());
    mac.update(&[what]);
    mac.update(nonce);
    // verify_slice compares in constant time.
    mac.verify_slice(&hello[21..])
        .map_err(|_| ConnectionRefusal::BadToken)?;
    if !shared.leave(id) {
        return Err(ConnectionRefusal::Evicted);
    }
    *reached = Reached::LeftWaiting;
    // Authenticated: among the ranks' connections, a budget of their own.
    let most = settings.world_size as usize * 2 + 16;
    if shared.connections.fetch_add(1, Ordering::SeqCst) >= most {
        shared.connections.fetch_sub(1, Ordering::SeqCst);
        return Err(ConnectionRefusal::TooMany);
    }
    *reached = Reached::Counted;
    if rank == 0 || rank >= settings.world_size {
        return Err(ConnectionRefusal::OutsideWorld {
            rank,
            world_size: settings.world_size,
        });
    }
    let reply = |kind: u8, body: &[u8]| sealed(&settings.token, &challenge, nonce, kind, body);
    match what {
        purpose::RENDEZVOUS => {
            write_frame(
                &mut stream,
                kind::RUN,
                &reply(kind::RUN, settings.run_id.as_bytes()),
                handshake,
            )?;
            let offset = ping_pong(&mut stream, settings.clock_shift_ns, handshake)?;
            write_frame(
                &mut stream,
                kind::OFFSET,
                &reply(kind::OFFSET, &offset),
                handshake,
            )
        }
        purpose::RESYNC => {
            let offset = ping_pong(&mut stream, settings.clock_shift_ns, handshake)?;
            write_frame(
                &mut stream,
                kind::OFFSET,
                &reply(kind::OFFSET, &offset),
                handshake,
            )
        }
        purpose::PAYLOAD => {
            if let Some(first) = lock(&shared.collected).payloads.get(&rank) {
                return Err(ConnectionRefusal::DuplicateRank {
                    rank,
                    first: first.source.clone(),
                });
            }
            let until = Instant::now() + settings.payload_timeout;
            let (bytes, _held) = read_frame_within(
                &mut stream,
                kind::PAYLOAD,
                settings.max_frame,
                until,
                Some(&shared.frames),
            )?;
            // Only this rank's payload of this session and run takes its place.
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
            {
                let mut collected = lock(&shared.collected);
                if shared.stop.load(Ordering::SeqCst) {
                    return Err(ConnectionRefusal::Late);
                }
                if let Some(first) = collected.payloads.get(&rank) {
                    return Err(ConnectionRefusal::DuplicateRank {
                        rank,
                        first: first.source.clone(),
                    });
                }
                let peer = stream
                    .peer_addr()
                    .map_or_else(|_| "an unknown address".into(), |a| a.to_string());
                collected.payloads.insert(
                    rank,
                    Candidate {
                        source: format!("rank {rank} over TCP from {peer}"),
                        payload: Ok(payload),
                    },
                );
            }
            shared.arrived.notify_all();
            let _ = write_frame(
                &mut stream,
                kind::ACK,
                &reply(kind::ACK, &[]),
                handshake.max(Instant::now() + HANDSHAKE_TIMEOUT),
            );
            Ok(())
        }
        _ => Err(ConnectionRefusal::Malformed("an unknown purpose")),
    }
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

/// The peer's proof that it knows `token`: HMAC-SHA256 of the challenge,
/// its rank, the connection's purpose and its own nonce.
fn proof(token: &[u8], challenge: &[u8], rank: u32, what: u8, nonce: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(token).expect("HMAC takes any key");
    mac.update(challenge);
    mac.update(&rank.to_le_bytes());
    mac.update(&[what]);
    mac.update(nonce);
    mac.finalize().into_bytes().into()
}

/// Rank 0's proof that a reply is its own: HMAC-SHA256, under the token, of
/// the connection's challenge and the peer's nonce (so that it cannot be
/// replayed on another connection), the reply's kind and its body.
fn seal(token: &[u8], challenge: &[u8], nonce: &[u8], kind: u8, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(token).expect("HMAC takes any key");
    mac.update(b"rank 0");
    mac.update(challenge);
    mac.update(nonce);
    mac.update(&[kind]);
    mac.update(body);
    mac
}

/// `body` followed by its seal.
fn sealed(token: &[u8], challenge: &[u8], nonce: &[u8], kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(
        &seal(token, challenge, nonce, kind, body)
            .finalize()
            .into_bytes(),
    );
    out
}

/// The body of a sealed reply, if its seal is rank 0's (compared in
/// constant time).
fn unsealed(
    token: &[u8],
    challenge: &[u8],
    nonce: &[u8],
    kind: u8,
    frame: &[u8],
) -> Option<Vec<u8>> {
    let (body, mac) = frame.split_at(frame.len().checked_sub(32)?);
    seal(token, challenge, nonce, kind, body)
        .verify_slice(mac)
        .ok()?;
    Some(body.to_vec())
}

/// Writes one frame — its kind, its length (u64, little endian), its bytes —
/// by `deadline`.
fn write_frame(
    stream: &mut TcpStream,
    kind: u8,
    body: &[u8],
    deadline: Instant,
) -> Result<(), ConnectionRefusal> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(ConnectionRefusal::Stalled);
    }
    stream
        .set_write_timeout(Some(left))
        .map_err(|_| ConnectionRefusal::Stalled)?;
    let mut head = [0u8; 9];
    head[0] = kind;
    head[1..].copy_from_slice(&(body.len() as u64).to_le_bytes());
    stream
        .write_all(&head)
        .and_then(|()| stream.write_all(body))
        .and_then(|()| stream.flush())
        .map_err(|e| refusal_of(&e))
}

/// Why a read or write on a connection failed: a peer gone (closed,
/// reset) is told apart from one that went silent (timed out).
fn refusal_of(error: &std::io::Error) -> ConnectionRefusal {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => ConnectionRefusal::Stalled,
        _ => ConnectionRefusal::Closed,
    }
}

/// Reads one frame of kind `expected` and at most `max` bytes, all of it by
/// `deadline` (a peer that sends a byte now and then gets no longer). A
/// length past `max` is refused before anything is allocated; the body's
/// address space is reserved at once (refused, not aborted, where there is
/// none) and its pages filled only as bytes arrive.
fn read_frame(
    stream: &mut TcpStream,
    expected: u8,
    max: u64,
    deadline: Instant,
) -> Result<Vec<u8>, ConnectionRefusal> {
    read_frame_within(stream, expected, max, deadline, None).map(|(body, _)| body)
}

/// [`read_frame`], the frame's whole length (at most the whole budget)
/// taken from `budget` (where one is given) before its body is read; the
/// bytes stay held until the [`Held`] returned is dropped.
fn read_frame_within<'b>(
    stream: &mut TcpStream,
    expected: u8,
    max: u64,
    deadline: Instant,
    budget: Option<&'b FrameBudget>,
) -> Result<(Vec<u8>, Held<'b>), ConnectionRefusal> {
    let mut head = [0u8; 9];
    read_exact_by(stream, &mut head, deadline)?;
    if head[0] != expected {
        return Err(ConnectionRefusal::Malformed("an unexpected message"));
    }
    let len = u64::from_le_bytes(head[1..].try_into().expect("8 bytes"));
    if len > max {
        return Err(ConnectionRefusal::FrameTooLarge {
            bytes: len,
            limit: max,
        });
    }
    let held = match budget {
        Some(budget) => budget.take(len.min(FRAMES_IN_FLIGHT_BYTES), deadline)?,
        None => Held {
            budget: None,
            bytes: 0,
        },
    };
    let mut body = Vec::new();
    body.try_reserve_exact(usize::try_from(len).unwrap_or(usize::MAX))
        .map_err(|_| ConnectionRefusal::Malformed("a frame larger than rank 0 can hold"))?;
    while (body.len() as u64) < len {
        let start = body.len();
        let chunk = (len - start as u64).min(64 << 10) as usize;
        body.resize(start + chunk, 0);
        read_exact_by(stream, &mut body[start..], deadline)?;
    }
    Ok((body, held))
}

/// Fills `buf` from `stream` by `deadline`, with no pause longer than
/// [`IDLE_TIMEOUT`] between bytes.
fn read_exact_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<(), ConnectionRefusal> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ConnectionRefusal::Stalled);
        }
        stream
            .set_read_timeout(Some(left.min(IDLE_TIMEOUT)))
            .map_err(|_| ConnectionRefusal::Stalled)?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(ConnectionRefusal::Closed),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(refusal_of(&e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_depends_on_the_token_the_challenge_the_rank_and_the_purpose() {
        let base = proof(b"token", &[1; 32], 3, purpose::PAYLOAD, &[7; 16]);
        assert_eq!(
            base,
            proof(b"token", &[1; 32], 3, purpose::PAYLOAD, &[7; 16])
        );
        assert_ne!(
            base,
            proof(b"other", &[1; 32], 3, purpose::PAYLOAD, &[7; 16])
        );
        assert_ne!(
            base,
            proof(b"token", &[2; 32], 3, purpose::PAYLOAD, &[7; 16])
        );
        assert_ne!(
            base,
            proof(b"token", &[1; 32], 4, purpose::PAYLOAD, &[7; 16])
        );
        assert_ne!(
            base,
            proof(b"token", &[1; 32], 3, purpose::RESYNC, &[7; 16])
        );
        assert_ne!(
            base,
            proof(b"token", &[1; 32], 3, purpose::PAYLOAD, &[8; 16])
        );
    }

    #[test]
    fn a_reply_is_rank_zeros_only_under_its_seal() {
        let reply = sealed(b"token", &[1; 32], &[2; 16], kind::RUN, b"run-7");
        assert_eq!(
            unsealed(b"token", &[1; 32], &[2; 16], kind::RUN, &reply).as_deref(),
            Some(&b"run-7"[..])
        );
        assert!(unsealed(b"guess", &[1; 32], &[2; 16], kind::RUN, &reply).is_none());
        assert!(
            unsealed(b"token", &[1; 32], &[3; 16], kind::RUN, &reply).is_none(),
            "no replay"
        );
        assert!(unsealed(b"token", &[1; 32], &[2; 16], kind::OFFSET, &reply).is_none());
        assert!(unsealed(b"token", &[1; 32], &[2; 16], kind::RUN, b"short").is_none());
    }

    /// Without RANKSCOPE_TOKEN the derived token is public: said so, with
    /// what it is derived from.
    #[test]
    fn a_derived_token_is_said_to_be_public() {
        let env = RankEnv {
            job_id: Some("none".into()),
            master: Some(("127.0.0.1".into(), 29500)),
            ..RankEnv::single()
        };
        TcpTransport::for_rank(&Config::default(), &env).unwrap();
        let kept = crate::notice::take_kept();
        assert!(
            kept.iter().any(|n| n.starts_with("no RANKSCOPE_TOKEN")
                && n.contains("run id (`none`) and 127.0.0.1:29501")),
            "{kept:?}"
        );
    }

    /// A peer that closed or reset the connection is told apart from one
    /// that went silent.
    #[test]
    fn a_closed_connection_is_not_a_silent_one() {
        use std::io::{Error, ErrorKind};
        for kind in [ErrorKind::WouldBlock, ErrorKind::TimedOut] {
            assert_eq!(refusal_of(&Error::from(kind)), ConnectionRefusal::Stalled);
        }
        for kind in [
            ErrorKind::ConnectionReset,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
        ] {
            assert_eq!(refusal_of(&Error::from(kind)), ConnectionRefusal::Closed);
        }
    }
}
