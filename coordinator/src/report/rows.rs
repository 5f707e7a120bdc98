//! The outputs written row by row, a payload at a time, after the analysis:
//! `trace.json.gz` and `raw/`. Each accepted payload is added once, in any
//! order (the aggregation decodes them again on several threads rather than
//! hold them all); [`RowWriters::finish`] puts the files in place and notes
//! in the report what was left out of them.

use std::collections::BTreeMap;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rankscope_common::file::AtomicFile;
use rankscope_common::{Config, Payload, PayloadHeader};

use super::raw::{self, RawWriter, RAW_DIR};
use super::trace::{self, TraceWriter};
use super::WriteError;
use crate::model::{Notice, RankSummary, Report};

/// The merged trace, in the session directory.
pub const TRACE_JSON_GZ: &str = "trace.json.gz";

/// What tells one rank's payload from any other: a second payload for the
/// same rank (another process, another run) differs in one of these.
pub type PayloadIdentity = (u32, u32, i64, String, Option<String>);

/// The identity of the payload `header` heads.
pub fn identity(header: &PayloadHeader) -> PayloadIdentity {
    (
        header.rank.rank,
        header.rank.pid,
        header.clock.start_unix_ns,
        header.session.id.clone(),
        header.session.run_id.clone(),
    )
}

/// The trace and raw writers of one report. [`RowWriters::add`] may be
/// called from several threads: each payload's rows are converted on the
/// calling thread, and only their writing takes turns.
pub struct RowWriters {
    ranks: BTreeMap<u32, RankSummary>,
    max_stages: u64,
    trace_path: PathBuf,
    trace: Mutex<TraceWriter<BufWriter<AtomicFile>>>,
    raw: Mutex<RawWriter>,
    notes: Mutex<Vec<(String, u32)>>,
}

/// `mutex` locked; a writer that panicked elsewhere left nothing half-done
/// that matters here (its error is reported where it happened).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl RowWriters {
    /// Starts the files in `dir` for the ranks of `report`.
    pub fn create(dir: &Path, report: &Report, config: &Config) -> Result<Self, WriteError> {
        let trace_path = dir.join(TRACE_JSON_GZ);
        let failed = |source| WriteError {
            path: trace_path.clone(),
            source,
        };
        let file = AtomicFile::create(&trace_path).map_err(failed)?;
        let trace = TraceWriter::new(BufWriter::new(file)).map_err(failed)?;
        Ok(RowWriters {
            ranks: report.ranks.iter().map(|r| (r.rank, r.clone())).collect(),
            max_stages: config.trace_max_stages,
            trace: Mutex::new(trace),
            trace_path,
            raw: Mutex::new(RawWriter::new(&dir.join(RAW_DIR))?),
            notes: Mutex::new(Vec::new()),
        })
    }

    /// Adds the rows of `payload`, a rank of the report.
    pub fn add(&self, payload: &Payload) -> Result<(), WriteError> {
        let rank = payload.header.rank.rank;
        if let Some(summary) = self.ranks.get(&rank) {
            let events = trace::rank_events(payload, summary, self.max_stages);
            lock(&self.trace)
                .add(&events)
                .map_err(|source| WriteError {
                    path: self.trace_path.clone(),
                    source,
                })?;
        }
        let mut batches = raw::rank_batches(payload);
        let left_out = std::mem::take(&mut batches.left_out);
        lock(&self.raw).add(batches)?;
        lock(&self.notes).extend(left_out.into_iter().map(|note| (note, rank)));
        Ok(())
    }

    /// Closes the files, puts them in place and adds to `report` what was
    /// left out of them; returns their paths.
    pub fn finish(self, report: &mut Report) -> Result<Vec<PathBuf>, WriteError> {
        let failed = |source| WriteError {
            path: self.trace_path.clone(),
            source,
        };
        let trace = self.trace.into_inner().unwrap_or_else(|e| e.into_inner());
        let file = trace.finish().map_err(failed)?;
        file.into_inner()
            .map_err(|e| failed(e.into_error()))?
            .commit()
            .map_err(failed)?;
        let mut files = vec![self.trace_path.clone()];
        let raw = self.raw.into_inner().unwrap_or_else(|e| e.into_inner());
        files.extend(raw.finish()?);
        let notes = self.notes.into_inner().unwrap_or_else(|e| e.into_inner());
        for (message, rank) in notes {
            report.session.notices.push(Notice {
                message,
                ranks: vec![rank],
            });
        }
        Ok(files)
    }
}
