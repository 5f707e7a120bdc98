//! What rank 0 does with the gathered payloads: the reporter. With the
//! default `report` feature, rank 0 analyses them and writes the report
//! through `rankscope-coordinator`; a program can set its own reporter.

use std::path::Path;
use std::sync::Arc;

use rankscope_common::gather::{Gathered, ReportFiles};
use rankscope_common::Config;

/// Writes the report of a session from the gathered payloads.
pub trait Reporter: Send + Sync {
    /// Analyses `gathered` and writes the report into `session_dir`. In a
    /// two-level gather (`gathered.gather_levels` 2) `gathered.payloads`
    /// holds rank 0's node's payloads (and those of ranks that reached no
    /// leader); the other nodes come as their leaders' digests,
    /// `gathered.nodes`, which `rankscope-coordinator` reads.
    fn report(
        &self,
        gathered: &Gathered,
        session_dir: &Path,
        config: &Config,
    ) -> Result<ReportFiles, Box<dyn std::error::Error + Send + Sync>>;
}

/// The reporter of `rankscope-coordinator`: report.json, summary.txt and
/// stages.csv in the session directory.
#[cfg(feature = "report")]
#[derive(Debug, Default, Clone, Copy)]
pub struct CoordinatorReporter;

#[cfg(feature = "report")]
impl Reporter for CoordinatorReporter {
    fn report(
        &self,
        gathered: &Gathered,
        session_dir: &Path,
        config: &Config,
    ) -> Result<ReportFiles, Box<dyn std::error::Error + Send + Sync>> {
        let config = rankscope_coordinator::AnalysisConfig::from(config);
        Ok(rankscope_coordinator::report::report(
            gathered,
            session_dir,
            &config,
        )?)
    }
}

/// The reporter rank 0 uses when the program set none: the coordinator's
/// with the `report` feature, else none (the spill files stay for
/// `rankscope aggregate`).
pub(crate) fn default_reporter() -> Option<Arc<dyn Reporter>> {
    #[cfg(feature = "report")]
    return Some(Arc::new(CoordinatorReporter));
    #[cfg(not(feature = "report"))]
    return None;
}
