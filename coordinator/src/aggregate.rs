//! Offline aggregation: the spill files of a session directory into one
//! report, with the same acceptance and analysis rank 0 runs in-process.

use std::path::{Path, PathBuf};

use crate::AnalysisConfig;
use rankscope_common::gather::{
    self, Candidate, Expect, Gathered, ReportFiles, RunFilter, Skipped,
};
use rankscope_common::spill::{self, Input};

use crate::analysis::{analyze_digests, RankDigest};
use crate::model::Notice;
use crate::model::Report;
use crate::progress::{Progress, Silent};
use crate::report::rows::{remove_row_files, PayloadIdentity};
use crate::report::{create_dir, window_reports, write_reports, WriteError};
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
    /// The output directory could not be made, or a report file written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// The first 20 inputs refused, a line each, and how many more there were.
fn describe(skipped: &[Skipped]) -> String {
    const LISTED: usize = 20;
    let mut lines: String = skipped
        .iter()
        .take(LISTED)
        .map(|s| {
            format!(
                "\n  {}: {}",
                s.source,
                rankscope_common::error::Chain(&s.reason)
            )
        })
        .collect();
    if skipped.len() > LISTED {
        lines += &format!("\n  … and {} more", skipped.len() - LISTED);
    }
    lines
}

/// Which files [`aggregate`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outputs {
    /// Every report file: the report's own and the per-row ones
    /// (`trace.json.gz`, `raw/`).
    All,
    /// `report.json`, `report.html`, `summary.txt` and `stages.csv` only:
    /// no second pass over the payloads, which at a thousand ranks takes
    /// most of the time.
    ReportOnly,
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
    outputs: Outputs,
    config: &AnalysisConfig,
) -> Result<Aggregated, AggregateError> {
    aggregate_with(reports_dir, output, run, outputs, config, &Silent)
}

/// [`aggregate`], telling `progress` how far it got: the rank files
/// digested, then (with [`Outputs::All`]) the ranks' rows written.
pub fn aggregate_with(
    reports_dir: &Path,
    output: Option<&Path>,
    run: Option<&str>,
    outputs: Outputs,
    config: &AnalysisConfig,
    progress: &dyn Progress,
) -> Result<Aggregated, AggregateError> {
    let inputs = spill::inputs(reports_dir).map_err(|source| AggregateError::Read {
        dir: reports_dir.to_path_buf(),
        source,
    })?;
    let candidates = read_digests(&inputs, config, progress);
    let gathered = accept_run(candidates, reports_dir, run, config)?;
    let output = output.unwrap_or(reports_dir);
    create_dir(output)?;
    let accepted = accepted_inputs(&inputs, &gathered);
    let mut report = analyze_digests(gathered, config);
    if report.window.is_none() && output == reports_dir {
        report.windows = window_reports(reports_dir);
    }
    // The digests are gone, then the second pass's rows: what each took
    // goes back before the next phase.
    release_freed_memory();
    let files = write_files(&accepted, output, &mut report, outputs, config, progress)?;
    Ok(Aggregated { report, files })
}

/// Each of `inputs` decoded and reduced to its digest as it is (only the
/// digests are held), numbered by its input; `progress` counts them.
fn read_digests(
    inputs: &[Input],
    config: &AnalysisConfig,
    progress: &dyn Progress,
) -> Vec<Candidate<RankDigest>> {
    progress.begin("reading rank files", inputs.len() as u64);
    let mut candidates = spill::read_inputs_with(inputs, config.max_data_points, |payload| {
        let digest = RankDigest::new(&payload, config);
        progress.advance(1);
        digest
    });
    // The files refused count as read too.
    progress.advance(candidates.iter().filter(|c| c.payload.is_err()).count() as u64);
    for (input, candidate) in candidates.iter_mut().enumerate() {
        if let Ok(digest) = &mut candidate.payload {
            digest.input = input;
        }
    }
    candidates
}

