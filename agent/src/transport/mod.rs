//! Transports: how a rank's payload reaches rank 0. Every transport has the
//! same shape: each rank hands over its encoded payload; rank 0 gets back
//! everything that arrived before the deadline.

pub mod dir;

use std::path::Path;
use std::time::Instant;

use rankscope_common::config::TransportKind;
use rankscope_common::env::RankEnv;
use rankscope_common::{Config, Payload};

/// What a gather needs to know about the session.
pub struct GatherContext<'a> {
    /// This rank.
    pub rank: u32,
    /// Ranks in the job.
    pub world_size: u32,
    /// The session id every payload must carry.
    pub session_id: &'a str,
    /// The session directory (where spill files are).
    pub session_dir: &'a Path,
    /// When this rank's session started, nanoseconds since the Unix epoch.
    pub started_unix_ns: i64,
    /// When rank 0 stops waiting.
    pub deadline: Instant,
}

/// An input that rank 0 (or `rankscope aggregate`) refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file (or peer) it came from.
    pub source: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Everything rank 0 gathered.
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    /// Ranks in the job.
    pub world_size: u32,
    /// One payload per reporting rank, by rank.
    pub payloads: Vec<Payload>,
    /// Ranks below `world_size` with no payload.
    pub missing: Vec<u32>,
    /// Inputs refused.
    pub skipped: Vec<Skipped>,
}

/// Why a gather failed as a whole (a single bad rank is a [`Skipped`] instead).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The transport is not built into this binary.
    #[error("transport `{0}` is not available in this build; use `dir`")]
    Unavailable(&'static str),
    /// The session directory could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One way of moving payloads to rank 0.
pub trait Transport {
    /// Hands this rank's encoded payload to rank 0. On rank 0, returns what
    /// was gathered (its own payload included); elsewhere `None`.
    fn gather(
        &mut self,
        payload: &[u8],
        context: &GatherContext<'_>,
    ) -> Result<Option<Gathered>, TransportError>;
}

/// The transport for this rank: from configuration, else from the launcher.
/// MPI and TCP are later work: until then `auto` uses the shared directory.
pub fn for_rank(config: &Config, _env: &RankEnv) -> Result<Box<dyn Transport>, TransportError> {
    match config.transport {
        TransportKind::Auto | TransportKind::Dir => Ok(Box::new(dir::DirTransport)),
        TransportKind::Mpi => Err(TransportError::Unavailable("mpi")),
        TransportKind::Tcp => Err(TransportError::Unavailable("tcp")),
    }
}
