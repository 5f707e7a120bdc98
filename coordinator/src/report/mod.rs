//! Report writers: each renders the analysed [`Report`] into one file of the
//! session directory. None of them computes statistics.

mod csv;
mod summary;
mod text;

use std::path::{Path, PathBuf};

use rankscope::transport::Gathered;
use rankscope::{ReportFiles, Reporter};
use rankscope_common::Config;

use crate::analysis::analyze;
use crate::model::Report;

pub use summary::summary;

/// File names inside the session directory.
pub const REPORT_JSON: &str = "report.json";
/// The terminal summary.
pub const SUMMARY_TXT: &str = "summary.txt";
/// Stage statistics as CSV.
pub const STAGES_CSV: &str = "stages.csv";

/// A report file that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing {path}: {source}")]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// Writes `report.json`, `summary.txt` and `stages.csv` into `dir`.
pub fn write_reports(report: &Report, dir: &Path) -> Result<ReportFiles, WriteError> {
    let summary = summary(report);
    let json = serde_json::to_vec_pretty(report).expect("the report model always serializes");
    let files = vec![
        write_atomic(&dir.join(REPORT_JSON), &json)?,
        write_atomic(&dir.join(SUMMARY_TXT), summary.as_bytes())?,
        write_atomic(&dir.join(STAGES_CSV), csv::stages_csv(report).as_bytes())?,
    ];
    Ok(ReportFiles { files, summary })
}

/// Writes a file through a temporary name, so readers never see half of it.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<PathBuf, WriteError> {
    let temporary = path.with_extension(format!("tmp.{}", std::process::id()));
    let fail = |source| WriteError {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(&temporary, bytes).map_err(fail)?;
    std::fs::rename(&temporary, path).map_err(fail)?;
    Ok(path.to_path_buf())
}

/// The reporter rank 0 runs in-process: analyse, then write every report.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReportWriter;

impl Reporter for ReportWriter {
    fn report(
        &self,
        gathered: &Gathered,
        session_dir: &Path,
        config: &Config,
    ) -> Result<ReportFiles, Box<dyn std::error::Error + Send + Sync>> {
        Ok(write_reports(&analyze(gathered, config), session_dir)?)
    }
}
