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
//! A job on several nodes (LOCAL_WORLD_SIZE below WORLD_SIZE) gathers in
//! two levels (`gather_levels: 2`, the default): each node's leader (its
//! local rank 0; rank 0 for its own node) listens on loopback from its
//! rendezvous with rank 0 on, and leaves its address in the session
//! directory as rank 0 leaves a token (`token_file`); its node's ranks
//! meet it instead of rank 0 (their clock offset to rank 0 through its
//! own), resync with it and send it their payloads, and it sends rank 0
//! one digest of them all (`rankscope_coordinator::analysis::leader_digest`).
//!
//! Every connection opens with a fresh 32-byte challenge from rank 0 that
//! the peer answers with an HMAC-SHA256 under the job token (compared in
//! constant time); a peer that fails, sends anything but the protocol,
//! announces a frame past `max_frame_bytes`, goes silent, or claims a rank
//! already received is cut off and named in the report, and never reaches
//! it. Every read and write has a timeout and every wait a deadline, and
//! each connection has a thread of its own: one slow peer delays nobody.
//!
//! This module is the ranks' side; `server.rs` is rank 0's listener and
//! `wire.rs` what crosses a connection (frames, proofs, seals).

use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::time::{Duration, Instant};

use rankscope_common::env::RankEnv;
use rankscope_common::error::Chain;
use rankscope_common::gather::ConnectionRefusal;
use rankscope_common::payload::{ClockOffset, ClockSync, TransportName};
use rankscope_common::{Config, Gathered};
use sha2::{Digest, Sha256};

use super::clock::{self, ROUNDS};
use super::dir::DirTransport;
use super::nodes::Nodes;
use super::token_file;
use super::{Rendezvous, SessionInfo, Transport, TransportError};
use crate::notice::{alarm, notice, say};

pub(crate) mod control;
#[cfg(feature = "mpi")]
pub(crate) mod invitation;
pub(crate) mod mirror;
mod places;
#[cfg(any(test, feature = "remote-client"))]
pub mod remote;
mod server;
#[cfg(test)]
mod test_support;
mod wire;

use control::ServedControl;
use mirror::{Mirror, MirrorSettings};
use server::{Server, ServerSettings, Serves};
use wire::{
    kind, purpose, read_any_frame, read_frame, unsealed, write_frame, Hello, Refusal,
    MAX_CONTROL_BYTES,
};

