//! Report writers: each renders the analysed [`Report`] into one file of the
//! session directory. None of them computes statistics.

mod csv;
mod summary;

use std::path::{Path, PathBuf};

use rankscope_common::gather::{Gathered, ReportFiles};
use rankscope_common::{file, Config};

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
#[error("writing {path}")]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// Analyses what rank 0 gathered and writes every report file into `dir`:
/// what rank 0 does at the end of a session.
pub fn report(gathered: &Gathered, dir: &Path, config: &Config) -> Result<ReportFiles, WriteError> {
    write_reports(&analyze(gathered, config), dir)
}

/// Writes `report.json`, `summary.txt` and `stages.csv` into `dir`.
pub fn write_reports(report: &Report, dir: &Path) -> Result<ReportFiles, WriteError> {
    let summary = summary(report);
    let json = serde_json::to_vec_pretty(report).expect("the report model always serializes");
    let files = vec![
        write_file(&dir.join(REPORT_JSON), &json)?,
        write_file(&dir.join(SUMMARY_TXT), summary.as_bytes())?,
        write_file(&dir.join(STAGES_CSV), csv::stages_csv(report).as_bytes())?,
    ];
    Ok(ReportFiles { files, summary })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<PathBuf, WriteError> {
    file::write_atomic(path, bytes).map_err(|source| WriteError {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(path.to_path_buf())
}
