//! Offline aggregation: the spill files of a session directory into one
//! report, with the same acceptance and analysis rank 0 runs in-process.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rankscope_common::gather::{self, Expect, ReportFiles, RunFilter, Skipped};
use rankscope_common::{spill, Config};

use crate::analysis::{analyze_digests, RankDigest};
use crate::model::Notice;
use crate::model::Report;
use crate::report::rows::{identity, PayloadIdentity};
use crate::report::{write_reports, WriteError};
use crate::report::{RowWriters, TRACE_JSON_GZ};

/// Why no report could be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AggregateError {
    /// The directory could not be read.
    #[error("reading {dir}")]
    Read {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not one file could be used.
    #[error("no usable rank payload in {dir}{}", describe(.skipped))]
    NothingUsable {
        /// The directory.
        dir: PathBuf,
        /// Every file refused, with the reason.
        skipped: Vec<Skipped>,
    },
    /// The output directory could not be made.
    #[error("creating {path}")]
    Output {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A report file could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

fn describe(skipped: &[Skipped]) -> String {
    skipped
        .iter()
        .map(|s| {
            format!(
                "\n  {}: {}",
                s.source,
                rankscope_common::error::Chain(&s.reason)
            )
        })
        .collect()
}

/// A written report.
#[derive(Debug)]
pub struct Aggregated {
    /// The analysed report.
    pub report: Report,
    /// The files written.
    pub files: ReportFiles,
}

impl Aggregated {
    /// Whether every rank is in the report, whole (none recovered from its
    /// flushes only), and every input in the directory was used (none
    /// refused, none of another run).
    pub fn is_complete(&self) -> bool {
        let session = &self.report.session;
        session.ranks_missing.is_empty()
            && session.skipped.is_empty()
            && session.other_runs.is_empty()
            && !self.report.ranks.iter().any(|rank| rank.partial)
    }
}

/// Merges the spill files of one run in `reports_dir` — `run`, else the
/// newest — and writes the report into `output` (default: `reports_dir`).
/// Files of other runs are named as skipped.
pub fn aggregate(
    reports_dir: &Path,
    output: Option<&Path>,
    run: Option<&str>,
    config: &Config,
) -> Result<Aggregated, AggregateError> {
    // Each rank reduced as it is decoded: only the digests are held.
    let candidates = spill::read_dir_with(reports_dir, config.max_data_points, |payload| {
        RankDigest::new(&payload, config)
    })
    .map_err(|source| AggregateError::Read {
        dir: reports_dir.to_path_buf(),
        source,
    })?;
    let expect = Expect {
        run: run.map_or(RunFilter::Any, |run| RunFilter::Only(Some(run.to_string()))),
        max_world_size: Some(config.max_world_size),
        ..Expect::default()
    };
    let gathered = gather::accept(candidates, &expect);
    if gathered.payloads.is_empty() {
        return Err(AggregateError::NothingUsable {
            dir: reports_dir.to_path_buf(),
            skipped: gathered.skipped,
        });
    }
    let output = output.unwrap_or(reports_dir);
    std::fs::create_dir_all(output).map_err(|source| AggregateError::Output {
        path: output.to_path_buf(),
        source,
    })?;
    let accepted: HashSet<PayloadIdentity> = gathered
        .payloads
        .iter()
        .map(|digest| identity(&digest.header))
        .collect();
    let mut report = analyze_digests(gathered, config);
    let row_files = write_rows(reports_dir, output, &accepted, &mut report, config)?;
    let mut files = write_reports(&report, output)?;
    files.files.extend(row_files);
    Ok(Aggregated { report, files })
}

/// The second pass: the payloads of the report (`accepted`) decoded again,
/// on every core, each written into the trace and raw files as it comes.
/// A payload that no longer decodes as it did (its file changed meanwhile)
/// is named in the report.
fn write_rows(
    reports_dir: &Path,
    output: &Path,
    accepted: &HashSet<PayloadIdentity>,
    report: &mut Report,
    config: &Config,
) -> Result<Vec<PathBuf>, AggregateError> {
    let rows = RowWriters::create(output, report, config)?;
    let written = spill::read_dir_with(reports_dir, config.max_data_points, |payload| {
        let id = identity(&payload.header);
        if !accepted.contains(&id) {
            return Ok(None);
        }
        rows.add(&payload).map(|()| Some(id))
    })
    .map_err(|source| AggregateError::Read {
        dir: reports_dir.to_path_buf(),
        source,
    })?;
    let mut seen = HashSet::new();
    for candidate in written {
        if let Ok(written) = candidate.payload {
            seen.extend(written?);
        }
    }
    let files = rows.finish(report)?;
    let mut gone: Vec<u32> = accepted.difference(&seen).map(|(rank, ..)| *rank).collect();
    if !gone.is_empty() {
        gone.sort_unstable();
        report.session.notices.push(Notice {
            message: format!(
                "changed or removed while the report was written: not in {TRACE_JSON_GZ} or raw/"
            ),
            ranks: gone,
        });
    }
    Ok(files)
}
