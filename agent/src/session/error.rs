//! Why a session could not start or finish.

use std::path::PathBuf;

use rankscope_common::env::Launcher;
use rankscope_common::payload::PayloadError;
use rankscope_common::ArrowError;

use crate::transport::TransportError;

/// Why a session could not start or finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The session was finished already, by a stop signal that spilled it.
    #[error("the session was already finished: a stop signal spilled its data")]
    Stopped,
    /// This process is a fork of the one that started the session.
    #[error(
        "this process (pid {child}) is a fork of the rank process (pid {parent}) that started \
         the session: only that process can flush or finish it"
    )]
    Forked {
        /// The process that started the session.
        parent: u32,
        /// This process.
        child: u32,
    },
    /// A session is already running on this profiler.
    #[error("session `{0}` is already running; finish it first")]
    AlreadyRunning(String),
    /// A multi-rank job has no id that every rank shares.
    #[error(
        "no session id for this {launcher} job of {world_size} ranks: set RANKSCOPE_SESSION_ID \
         to the same value on every rank"
    )]
    NoSessionId {
        /// Launcher detected.
        launcher: Launcher,
        /// Ranks in the job.
        world_size: u32,
    },
    /// The launcher says the world is larger than `max_world_size` allows.
    #[error(
        "a world of {world_size} ranks is larger than max_world_size {max}: raise \
         RANKSCOPE_MAX_WORLD_SIZE if the job is really that large"
    )]
    WorldTooLarge {
        /// Ranks in the job.
        world_size: u32,
        /// The configured maximum.
        max: u32,
    },
    /// The session directory could not be made.
    #[error("creating the session directory {path}")]
    SessionDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// This rank's spill file could not be written.
    #[error("writing the spill file of rank {rank} in {dir}")]
    Spill {
        /// The rank.
        rank: u32,
        /// The session directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The recorded rows could not be turned into batches.
    #[error("building the payload")]
    Batch(#[source] ArrowError),
    /// The payload could not be encoded.
    #[error("encoding the payload")]
    Payload(#[source] PayloadError),
    /// The transport failed to open or to gather.
    #[error("the {stage} of the session's transport")]
    Transport {
        /// `rendezvous` or `gather`.
        stage: &'static str,
        /// Why.
        #[source]
        source: TransportError,
    },
    /// Rank 0's reporter failed; the spill files are still in the session directory.
    #[error("writing the report in {dir} (the rank spill files are kept there)")]
    Report {
        /// The session directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
