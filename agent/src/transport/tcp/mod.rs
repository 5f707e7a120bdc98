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
//!
//! This module is the ranks' side; `server.rs` is rank 0's listener and
//! `wire.rs` what crosses a connection (frames, proofs, seals).

use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use rankscope_common::env::RankEnv;
use rankscope_common::error::Chain;
use rankscope_common::gather::ConnectionRefusal;
use rankscope_common::payload::{ClockOffset, ClockSync, TransportName};
use rankscope_common::{Config, Gathered};
use sha2::{Digest, Sha256};

use super::clock::{self, ROUNDS};
use super::dir::DirTransport;
use super::token_file;
use super::{Rendezvous, SessionInfo, Transport, TransportError};
use crate::notice::{notice, say};

mod server;
mod wire;

use server::{Server, ServerSettings};
use wire::{kind, purpose, read_frame, unsealed, write_frame, Hello, MAX_CONTROL_BYTES};

/// How long a connection's greeting (and a clock exchange) may take, all
/// of it: a peer slower than that is cut off, however it drips its bytes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
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

    /// Connects to rank 0 for `what`, retrying with backoff until
    /// `deadline`; past it, why the last try failed.
    fn connect(&self, rank: u32, what: u8, deadline: Instant) -> Result<Link, Unreached> {
        let mut pause = Duration::from_millis(10);
        loop {
            let tried = self.try_connect(rank, what, deadline);
            let now = Instant::now();
            if tried.is_ok() || now >= deadline {
                return tried;
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

    /// Another rank's rendezvous: rank 0's run identity and this rank's
    /// clock offset to it; where rank 0 does not answer by `deadline`,
    /// the launcher's run identity and no offset (said why).
    fn meet_rank0(&mut self, session: &SessionInfo<'_>, deadline: Instant) -> Rendezvous {
        let met = self
            .connect(session.rank, purpose::RENDEZVOUS, deadline)
            .and_then(|mut link| {
                let run = self.read_reply(&mut link, kind::RUN, deadline)?;
                let run = String::from_utf8(run).map_err(|_| Unreached::RunNotText)?;
                // The run is agreed; the clock is best effort.
                let offset = self.answer_clock(&mut link, deadline).ok().flatten();
                Ok((run, offset))
            });
        self.reached = met.is_ok();
        match met {
            Ok((run, offset)) => Rendezvous {
                run_id: Some(run),
                offset,
                ..self.unmet(session)
            },
            Err(why) => {
                notice!(
                    "rank 0 at {} did not answer the rendezvous in time ({}); the launcher's \
                     run identity is used and the clock offset is unknown",
                    self.endpoint,
                    Chain(&why)
                );
                self.unmet(session)
            }
        }
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

    /// One try at a connection to rank 0 for `what`, up to this rank's
    /// greeting.
    fn try_connect(&self, rank: u32, what: u8, deadline: Instant) -> Result<Link, Unreached> {
        let address = self
            .endpoint
            .to_socket_addrs()
            .map_err(Unreached::Address)?
            .next()
            .ok_or(Unreached::Address(std::io::ErrorKind::NotFound.into()))?;
        let timeout = deadline
            .saturating_duration_since(Instant::now())
            .min(HANDSHAKE_TIMEOUT);
        let mut stream =
            TcpStream::connect_timeout(&address, timeout.max(Duration::from_millis(1)))
                .map_err(Unreached::Connect)?;
        let _ = stream.set_nodelay(true);
        let handshake = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
        let challenge = read_frame(&mut stream, kind::CHALLENGE, MAX_CONTROL_BYTES, handshake)?;
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|_| Unreached::NoRandomness)?;
        let hello = Hello::write(&self.token, &challenge, rank, what, &nonce);
        write_frame(&mut stream, kind::HELLO, &hello, handshake)?;
        Ok(Link {
            stream,
            challenge,
            nonce,
        })
    }

    /// A reply of rank 0's of `kind`, by `deadline`, if rank 0 sealed it
    /// (proving it knows the token).
    fn read_reply(
        &self,
        link: &mut Link,
        kind: u8,
        deadline: Instant,
    ) -> Result<Vec<u8>, Unreached> {
        let frame = read_frame(&mut link.stream, kind, MAX_CONTROL_BYTES, deadline)?;
        let body = unsealed(&self.token, &link.challenge, &link.nonce, kind, &frame);
        if body.is_none() {
            notice!(
                "a reply claiming to be rank 0's at {} was not: ignored",
                self.endpoint
            );
        }
        body.ok_or(Unreached::Unsealed)
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
    /// Its run identity was not text.
    #[error("its run identity is not UTF-8")]
    RunNotText,
    /// No nonce could be made.
    #[error("no randomness for a nonce")]
    NoRandomness,
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
            return Ok(self.unmet(session));
        }
        match session.rank {
            0 => self.listen(session, deadline),
            _ => Ok(self.meet_rank0(session, deadline)),
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
        let mut link = self.connect(session.rank, purpose::RESYNC, deadline).ok()?;
        self.answer_clock(&mut link, deadline).ok().flatten()
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
                    write_frame(&mut link.stream, kind::PAYLOAD, payload, deadline)?;
                    // Rank 0 may take a while to decode: the ACK by the deadline.
                    let ack_by = deadline.max(Instant::now() + HANDSHAKE_TIMEOUT);
                    self.read_reply(&mut link, kind::ACK, ack_by)
                });
            if let Err(why) = sent {
                say!(
                    "rank 0 did not take this rank's payload in time ({}); it is in the spill file",
                    Chain(&why)
                );
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
            session_dir: dir.path(),
            spill_file: None,
            started_unix_ns: 0,
        };
        let deadline = Instant::now() + Duration::from_millis(300);
        let rendezvous = transport.open(&session, deadline).unwrap();
        drop(entered);
        assert_eq!(rendezvous.offset, None);
        let kept = notices.take_kept();
        assert!(
            kept.iter()
                .any(|n| n.contains("did not answer the rendezvous in time")
                    && n.contains("the connection failed")),
            "{kept:?}"
        );
    }
}
