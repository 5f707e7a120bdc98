//! Transports: how the ranks of a session meet and how their payloads reach
//! rank 0. A transport lives as long as the profiler and serves each of its
//! sessions in three steps:
//!
//! - [`Transport::open`] when the session starts: the rendezvous, where the
//!   transport can have one — every rank agrees on the run's identity and
//!   rank 0 measures each rank's clock offset;
//! - [`Transport::resync`] when it finishes, once this rank's payload is
//!   built and spilled: the offsets measured again, so drift is known (the
//!   payload and its spill file then carry the new offset);
//! - [`Transport::gather`] when it finishes: each rank hands over its
//!   encoded payload; rank 0 gets back what arrived before the deadline,
//!   checked by [`rankscope_common::gather::accept`].
//!
//! The windows of a running session need two more directions, plans out
//! from rank 0 and statuses and window payloads in. They are the
//! [`crate::WindowControl`] each transport is handed at `open`
//! ([`SessionInfo::control`]) and [`Transport::window_written`]: the
//! directory transport needs nothing more (the windows thread reads and
//! writes the control folder every rank sees); TCP carries them as
//! messages for the ranks apart from rank 0's folder, through their node's
//! leader under a two-level gather (`tcp::mirror`); MPI invites the ranks
//! apart to the same messages over a listener rank 0 opens for them. The
//! windows thread does not hold the transport (the session does, to
//! gather), so the control handle, not the trait, is where they meet.
//!
//! [`for_rank`] picks the transport the configuration and launcher call for;
//! a program can hand its own to [`crate::ProfilerBuilder::transport`].

pub mod clock;
pub mod dir;
#[cfg(feature = "mpi")]
pub mod mpi;
mod nodes;
#[cfg(any(feature = "mpi", test))]
mod send_buffer;
pub mod tcp;
mod token_file;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rankscope_common::config::TransportKind;
use rankscope_common::env::RankEnv;
use rankscope_common::gather::{self, Candidate, Expect, Rejection, RunFilter};
use rankscope_common::payload::{self, ClockOffset, ClockSync, TransportName};
use rankscope_common::{spill, Config, Gathered};

/// What a transport knows of the session it serves.
#[derive(Debug, Clone, Copy)]
pub struct SessionInfo<'a> {
    /// This rank.
    pub rank: u32,
    /// Ranks in the job.
    pub world_size: u32,
    /// The session id every payload must carry.
    pub session_id: &'a str,
    /// The run: at `open`, the launcher's proposal; at `gather`, what the
    /// ranks agreed on.
    pub run_id: Option<&'a str>,
    /// The launcher's run: the run of a rank that did not meet rank 0 at
    /// its rendezvous (rank 0 gives the ranks it meets a run of its own).
    pub launch_run_id: Option<&'a str>,
    /// The session directory (where spill files are).
    pub session_dir: &'a Path,
    /// This rank's spill file, once written (at `gather`).
    pub spill_file: Option<&'a Path>,
    /// When this rank's session started, nanoseconds since the Unix epoch.
    pub started_unix_ns: i64,
    /// The session's place among those this process started, from 0,
    /// counted before anything that can fail: alike on every rank of a
    /// job whose ranks start the same sessions.
    pub index: u32,
    /// Rank 0's windows thread, for a transport that takes window requests
    /// and payloads (rank 0's TCP listener); `None` where none runs.
    pub control: Option<&'a crate::WindowControl>,
}

/// What the ranks agreed on when the transport opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendezvous {
    /// The run's identity, the same on every rank of this run.
    pub run_id: Option<String>,
    /// How the clock offset was measured.
    pub clock_sync: ClockSync,
    /// This rank's clock offset to rank 0, where it was measured.
    pub offset: Option<ClockOffset>,
    /// Where rank 0 listens, for a transport that listens.
    pub endpoint: Option<String>,
}

