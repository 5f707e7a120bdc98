//! The outputs written row by row, a payload at a time, after the analysis:
//! `trace.json.gz` and `raw/`. Each payload of the report is added once, by
//! rank (the aggregation decodes them again, a few at a time on every core,
//! rather than hold them all); [`RowWriters::finish`] puts the files in
//! place and notes in the report what was left out of them.

use std::collections::BTreeMap;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use rankscope_common::file::AtomicFile;
use rankscope_common::{Config, Payload, PayloadHeader};

use super::raw::{self, RankBatches, RawWriter, RAW_DIR};
use super::trace::{self, RankEvents, TraceWriter};
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

/// The trace and raw writers of one report. A payload's rows are converted
/// by [`RowWriters::prepare`], which any thread may call, then written in
/// order by [`RowWriters::write`]: the files come out the same whatever
/// the threads did.
pub struct RowWriters {
    ranks: BTreeMap<u32, RankSummary>,
    max_stages: u64,
    trace_path: PathBuf,
    trace: TraceWriter<BufWriter<AtomicFile>>,
    raw: RawWriter,
    notes: Vec<(String, u32)>,
}

/// One payload's rows, converted for the files.
pub struct RankRows {
    rank: u32,
    events: Option<RankEvents>,
    batches: RankBatches,
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
            trace,
            trace_path,
            raw: RawWriter::new(&dir.join(RAW_DIR))?,
            notes: Vec::new(),
        })
    }

    /// The rows of `payload`, a rank of the report, converted.
    pub fn prepare(&self, payload: &Payload) -> RankRows {
        let rank = payload.header.rank.rank;
        RankRows {
            rank,
            events: self
                .ranks
                .get(&rank)
                .map(|summary| trace::rank_events(payload, summary, self.max_stages)),
            batches: raw::rank_batches(payload),
        }
    }

    /// Writes one payload's converted rows.
    pub fn write(&mut self, rows: RankRows) -> Result<(), WriteError> {
        let RankRows {
            rank,
            events,
            mut batches,
        } = rows;
        if let Some(mut events) = events {
            self.trace.add(&events).map_err(|source| WriteError {
                path: self.trace_path.clone(),
                source,
            })?;
            let left_out = std::mem::take(&mut events.left_out);
            self.notes
                .extend(left_out.into_iter().map(|note| (note, rank)));
        }
        let left_out = std::mem::take(&mut batches.left_out);
        self.notes
            .extend(left_out.into_iter().map(|note| (note, rank)));
        self.raw.add(batches)
    }

    /// Converts and writes the rows of `payload`.
    pub fn add(&mut self, payload: &Payload) -> Result<(), WriteError> {
        self.write(self.prepare(payload))
    }

    /// Closes the files, puts them in place and adds to `report` what was
    /// left out of them; returns their paths.
    pub fn finish(self, report: &mut Report) -> Result<Vec<PathBuf>, WriteError> {
        let failed = |source| WriteError {
            path: self.trace_path.clone(),
            source,
        };
        let file = self.trace.finish().map_err(failed)?;
        file.into_inner()
            .map_err(|e| failed(e.into_error()))?
            .commit()
            .map_err(failed)?;
        let mut files = vec![self.trace_path.clone()];
        files.extend(self.raw.finish()?);
        for (message, rank) in self.notes {
            report.session.notices.push(Notice {
                message,
                ranks: vec![rank],
            });
        }
        Ok(files)
    }
}