/// How long a connection's greeting (and a clock exchange) may take, all
/// of it: a peer slower than that is cut off, however it drips its bytes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a rank tries to reach rank 0 at session start.
const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a rank looks for its node leader's address (the leader
/// leaves it at its rendezvous), and tries to meet it, before it goes to
/// rank 0 instead.
const LEADER_WAIT: Duration = Duration::from_secs(5);

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
    /// A rank's mirror of rank 0's window control files, where it reached
    /// rank 0 (`mirror`).
    mirror: Option<Mirror>,
    /// The job's nodes, where it gathers in two levels.
    nodes: Option<Nodes>,
    /// The node leader's address this rank met at its rendezvous, and
    /// goes to for its resync and gather (rank 0's where `None`).
    via: Option<String>,
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
            mirror: None,
            nodes: Nodes::of(config, env),
            via: None,
        })
    }

    /// This rank's node leader in a two-level gather, unless that is rank
    /// 0 (whose node's ranks send it their payloads, as in one level).
    fn leader(&self, rank: u32) -> Option<u32> {
        self.nodes.as_ref()?.leader(rank)
    }

    /// The ranks whose payloads this rank takes: rank 0 every other
    /// rank's (in two levels too: a rank whose leader it could not reach
    /// sends rank 0 its payload), a leader its node's others.
    fn senders(&self, rank: u32, world_size: u32) -> Range<u32> {
        match (&self.nodes, rank) {
            (Some(nodes), 1..) => rank + 1..nodes.node_of(rank, world_size).end,
            _ => rank + 1..world_size,
        }
    }

    /// Where a node leader leaves its address for its node's ranks: a
    /// key of its own beside rank 0's token.
    fn leader_key(&self, leader: u32) -> String {
        format!("{} leader of rank {leader}", self.endpoint)
    }

    /// Rank 0's listener, as [`TcpTransport::send`] goes to it.
    fn rank0(&self) -> Destination<'_> {
        Destination {
            endpoint: &self.endpoint,
            retried: Unreached::passing,
        }
    }

    fn now(&self) -> i64 {
        clock::wall_now_ns(self.clock_shift_ns)
    }

    /// Connects to `endpoint` (rank 0's or a leader's) for `what`,
    /// retrying with backoff until `deadline`; past it, why the last try
    /// failed.
    fn connect(
        &self,
        endpoint: &str,
        rank: u32,
        what: u8,
        deadline: Instant,
    ) -> Result<Link, Unreached> {
        retrying(
            deadline,
            || self.try_connect(endpoint, rank, what, deadline),
            |_| true,
        )
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

    /// Rank 0's rendezvous: its listener started for the session (the
    /// run's identity made here), or the directory where it cannot listen.
    fn listen(
        &mut self,
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Rendezvous, TransportError> {
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
        let serves = Serves::Rank0 {
            node_size: self.nodes.as_ref().map(Nodes::size),
        };
        self.server = Some(Server::start(
            listener,
            self.server_settings(serves, session, (&run_id, None)),
        )?);
        let own_clock = ClockOffset {
            offset_ns: 0,
            round_trip_ns: 0,
        };
        Ok(Rendezvous {
            run_id: Some(run_id),
            offset: Some(own_clock),
            ..self.unmet(session)
        })
    }

    /// What this rank's listener (rank 0's, or a node leader's) serves,
    /// for the session and run `run_id`.
    fn server_settings(
        &self,
        serves: Serves,
        session: &SessionInfo<'_>,
        (run_id, relay): (&str, Option<ClockOffset>),
    ) -> ServerSettings {
        ServerSettings {
            serves,
            relay,
            senders: self.senders(session.rank, session.world_size),
            token: self.token.clone(),
            payload_timeout: self.payload_timeout,
            session_id: session.session_id.to_string(),
            run_id: run_id.to_string(),
            world_size: session.world_size,
            max_frame: self.max_frame,
            clock_shift_ns: self.clock_shift_ns,
            control: session
                .control
                .filter(|_| matches!(serves, Serves::Rank0 { .. } | Serves::Leader))
                .map(|windows| ServedControl {
                    session_dir: session.session_dir.to_path_buf(),
                    windows: windows.clone(),
                }),
            check_node: super::nodes::check_digest,
        }
    }

    /// A node leader's listener for its node's ranks, on loopback from
    /// its `rendezvous` with rank 0 on (their rendezvous, resync and
    /// payloads), its address left for them in the session directory
    /// under the launcher's run; said where that failed (its node's ranks
    /// then meet rank 0 themselves).
    fn lead(&mut self, session: &SessionInfo<'_>, rendezvous: &Rendezvous) {
        let Some(run_id) = rendezvous.run_id.as_deref() else {
            return;
        };
        let started = TcpListener::bind("127.0.0.1:0").and_then(|listener| {
            let address = listener.local_addr()?.to_string();
            let agreed = (run_id, rendezvous.offset);
            let settings = self.server_settings(Serves::Leader, session, agreed);
            let server = Server::start(listener, settings)
                .map_err(|e| std::io::Error::other(Chain(&e).to_string()))?;
            let key = self.leader_key(session.rank);
            let launch = session.run_id.unwrap_or("");
            token_file::write(session.session_dir, &key, launch, address.as_bytes())?;
            Ok(server)
        });
        match started {
            Ok(server) => self.server = Some(server),
            Err(e) => notice!(
                "this node's leader cannot serve its node ({e}); its ranks meet rank 0 \
                 themselves"
            ),
        }
    }

    /// Sends `bytes` as a frame of `kind` to `endpoint` for `what`, and
    /// waits for the receiver's acknowledgement (it may take a while to
    /// decode: by the deadline, or a handshake's time past it); tried
    /// again until the deadline while `to` says another try may be taken.
    fn send(
        &self,
        to: Destination<'_>,
        rank: u32,
        (what, kind): (u8, u8),
        bytes: &[u8],
        deadline: Instant,
    ) -> Result<(), Unreached> {
        let send_once = || {
            let mut link = self.try_connect(to.endpoint, rank, what, deadline)?;
            match write_frame(&mut link.stream, kind, bytes, deadline) {
                Ok(()) => {}
                // Refused before it took the frame: rank 0's word, if it
                // gave one, says whether to try again.
                Err(ConnectionRefusal::Closed) => {
                    let word_by = Instant::now() + HANDSHAKE_TIMEOUT;
                    return match self.read_reply(&mut link, kind::ACK, word_by) {
                        Err(refused @ (Unreached::Refused(_) | Unreached::TokenRefused)) => {
                            Err(refused)
                        }
                        _ => Err(ConnectionRefusal::Closed.into()),
                    };
                }
                Err(cut) => return Err(cut.into()),
            }
            let ack_by = deadline.max(Instant::now() + HANDSHAKE_TIMEOUT);
            self.read_reply(&mut link, kind::ACK, ack_by).map(drop)
        };
        retrying(deadline, send_once, to.retried)
    }

    /// A rank of a node whose leader it met at its rendezvous, at
    /// `address`: its payload to the leader, within [`LEADER_WAIT`] and
    /// before the leader stops taking its node's payloads; where the leader
    /// does not take it (a leader that nothing answers for is gone), to
    /// rank 0 with the rest of the time.
    fn send_to_leader(
        &self,
        address: &str,
        payload: &[u8],
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) {
        let what = (purpose::PAYLOAD, kind::PAYLOAD);
        let leader_by = deadline
            .min(Instant::now() + LEADER_WAIT)
            .min(Nodes::members_by(deadline));
        let to_leader = Destination {
            endpoint: address,
            retried: Unreached::passing_a_live_peer,
        };
        if let Err(why) = self.send(to_leader, session.rank, what, payload, leader_by) {
            say!(
                "this node's leader did not take this rank's payload ({}): it goes to rank 0 \
                 instead",
                Chain(&why)
            );
            self.send_to_rank0(payload, session, deadline);
        }
    }

    /// A rank of a node led by `leader`: its rendezvous with the leader, at
    /// the address the leader left (looked for until [`LEADER_WAIT`]
    /// passed), which gives it the run and its clock offset to rank 0
    /// through the leader's; where there is none or the leader does not
    /// answer, with rank 0 itself.
    fn meet_leader(
        &mut self,
        leader: u32,
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Rendezvous {
        let key = self.leader_key(leader);
        let launch = session.run_id.unwrap_or("");
        let until = deadline.min(Instant::now() + LEADER_WAIT);
        if let Some(address) = token_file::read(session.session_dir, &key, launch, until) {
            let address = String::from_utf8_lossy(&address).into_owned();
            // The leader gets a share of the time: rank 0, the rest.
            let leader_by = deadline.min(Instant::now() + LEADER_WAIT);
            if let Ok((run, offset)) = self.meet(&address, session.rank, leader_by) {
                self.reached = true;
                self.via = Some(address);
                return Rendezvous {
                    run_id: Some(run),
                    offset,
                    ..self.unmet(session)
                };
            }
        }
        self.meet_rank0(session, deadline)
    }

    /// This rank's payload to rank 0; said where rank 0 did not take it.
    fn send_to_rank0(&self, payload: &[u8], session: &SessionInfo<'_>, deadline: Instant) {
        let what = (purpose::PAYLOAD, kind::PAYLOAD);
        if let Err(why) = self.send(self.rank0(), session.rank, what, payload, deadline) {
            say!(
                "rank 0 did not take this rank's payload in time ({}); it is in the spill file",
                Chain(&why)
            );
        }
    }

    /// A node leader's gather: its node's payloads, taken by its `server`
    /// until the time to forward is what is left ([`Nodes::members_by`]),
    /// digested with its own into one node digest, sent to rank 0; said
    /// where that failed (the payloads are in their spill files).
    fn forward_node(
        &self,
        nodes: &Nodes,
        server: Option<Server>,
        payload: &[u8],
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) {
        let members = match server {
            Some(server) => {
                let collected = server.finish(Nodes::members_by(deadline));
                let arrived = collected.payloads.into_values().collect();
                (arrived, collected.refused)
            }
            None => (Vec::new(), Vec::new()),
        };
        let Some(digest) = nodes.digest_node(payload, members, session) else {
            return;
        };
        let what = (purpose::NODE_DIGEST, kind::NODE_DIGEST);
        if let Err(why) = self.send(self.rank0(), session.rank, what, &digest, deadline) {
            say!(
                "rank 0 did not take this node's digest in time ({}); its ranks' payloads are \
                 in their spill files",
                Chain(&why)
            );
        }
    }

    /// Another rank's rendezvous: rank 0's run identity and this rank's
    /// clock offset to it; where rank 0 does not answer by `deadline`,
    /// the launcher's run identity and no offset (said why).
    fn meet_rank0(&mut self, session: &SessionInfo<'_>, deadline: Instant) -> Rendezvous {
        let met = self.meet(&self.endpoint, session.rank, deadline);
        self.reached = met.is_ok();
        match met {
            Ok((run, offset)) => Rendezvous {
                run_id: Some(run),
                offset,
                ..self.unmet(session)
            },
            Err(why) => {
                alarm!(
                    "this rank did not meet rank 0 at {} for its rendezvous ({}); the launcher's \
                     run identity is used and the clock offset is unknown, and this rank's \
                     payload goes to its spill file alone (rank 0 takes it from there where \
                     it sees this rank's session directory)",
                    self.endpoint,
                    Chain(&why)
                );
                self.unmet(session)
            }
        }
    }

    /// The rendezvous at `endpoint` (rank 0's, or a node leader's): the
    /// run's identity and this rank's clock offset to rank 0.
    fn meet(
        &self,
        endpoint: &str,
        rank: u32,
        deadline: Instant,
    ) -> Result<(String, Option<ClockOffset>), Unreached> {
        let run_on = || {
            let mut link = self.connect(endpoint, rank, purpose::RENDEZVOUS, deadline)?;
            let run = self.read_reply(&mut link, kind::RUN, deadline)?;
            Ok((link, run))
        };
        let (mut link, run) = retrying(deadline, run_on, Unreached::passing)?;
        let run = String::from_utf8(run).map_err(|_| Unreached::RunNotText)?;
        // The run is agreed; the clock is best effort.
        let offset = self.answer_clock(&mut link, deadline).ok().flatten();
        Ok((run, offset))
    }

    /// The rendezvous of a rank that did not meet rank 0: the launcher's
    /// run identity, no clock offset.
    fn unmet(&self, session: &SessionInfo<'_>) -> Rendezvous {
        Rendezvous {
            run_id: session.run_id.map(str::to_string),
            clock_sync: ClockSync::TcpPingpong,
            offset: None,
            endpoint: Some(self.endpoint.clone()),
        }
    }

    /// One try at a connection to `endpoint` for `what`, up to this rank's
    /// greeting.
    fn try_connect(
        &self,
        endpoint: &str,
        rank: u32,
        what: u8,
        deadline: Instant,
    ) -> Result<Link, Unreached> {
        Link::open(endpoint, &self.token, (rank, what), deadline)
    }

    /// A reply of rank 0's of `kind`, by `deadline`, if rank 0 sealed it
    /// (proving it knows the token).
    fn read_reply(
        &self,
        link: &mut Link,
        kind: u8,
        deadline: Instant,
    ) -> Result<Vec<u8>, Unreached> {
        let body = link.reply(&self.token, kind, MAX_CONTROL_BYTES, deadline);
        if matches!(body, Err(Unreached::Unsealed)) {
            notice!(
                "a reply claiming to be rank 0's at {} was not: ignored",
                self.endpoint
            );
        }
        body
    }

    /// The peer's side of a ping-pong: answers rank 0's pings with this
    /// rank's clock, then reads the offset rank 0 worked out (`None`: no
    /// round could be used).
    fn answer_clock(
        &self,
        link: &mut Link,
        deadline: Instant,
    ) -> Result<Option<ClockOffset>, Unreached> {
        for _ in 0..ROUNDS {
            read_frame(&mut link.stream, kind::PING, MAX_CONTROL_BYTES, deadline)?;
            let now = self.now().to_le_bytes();
            write_frame(&mut link.stream, kind::PONG, &now, deadline)?;
        }
        let offset = self.read_reply(link, kind::OFFSET, deadline)?;
        Ok(clock::decode(&offset))
    }
}

/// Where [`TcpTransport::send`] sends, and which failures it tries again.
struct Destination<'a> {
    endpoint: &'a str,
    retried: fn(&Unreached) -> bool,
}

/// `attempt` tried again, with a pause from 10 ms doubling to 200 ms,
/// while it fails in a way `retried` accepts, until `deadline`; then its
/// last outcome.
fn retrying<T>(
    deadline: Instant,
    mut attempt: impl FnMut() -> Result<T, Unreached>,
    mut retried: impl FnMut(&Unreached) -> bool,
) -> Result<T, Unreached> {
    let mut pause = Duration::from_millis(10);
    loop {
        let tried = attempt();
        let now = Instant::now();
        match tried {
            Err(why) if retried(&why) && now < deadline => {
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            outcome => return outcome,
        }
    }
}

/// Why this rank did not reach rank 0 (or rank 0 did not answer it), as
/// its messages say.
#[derive(Debug, thiserror::Error)]
enum Unreached {
    /// The endpoint's name did not resolve.
    #[error("its address does not resolve")]
    Address(#[source] std::io::Error),
    /// Nothing took the connection.
    #[error("the connection failed")]
    Connect(#[source] std::io::Error),
    /// The exchange failed: silent, closed, or not the protocol.
    #[error(transparent)]
    Exchange(#[from] ConnectionRefusal),
    /// A reply was not sealed with the job token.
    #[error("its reply was not sealed with this job's token")]
    Unsealed,
    /// Rank 0 refused the connection after its greeting, and said why.
    #[error("{0}")]
    Refused(Refusal),
    /// A refusal not sealed with this rank's token: rank 0's token differs
    /// (or someone on the way forged it).
    #[error("rank 0 refused its greeting: its job token is not this rank's")]
    TokenRefused,
    /// Its run identity was not text.
    #[error("its run identity is not UTF-8")]
    RunNotText,
    /// No nonce could be made.
    #[error("no randomness for a nonce")]
    NoRandomness,
    /// A file of this rank's own could not be read or written.
    #[error("a file of this rank's cannot be read or written")]
    Files(#[source] std::io::Error),
}

impl Unreached {
    /// Whether another try may be taken: nothing took the connection, it
    /// was cut off or went silent without a word (rank 0 cuts the oldest
    /// connection waiting for its greeting to make room for newer ones), or
    /// rank 0 said so. A refusal that rank 0 gave a reason for is final.
    fn passing(&self) -> bool {
        match self {
            Unreached::Connect(_) => true,
            Unreached::Exchange(why) => {
                matches!(why, ConnectionRefusal::Closed | ConnectionRefusal::Stalled)
            }
            Unreached::Refused(refusal) => refusal.again,
            _ => false,
        }
    }

    /// [`Unreached::passing`], for a peer whose listener was up when this
    /// rank met it (a node leader): a connection nothing takes now is a
    /// peer gone, not one yet to come.
    fn passing_a_live_peer(&self) -> bool {
        !matches!(self, Unreached::Connect(_)) && self.passing()
    }
}

/// A rank's connection to rank 0 (or a controller's), after its greeting.
struct Link {
    stream: TcpStream,
    challenge: Vec<u8>,
    nonce: [u8; 16],
}

impl Link {
    /// Connects to `endpoint` and greets it as `rank`, for `what`, proving
    /// that it knows `token`; by `deadline`.
    fn open(
        endpoint: &str,
        token: &[u8],
        (rank, what): (u32, u8),
        deadline: Instant,
    ) -> Result<Link, Unreached> {
        let addresses: Vec<_> = endpoint
            .to_socket_addrs()
            .map_err(Unreached::Address)?
            .collect();
        if addresses.is_empty() {
            return Err(Unreached::Address(std::io::ErrorKind::NotFound.into()));
        }
        // Each address the name has (IPv6 and IPv4, say), until one takes.
        let mut connected = Err(std::io::ErrorKind::NotFound.into());
        for address in &addresses {
            let timeout = deadline
                .saturating_duration_since(Instant::now())
                .min(HANDSHAKE_TIMEOUT);
            connected = TcpStream::connect_timeout(address, timeout.max(Duration::from_millis(1)));
            if connected.is_ok() {
                break;
            }
        }
        let mut stream = connected.map_err(Unreached::Connect)?;
        let _ = stream.set_nodelay(true);
        let handshake = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
        let challenge = read_frame(&mut stream, kind::CHALLENGE, MAX_CONTROL_BYTES, handshake)?;
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|_| Unreached::NoRandomness)?;
        let hello = Hello::write(token, &challenge, rank, what, &nonce);
        write_frame(&mut stream, kind::HELLO, &hello, handshake)?;
        Ok(Link {
            stream,
            challenge,
            nonce,
        })
    }

    /// A reply of `kind` of at most `max` bytes, by `deadline`, if its
    /// sender sealed it with `token` (proving it is rank 0); or rank 0's
    /// refusal.
    fn reply(
        &mut self,
        token: &[u8],
        kind: u8,
        max: u64,
        deadline: Instant,
    ) -> Result<Vec<u8>, Unreached> {
        let (got, frame) = read_any_frame(&mut self.stream, max.max(MAX_CONTROL_BYTES), deadline)?;
        let unseal = |kind| unsealed(token, &self.challenge, &self.nonce, kind, &frame);
        match got {
            kind::REFUSED => Err(
                unseal(kind::REFUSED).map_or(Unreached::TokenRefused, |body| {
                    Unreached::Refused(Refusal::read(&body))
                }),
            ),
            got if got == kind => unseal(kind).ok_or(Unreached::Unsealed),
            _ => Err(ConnectionRefusal::Malformed("an unexpected message").into()),
        }
    }
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
        self.mirror = None;
        self.fallback = None;
    }

    fn window_written(&self, index: u32, file: &std::path::Path) {
        if let Some(mirror) = &self.mirror {
            mirror.window_written(index, file);
        }
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
            return Ok(self.unmet(session));
        }
        self.via = None;
        match session.rank {
            0 => self.listen(session, deadline),
            rank => {
                let rendezvous = match self.leader(rank).filter(|&leader| leader != rank) {
                    Some(leader) => self.meet_leader(leader, session, deadline),
                    None => self.meet_rank0(session, deadline),
                };
                if self.reached && self.leader(rank) == Some(rank) {
                    self.lead(session, &rendezvous);
                }
                let mirrored = (self.reached, &rendezvous.run_id, session.control);
                if let (true, Some(run_id), Some(windows)) = mirrored {
                    // Through the node's leader where this rank met it.
                    self.mirror = Mirror::start(MirrorSettings {
                        endpoint: self.via.clone().unwrap_or_else(|| self.endpoint.clone()),
                        payload_endpoint: self.endpoint.clone(),
                        token: self.token.clone(),
                        rank,
                        session_dir: session.session_dir.to_path_buf(),
                        run_id: run_id.clone(),
                        max_frame: self.max_frame,
                        payload_timeout: self.payload_timeout,
                        windows: windows.clone(),
                    });
                }
                Ok(rendezvous)
            }
        }
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
        let endpoint = self.via.as_deref().unwrap_or(&self.endpoint);
        let offset = self
            .connect(endpoint, session.rank, purpose::RESYNC, deadline)
            .and_then(|mut link| self.answer_clock(&mut link, deadline))
            .ok()
            .flatten();
        // A leader's node resyncs through its new offset from now on.
        if let (Some(server), Some(_), 1..) = (&self.server, offset, session.rank) {
            server.relay(offset);
        }
        offset
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
        if let Some(mirror) = self.mirror.take() {
            // The session's last window, closed as it finished, goes first.
            mirror.finish(deadline);
        }
        if session.rank != 0 {
            if !self.reached {
                // Rank 0 did not answer at the start: the spill file is the send.
                return Ok(None);
            }
            match self.leader(session.rank) {
                Some(leader) if leader == session.rank => {
                    let server = self.server.take();
                    if let Some(nodes) = &self.nodes {
                        self.forward_node(nodes, server, payload, session, deadline);
                    }
                }
                _ => match &self.via {
                    Some(address) => self.send_to_leader(address, payload, session, deadline),
                    None => self.send_to_rank0(payload, session, deadline),
                },
            }
            return Ok(None);
        }
        let server = self.server.take().ok_or(unavailable(
            "rank 0's listener is not running: the session did not open it",
        ))?;
        let collected = server.finish(deadline);
        let answered: Vec<_> = collected.nodes.values().map(|n| n.ranks.clone()).collect();
        let arrived = collected.payloads.into_values().collect();
        let rescued = super::rescued_by_rank_0(&answered);
        let mut gathered = super::gathered_by(payload, arrived, session, &rescued);
        gathered.skipped.extend(collected.refused);
        if self.nodes.is_some() {
            gathered.add_nodes(collected.nodes.into_values().collect());
        }
        Ok(Some(gathered))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without RANKSCOPE_TOKEN the derived token is public: said so, with
    /// what it is derived from.
    #[test]
    fn a_derived_token_is_said_to_be_public() {
        let env = RankEnv {
            job_id: Some("none".into()),
            master: Some(("127.0.0.1".into(), 29500)),
            ..RankEnv::single()
        };
        let notices = crate::notice::Notices::new(env.rank, false);
        let entered = notices.enter();
        TcpTransport::for_rank(&Config::default(), &env).unwrap();
        drop(entered);
        let kept = notices.take_kept();
        assert!(
            kept.iter().any(|n| n.starts_with("no RANKSCOPE_TOKEN")
                && n.contains("run id (`none`) and 127.0.0.1:29501")),
            "{kept:?}"
        );
    }

    /// A rank whose rank 0 is not listening says why it went on without
    /// it: the connection failed, not only "in time".
    #[test]
    fn a_rendezvous_nobody_answers_says_why() {
        // A port just freed: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let env = RankEnv {
            rank: 1,
            world_size: 2,
            job_id: Some("none".into()),
            master: Some(("127.0.0.1".into(), port - 1)),
            ..RankEnv::single()
        };
        let dir = tempfile::tempdir().unwrap();
        let notices = crate::notice::Notices::new(env.rank, false);
        let entered = notices.enter();
        let mut transport = TcpTransport::for_rank(&Config::default(), &env).unwrap();
        let session = SessionInfo {
            rank: 1,
            world_size: 2,
            session_id: "s",
            run_id: Some("none"),
            launch_run_id: Some("none"),
            session_dir: dir.path(),
            spill_file: None,
            started_unix_ns: 0,
            index: 0,
            control: None,
        };
        let deadline = Instant::now() + Duration::from_millis(300);
        let rendezvous = transport.open(&session, deadline).unwrap();
        drop(entered);
        assert_eq!(rendezvous.offset, None);
        let kept = notices.take_kept();
        assert!(
            kept.iter()
                .any(|n| n.contains("did not meet rank 0") && n.contains("the connection failed")),
            "{kept:?}"
        );
    }

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Reads one frame from `from` and writes it to `to`, whole.
    fn pass_frame(from: &mut TcpStream, to: &mut TcpStream) {
        use std::io::{Read, Write};
        let mut head = [0u8; 9];
        from.read_exact(&mut head).unwrap();
        let mut body = vec![0u8; u64::from_le_bytes(head[1..].try_into().unwrap()) as usize];
        from.read_exact(&mut body).unwrap();
        to.write_all(&head).unwrap();
        to.write_all(&body).unwrap();
    }

    /// A front of rank 0's listener at `endpoint`: it cuts each of the
    /// first `cut` connections once its greeting passed, and passes the
    /// others through both ways; its endpoint, and how many connections it
    /// took.
    fn front(endpoint: String, cut: usize) -> (String, Arc<AtomicUsize>) {
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let front_endpoint = front.local_addr().unwrap().to_string();
        let taken = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&taken);
        std::thread::spawn(move || {
            for client in front.incoming() {
                let mut client = client.unwrap();
                let mut upstream = TcpStream::connect(&endpoint).unwrap();
                if counted.fetch_add(1, Ordering::SeqCst) < cut {
                    pass_frame(&mut upstream, &mut client); // the challenge
                    pass_frame(&mut client, &mut upstream); // the greeting
                    continue; // both closed
                }
                let (mut up, mut down) =
                    (upstream.try_clone().unwrap(), client.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut down, &mut up));
                std::thread::spawn(move || std::io::copy(&mut upstream, &mut client));
            }
        });
        (front_endpoint, taken)
    }

    /// Rank 1's transport, with the tests' token.
    fn rank_1() -> TcpTransport {
        let config = Config {
            token: Some(String::from_utf8(test_support::TOKEN.to_vec()).unwrap()),
            ..Config::default()
        };
        let env = RankEnv {
            rank: 1,
            world_size: 2,
            master: Some(("127.0.0.1".into(), 1)),
            ..RankEnv::single()
        };
        TcpTransport::for_rank(&config, &env).unwrap()
    }

    /// A rendezvous cut off after its greeting (as rank 0 cuts the oldest
    /// connection waiting for its greeting, to make room for newer ones) is
    /// tried again until it gets in: the rank meets rank 0 and takes its
    /// run.
    #[test]
    fn a_rendezvous_cut_off_after_its_greeting_is_tried_again_until_it_gets_in() {
        let dir = tempfile::tempdir().unwrap();
        let rank_0 = test_support::rank_0(dir.path());
        let endpoint = rank_0.endpoint.clone();
        let deadline = Instant::now() + Duration::from_secs(60);
        let (cut_six_times, taken) = front(endpoint, 6);
        let (run, _) = rank_1()
            .meet(&cut_six_times, 1, deadline)
            .expect("met on the seventh try");
        assert_eq!(run, "r");
        assert_eq!(taken.load(Ordering::SeqCst), 7);
    }

    /// A rank rank 0 refuses for a reason gives up at once, with the
    /// reason: a rank outside the world (under rank 0's seal) and a wrong
    /// token (which cannot check the seal) each take one try.
    #[test]
    fn a_refusal_with_a_reason_is_final_and_said() {
        let dir = tempfile::tempdir().unwrap();
        let rank_0 = test_support::rank_0(dir.path());
        let endpoint = rank_0.endpoint.clone();
        let deadline = Instant::now() + Duration::from_secs(60);

        let (counted, taken) = front(endpoint.clone(), 0);
        let outside = rank_1().meet(&counted, 5, deadline);
        match &outside {
            Err(Unreached::Refused(refusal)) => {
                assert!(!refusal.again);
                assert!(refusal.why.contains("outside the world"), "{refusal}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(taken.load(Ordering::SeqCst), 1);

        let (counted, taken) = front(endpoint, 0);
        let mut stranger = rank_1();
        stranger.token = b"not the job's token".to_vec();
        let refused = stranger.meet(&counted, 1, deadline);
        assert!(
            matches!(refused, Err(Unreached::TokenRefused)),
            "{refused:?}"
        );
        assert_eq!(taken.load(Ordering::SeqCst), 1);
    }
}
