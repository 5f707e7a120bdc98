//! Report writers. Those rendered from the analysed [`Report`] alone
//! (report.json, report.html, summary.txt, stages.csv) compute no
//! statistics; the per-row ones ([`rows`]: trace.json.gz, raw/) convert
//! the payloads themselves, bounded.

mod csv;
mod gzip;
pub mod html;
pub mod raw;
pub mod rows;
mod sections;
mod summary;
pub mod trace;

use crate::AnalysisConfig;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use rankscope_common::file::AtomicFile;
use rankscope_common::gather::{Gathered, ReportFiles};
use rankscope_common::Payload;

use crate::analysis::analyze_with_rows;
use crate::join::join;
use crate::model::{Notice, Report};

pub use rows::{RowWriters, TraceFile};
pub use summary::summary;
pub use trace::TRACE_JSON_GZ;

/// File names inside the session directory.
pub const REPORT_JSON: &str = "report.json";
/// The terminal summary.
pub const SUMMARY_TXT: &str = "summary.txt";
/// The page with charts.
pub const REPORT_HTML: &str = "report.html";
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

/// Makes the directory the report files go into, with its parents.
pub fn create_dir(dir: &Path) -> Result<(), WriteError> {
    std::fs::create_dir_all(dir).map_err(|source| WriteError {
        path: dir.to_path_buf(),
        source,
    })
}

/// Analyses what rank 0 gathered and writes every report file into `dir`:
/// what rank 0 does at the end of a session.
pub fn report(
    gathered: &Gathered,
    dir: &Path,
    config: &AnalysisConfig,
) -> Result<ReportFiles, WriteError> {
    let (mut report, represented) = analyze_with_rows(gathered, config);
    if report.window.is_none() {
        report.windows = window_reports(dir);
    }
    let mut rows = RowWriters::create(dir, &report, config)?;
    for payload in gathered.payloads.iter().chain(&represented) {
        rows.add(payload)?;
    }
    let row_files = rows.finish(&mut report)?;
    if gathered.gather_levels > 1 {
        report
            .session
            .notices
            .push(rows_of_two_levels(gathered, &represented));
    }
    let mut files = write_reports(&report, dir)?;
    files.files.extend(row_files);
    Ok(files)
}

/// What a two-level gather's rows hold: the payloads rank 0 gathered
/// itself (its node's), and of the other nodes, whose leaders send
/// digests, those they carried (`represented`: each node's busiest rank,
/// of the busiest nodes, and the ranks `trace_ranks` names).
fn rows_of_two_levels(gathered: &Gathered, represented: &[Payload]) -> Notice {
    let ranks = |payloads: &[Payload]| {
        let ranks: Vec<u32> = payloads.iter().map(|p| p.header.rank.rank).collect();
        rankscope_common::text::rank_ranges(&ranks)
    };
    Notice {
        message: format!(
            "gathered in two levels: {TRACE_JSON_GZ} and raw/ hold the ranks whose payloads \
             rank 0 took itself ({}) and {} rank(s) of the other nodes ({}: each node's busiest \
             rank, of the {} busiest nodes at most, and those `trace_ranks` names); every \
             rank's data is in its spill file in the session directory, of which `rankscope \
             aggregate` writes both for every rank",
            ranks(&gathered.payloads),
            represented.len(),
            ranks(represented),
            crate::analysis::REPRESENTED_NODES
        ),
        ranks: vec![0],
    }
}

/// The numbers of the windows in session directory `dir` that have a
/// report (`window-<k>/report.json`), in order: a session's report links
/// them.
pub(crate) fn window_reports(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut windows: Vec<u32> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let index = entry
                .file_name()
                .to_str()?
                .strip_prefix("window-")?
                .parse()
                .ok()?;
            entry.path().join(REPORT_JSON).is_file().then_some(index)
        })
        .collect();
    windows.sort_unstable();
    windows
}

/// Writes the files rendered from the report alone — `report.json`,
/// `report.html`, `summary.txt` and `stages.csv` — into `dir`.
pub fn write_reports(report: &Report, dir: &Path) -> Result<ReportFiles, WriteError> {
    let write_json = || {
        write_with(&dir.join(REPORT_JSON), |out| {
            serde_json::to_writer_pretty(out, report).map_err(std::io::Error::other)
        })
    };
    // report.json, the largest, is written beside the others.
    let (json, others) = join(write_json, || write_pages(report, dir));
    let mut files = vec![json?];
    let (others, summary) = others?;
    files.extend(others);
    Ok(ReportFiles { files, summary })
}

/// Writes report.html, summary.txt and stages.csv; returns their paths and
/// the summary.
fn write_pages(report: &Report, dir: &Path) -> Result<(Vec<PathBuf>, String), WriteError> {
    let summary = summary(report);
    let files = vec![
        write_html_file(report, &dir.join(REPORT_HTML))?,
        write_file(&dir.join(SUMMARY_TXT), summary.as_bytes())?,
        write_file(&dir.join(STAGES_CSV), csv::stages_csv(report).as_bytes())?,
    ];
    Ok((files, summary))
}

/// Writes the page of `report` to `path`: `rankscope report`.
pub fn write_html_file(report: &Report, path: &Path) -> Result<PathBuf, WriteError> {
    write_with(path, |out| html::write_html(report, out))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<PathBuf, WriteError> {
    write_with(path, |out| out.write_all(bytes))
}

/// Writes the file `path` (atomically) with `write`, buffered.
fn write_with(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<AtomicFile>) -> std::io::Result<()>,
) -> Result<PathBuf, WriteError> {
    let written = AtomicFile::create(path).and_then(|file| {
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.commit()
    });
    written.map_err(|source| WriteError {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(path.to_path_buf())
}
