//! rankscope: the agent each rank of a multi-rank GPU job links.
//!
//! A [`Profiler`] records pipeline stages, diffusion steps and blocks,
//! custom metrics, events and memory snapshots into bounded per-thread
//! buffers. A [`Session`] frames one job run: when it finishes, every rank
//! writes its payload (the format of [`rankscope_common::payload`]) to the
//! session directory and hands it to rank 0 through a [`transport`]; rank 0
//! gathers the ranks and, with a [`Reporter`] set (rankscope-coordinator's),
//! writes one report for the whole job.
//!
//! ```
//! use rankscope::{Config, DiffusionStep, Profiler};
//!
//! let out = tempfile::tempdir().unwrap();
//! let config = Config { output_dir: out.path().into(), ..Config::default() };
//! let profiler = Profiler::with_rank_env(config, rankscope::RankEnv::single());
//! let session = profiler.session("t2v", &[("mode", "tp1")]).unwrap();
//! {
//!     let _encode = profiler.stage("text_encoding");
//! }
//! profiler.record_diffusion_step(DiffusionStep { step: 0, computation_ms: 41.0, ..Default::default() });
//! let outcome = session.finish().unwrap();
//! assert!(outcome.spill_file.exists());
//! assert_eq!(outcome.gathered.unwrap().reporting, vec![0]);
//! ```
#![deny(missing_docs)]

mod batch;
mod profiler;
mod recorder;
mod records;
mod reporter;
mod sampler;
mod session;
pub mod spill;
mod stage;
pub mod transport;

pub use profiler::{Profiler, ProfilerError};
pub use rankscope_common::env::RankEnv;
pub use rankscope_common::Config;
pub use records::{BlockComputation, DiffusionStep, MemoryReading};
pub use reporter::{ReportFiles, Reporter};

/// Whether NVML loads on this machine (with `library`, else the system's).
pub fn nvml_available(library: Option<&std::path::Path>) -> bool {
    sampler::nvml::available(library)
}
pub use session::{GatherSummary, Outcome, Session, SessionError};
pub use stage::StageGuard;
