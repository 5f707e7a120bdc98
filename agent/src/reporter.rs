//! What rank 0 does with the gathered payloads: the reporter. The agent
//! only gathers; `rankscope-coordinator` provides the reporter that analyses
//! and writes the report, so the agent does not depend on it.

use std::path::{Path, PathBuf};

use rankscope_common::Config;

use crate::transport::Gathered;

/// The report files written for a session.
#[derive(Debug, Clone, Default)]
pub struct ReportFiles {
    /// Every file written.
    pub files: Vec<PathBuf>,
    /// The terminal summary table.
    pub summary: String,
}

/// Writes the report of a session from the gathered payloads.
pub trait Reporter: Send + Sync {
    /// Analyses `gathered` and writes the report into `session_dir`.
    fn report(
        &self,
        gathered: &Gathered,
        session_dir: &Path,
        config: &Config,
    ) -> Result<ReportFiles, Box<dyn std::error::Error + Send + Sync>>;
}
