//! rankscope: the agent each rank of a multi-rank GPU job links.
//!
//! A [`Profiler`] records pipeline stages, diffusion steps and blocks,
//! custom metrics, events and memory snapshots into bounded per-thread
//! buffers, and samples the rank's GPUs and host on a thread of its own. A
//! [`Session`] frames one job run: it opens the [`transport`] when it
//! starts; when it finishes, every rank spills its payload (the format of
//! [`rankscope_common::payload`]) to the session directory and hands it to
//! rank 0, which writes one report for the whole job (the default `report`
//! feature links `rankscope-coordinator` for that; a [`Reporter`] of the
//! program's own can replace it).
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
//! assert!(outcome.report.unwrap().summary.contains("text_encoding"));
//! ```
#![deny(missing_docs)]

mod control;
mod flusher;
mod function_calls;
mod kernel_trace;
mod lock_order;
mod notice;
mod profiler;
mod recorder;
mod records;
mod reporter;
mod sampler;
mod session;
mod signals;
mod slot;
mod stage;
mod stage_name;
mod stop;
mod sync;
mod ticks;
pub mod transport;

pub use control::WindowControl;
pub use kernel_trace::KernelTraceRows;
pub use profiler::{LiveState, Profiler, ProfilerBuilder, ProfilerError};
pub use rankscope_common::config::ConfigError;
pub use rankscope_common::env::RankEnv;
pub use rankscope_common::error::Chain;
pub use rankscope_common::gather::{Gathered, ReportFiles, Skipped};
pub use rankscope_common::kineto::{TraceCut, TraceError};
pub use rankscope_common::table::HOST_WINDOW;
pub use rankscope_common::Config;
pub use recorder::FunctionSite;
pub use records::{BlockComputation, DiffusionStep, MemoryReading};
#[cfg(feature = "report")]
pub use reporter::CoordinatorReporter;
pub use reporter::Reporter;
pub use session::PlannedWindow;
pub use session::{GatherSummary, Outcome, Session, SessionError};
pub use stage::{OpenStageId, StageGuard};
pub use stage_name::StageName;

/// Times a stage until the guard it returns drops, like
/// [`Profiler::stage`], with the name held in a `static` of the call site:
/// the cheapest way to time a stage.
///
/// ```
/// let profiler = rankscope::Profiler::disabled();
/// for _ in 0..3 {
///     let _step = rankscope::stage!(profiler, "denoise_step");
/// }
/// ```
#[macro_export]
macro_rules! stage {
    ($profiler:expr, $name:literal) => {{
        static NAME: $crate::StageName = $crate::StageName::from_static($name);
        $profiler.stage_named(&NAME)
    }};
}

/// Whether NVML loads on this machine (with `library`, else the system's).
pub fn nvml_available(library: Option<&std::path::Path>) -> bool {
    sampler::nvml::available(library)
}
