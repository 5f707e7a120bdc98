//! rankscope-coordinator: what rank 0 does with the gathered payloads. It
//! turns them into one analysed [`model::Report`] and writes the report
//! files: `report.json`, `summary.txt`, `stages.csv`, `report.html`, the
//! merged `trace.json.gz` and the raw Arrow data (`raw/`). It depends on
//! `rankscope-common` only: no NVML, no agent, no command line.
//!
//! - [`analysis::analyze`]: gathered payloads → [`model::Report`], under an
//!   [`AnalysisConfig`] (what the analysis reads of the configuration);
//! - [`report::report`]: analyse and write every report file, as rank 0 does
//!   in-process (the agent calls it); [`report::write_reports`] renders a
//!   report already analysed;
//! - [`aggregate::aggregate`]: the offline path over a directory of spill files;
//! - [`inspect::inspect`]: what one payload file holds;
//! - [`compare::compare`]: two reports side by side, regressions flagged;
//! - [`import::import`]: per-rank torch.profiler traces into one report.
//!
//! ```
//! use rankscope_common::gather::{accept, Candidate, Expect};
//! use rankscope_common::payload::{Payload, PayloadHeader};
//! use rankscope_coordinator::AnalysisConfig;
//!
//! let header = PayloadHeader::new("job-1", "t2v", 0, 2);
//! let candidate = Candidate {
//!     source: "rank 0".into(),
//!     payload: Ok(Payload { header, tables: Default::default() }),
//! };
//! let gathered = accept(vec![candidate], &Expect::default());
//! let dir = tempfile::tempdir().unwrap();
//! let files = rankscope_coordinator::report::report(&gathered, dir.path(), &AnalysisConfig::default()).unwrap();
//! assert!(dir.path().join("report.json").exists());
//! assert!(files.summary.contains("ranks 1/2"));
//! ```
#![deny(missing_docs)]

pub mod aggregate;
pub mod analysis;
pub mod compare;
mod config;
pub mod import;
pub mod inspect;
mod join;
pub mod model;
pub mod progress;
pub mod read;
pub mod report;
#[cfg(test)]
mod test_support;

pub use config::AnalysisConfig;