/// Why a transport failed as a whole (one bad rank is a
/// [`rankscope_common::Skipped`] instead).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The transport is not built into this binary.
    #[error("transport `{0}` is not available in this build; use `dir`")]
    Unavailable(&'static str),
    /// MPI could not be used.
    #[error("MPI: {0}")]
    Mpi(&'static str),
    /// The TCP transport could not be set up.
    #[error("TCP: {0}")]
    Tcp(&'static str),
    /// The session directory could not be read.
    #[error("reading {path}")]
    Io {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// One way for the ranks of a session to meet and to move payloads to rank 0.
pub trait Transport: Send {
    /// Which transport this is, for the report.
    fn name(&self) -> TransportName;

    /// The rendezvous at session start, bounded by `deadline`.
    fn open(
        &mut self,
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Rendezvous, TransportError>;

    /// When the session is done with the transport (gathered or not):
    /// anything it holds for the session (a listener) is let go.
    fn close(&mut self) {}

    /// At finish, once this rank's payload is built and spilled: its clock
    /// offset to rank 0 measured again, where the transport can (every rank
    /// calls it).
    fn resync(&mut self, _session: &SessionInfo<'_>, _deadline: Instant) -> Option<ClockOffset> {
        None
    }

    /// This rank's payload of window `index` is written at `file` (in the
    /// window's folder): where rank 0 cannot see it there, the transport
    /// may carry it to rank 0's.
    fn window_written(&self, _index: u32, _file: &std::path::Path) {}

    /// Hands this rank's encoded payload to rank 0. On rank 0, waits until
    /// every rank's payload arrived or `deadline` passed and returns what
    /// was gathered (its own payload included); elsewhere `None`.
    fn gather(
        &mut self,
        payload: &[u8],
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Option<Gathered>, TransportError>;
}

/// The transport for this rank: from configuration, else from the
/// launcher — MPI under an MPI launcher when this build has the `mpi`
/// feature; TCP to rank 0 where the launcher set MASTER_ADDR (torchrun) and
/// no MPI launcher is there; else the shared directory.
pub fn for_rank(config: &Config, env: &RankEnv) -> Result<Box<dyn Transport>, TransportError> {
    match config.transport {
        TransportKind::Dir => Ok(Box::new(dir::DirTransport)),
        TransportKind::Mpi => mpi_transport(config, env),
        TransportKind::Tcp => Ok(Box::new(tcp::TcpTransport::for_rank(config, env)?)),
        TransportKind::Auto if cfg!(feature = "mpi") && env.launcher.is_mpi() => {
            mpi_transport(config, env)
        }
        TransportKind::Auto if env.master.is_some() && !env.launcher.is_mpi() => {
            Ok(Box::new(tcp::TcpTransport::for_rank(config, env)?))
        }
        TransportKind::Auto => Ok(Box::new(dir::DirTransport)),
    }
}

/// What rank 0 (or a node leader) of a transport that carries payloads
/// itself (MPI, TCP) gathered: its own payload first, then what arrived
/// over the wire, then the spill files of the missing ranks it
/// `answers_for` (in this run: every rank knows the run's identity; or,
/// for a rank that did not meet rank 0, in the launcher's run), checked
/// by [`gather::accept`].
fn gathered_by(
    own: &[u8],
    arrived: Vec<Candidate>,
    session: &SessionInfo<'_>,
    answers_for: &dyn Fn(u32) -> bool,
) -> Gathered {
    let expect = Expect {
        session_id: Some(session.session_id.to_string()),
        run: RunFilter::Only(session.run_id.map(str::to_string)),
        world_size: Some(session.world_size),
        max_world_size: None,
        ended_after_unix_ns: None,
    };
    let mut candidates = vec![Candidate {
        source: format!("rank {}", session.rank),
        payload: payload::decode(own).map_err(Rejection::Payload),
    }];
    candidates.extend(arrived);
    let first = gather::accept(candidates, &expect);
    // Ascending, as `missing` is.
    let rescued: Vec<u32> = first
        .missing
        .iter()
        .copied()
        .filter(|&rank| answers_for(rank))
        .collect();
    if rescued.is_empty() {
        return first;
    }
    // The ranks still missing once what arrived was checked (sent nothing,
    // or nothing usable) may have spilled their payload.
    let mut again: Vec<Candidate> = first
        .payloads
        .into_iter()
        .map(|payload| Candidate {
            source: format!("rank {}", payload.header.rank.rank),
            payload: Ok(payload),
        })
        .collect();
    again.extend(spill_files(session, session.run_id, UNIX_EPOCH, &rescued));
    again.extend(unmet_spill_files(session, &rescued));
    let mut second = gather::accept(again, &expect);
    second.skipped.splice(0..0, first.skipped);
    second
}

/// The ranks whose spill files rank 0 reads where their payloads did not
/// come: every rank but those of the nodes whose digests arrived (`answered`),
/// so that a node whose leader died is still read where rank 0 sees its
/// session directory.
fn rescued_by_rank_0(answered: &[std::ops::Range<u32>]) -> impl Fn(u32) -> bool + '_ {
    move |rank| !answered.iter().any(|node| node.contains(&rank))
}

/// The spill files of `ranks` (sorted) in `run` (`None`: of no run),
/// written since `since`, read; from one listing of the session directory.
fn spill_files(
    session: &SessionInfo<'_>,
    run: Option<&str>,
    since: SystemTime,
    ranks: &[u32],
) -> Vec<Candidate> {
    let found = spill::find(session.session_dir, None, run, since).unwrap_or_default();
    let of_ranks = |path: &PathBuf| {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let of_run = run.is_some() || !spill::has_run(&name);
        of_run && spill::rank_of(&name).is_some_and(|rank| ranks.binary_search(&rank).is_ok())
    };
    spill::read_files(
        found
            .files
            .into_iter()
            .chain(found.special)
            .filter(of_ranks),
    )
}

/// The spill files of `ranks` that did not meet rank 0 at their
/// rendezvous and so ran under the launcher's run, written since this
/// session started: taken as this run's, and said so.
fn unmet_spill_files(session: &SessionInfo<'_>, ranks: &[u32]) -> Vec<Candidate> {
    if session.launch_run_id == session.run_id {
        return Vec::new();
    }
    let started = UNIX_EPOCH + Duration::from_nanos(session.started_unix_ns.max(0) as u64);
    let mut candidates = spill_files(session, session.launch_run_id, started, ranks);
    for candidate in &mut candidates {
        let Ok(payload) = &mut candidate.payload else {
            continue;
        };
        if payload.header.session.run_id.as_deref() == session.launch_run_id {
            payload.header.session.run_id = session.run_id.map(str::to_string);
            candidate.source.push_str(
                " (under the launcher's run: the rank did not meet rank 0 at its rendezvous)",
            );
        }
    }
    candidates
}

#[cfg(feature = "mpi")]
fn mpi_transport(config: &Config, env: &RankEnv) -> Result<Box<dyn Transport>, TransportError> {
    let transport = mpi::MpiTransport::from_launcher(config)?;
    Ok(Box::new(transport.in_nodes(nodes::Nodes::of(config, env))))
}

#[cfg(not(feature = "mpi"))]
fn mpi_transport(_config: &Config, _env: &RankEnv) -> Result<Box<dyn Transport>, TransportError> {
    Err(TransportError::Unavailable("mpi"))
}
