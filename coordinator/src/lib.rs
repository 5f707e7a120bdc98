//! rankscope-coordinator: the receive side of rankscope. It turns the
//! payloads rank 0 gathered into one analysed [`model::Report`] and writes
//! `report.json`, `summary.txt` and `stages.csv`.
//!
//! - [`analysis::analyze`]: gathered payloads → [`model::Report`];
//! - [`report::write_reports`]: the report files; [`report::ReportWriter`]
//!   is the [`rankscope::Reporter`] rank 0 runs in-process;
//! - [`aggregate::aggregate`]: the offline path over a directory of spill files.
//!
//! ```
//! use std::sync::Arc;
//! use rankscope::{Config, Profiler, RankEnv};
//!
//! let out = tempfile::tempdir().unwrap();
//! let config = Config { output_dir: out.path().into(), ..Config::default() };
//! let profiler = Profiler::with_rank_env(config, RankEnv::single());
//! profiler.set_reporter(Arc::new(rankscope_coordinator::report::ReportWriter));
//! let session = profiler.session("t2v", &[]).unwrap();
//! drop(profiler.stage("vae_decode"));
//! let outcome = session.finish().unwrap();
//! let report = outcome.report.unwrap();
//! assert!(report.summary.contains("vae_decode"));
//! assert!(outcome.session_dir.join("report.json").exists());
//! ```
#![deny(missing_docs)]

pub mod aggregate;
pub mod analysis;
pub mod inspect;
pub mod model;
pub mod report;