/// The digests of run `run` (else the newest) of `reports_dir`, one per
/// rank; an error where not one is usable.
fn accept_run(
    candidates: Vec<Candidate<RankDigest>>,
    reports_dir: &Path,
    run: Option<&str>,
    config: &AnalysisConfig,
) -> Result<Gathered<RankDigest>, AggregateError> {
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
    Ok(gathered)
}

/// The inputs of the report, by rank, with what each decoded to.
fn accepted_inputs(
    inputs: &[Input],
    gathered: &Gathered<RankDigest>,
) -> Vec<(Input, PayloadIdentity)> {
    gathered
        .payloads
        .iter()
        .map(|digest| {
            (
                inputs[digest.input].clone(),
                PayloadIdentity::of(&digest.header),
            )
        })
        .collect()
}

/// Writes `report` into `output`: with [`Outputs::All`] the rows of the
/// `accepted` inputs first (else their old files removed), then the
/// report's own files.
fn write_files(
    accepted: &[(Input, PayloadIdentity)],
    output: &Path,
    report: &mut Report,
    outputs: Outputs,
    config: &AnalysisConfig,
    progress: &dyn Progress,
) -> Result<ReportFiles, AggregateError> {
    let row_files = match outputs {
        Outputs::All => write_rows(accepted, output, report, config, progress)?,
        Outputs::ReportOnly => {
            remove_row_files(output)?;
            Vec::new()
        }
    };
    release_freed_memory();
    let mut files = write_reports(report, output)?;
    files.files.extend(row_files);
    Ok(files)
}

/// Gives the memory the allocator holds free back to the system, so that
/// the next phase starts from what is in use (glibc keeps what threads
/// freed in their arenas; at 1024 ranks this takes ~1 MiB off the peak of
/// an aggregation that writes every file, as the last file is written).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory; it is safe to call at
    // any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The second pass: the inputs of the report decoded again, one per core at
/// a time (two per core cost 1 MiB more at 1024 ranks, for 3 % less time),
/// and written into the trace and raw files by rank. An
/// input that no longer decodes to what it did (its file changed
/// meanwhile) is named in the report.
fn write_rows(
    accepted: &[(Input, PayloadIdentity)],
    output: &Path,
    report: &mut Report,
    config: &AnalysisConfig,
    progress: &dyn Progress,
) -> Result<Vec<PathBuf>, AggregateError> {
    let mut rows = RowWriters::create(output, report, config)?;
    progress.begin("writing the trace and raw/", accepted.len() as u64);
    let at_once = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut changed = Vec::new();
    for chunk in accepted.chunks(at_once) {
        let inputs: Vec<Input> = chunk.iter().map(|(input, _)| input.clone()).collect();
        let prepared = spill::read_inputs_with(&inputs, config.max_data_points, |payload| {
            (PayloadIdentity::of(&payload.header), rows.prepare(&payload))
        });
        for (candidate, (_, expected)) in prepared.into_iter().zip(chunk) {
            match candidate.payload {
                Ok((found, prepared)) if found == *expected => rows.write(prepared)?,
                _ => changed.push(expected.rank),
            }
        }
        progress.advance(chunk.len() as u64);
    }
    let files = rows.finish(report)?;
    if !changed.is_empty() {
        report.session.notices.push(Notice {
            message: format!(
                "changed or removed while the report was written: not in {TRACE_JSON_GZ} or raw/"
            ),
            ranks: changed,
        });
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::Rejection;

    #[test]
    fn a_directory_of_refused_files_names_the_first_twenty() {
        let skipped: Vec<Skipped> = (0..25)
            .map(|i| Skipped {
                source: format!("rank-{i:05}.rsp"),
                reason: Rejection::NotAFile,
            })
            .collect();
        let text = describe(&skipped);
        assert_eq!(text.lines().count(), 1 + 20 + 1, "{text}");
        assert!(text.contains("rank-00019.rsp: not a regular file"));
        assert!(!text.contains("rank-00020.rsp"));
        assert!(text.ends_with("\n  … and 5 more"), "{text}");
        assert_eq!(describe(&skipped[..2]).lines().count(), 3);
    }
}
