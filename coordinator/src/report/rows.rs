//! The outputs written row by row, a payload at a time, after the analysis:
//! `trace.json.gz` and `raw/`. Each payload of the report is added once, by
//! rank (the aggregation decodes them again, a few at a time on every core,
//! rather than hold them all); [`RowWriters::finish`] puts the files in
//! place and notes in the report what was left out of them.

use crate::AnalysisConfig;
use std::collections::BTreeMap;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use rankscope_common::file::AtomicFile;
use rankscope_common::{Payload, PayloadHeader};

use super::raw::{self, RankBatches, RawWriter, RAW_DIR};
use super::trace::{self, Cut, RankEvents, TraceWriter, TRACE_JSON_GZ};
use super::WriteError;
use crate::model::{Notice, RankSummary, Report};

/// Removes the per-row files an earlier report left in `dir`: a report
/// written without them must not sit beside another session's.
pub fn remove_row_files(dir: &Path) -> Result<(), WriteError> {
    remove_if_there(&dir.join(TRACE_JSON_GZ))?;
    let raw = dir.join(RAW_DIR);
    raw::remove_raw_files(&raw, |_| true)?;
    remove_if_there(&raw.join(raw::ACCOUNT_FILE))?;
    // Only if nothing else is in it.
    let _ = std::fs::remove_dir(&raw);
    Ok(())
}

/// Removes the file `path`, where there is one.
fn remove_if_there(path: &Path) -> Result<(), WriteError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(WriteError {
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// What tells one rank's payload from another: a second payload for the
/// same rank (another process, another run, a file rewritten since)
/// differs in one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadIdentity {
    /// The rank.
    pub rank: u32,
    /// Its process.
    pub pid: u32,
    /// Its session's start, Unix ns.
    pub start_unix_ns: i64,
    /// Its session's length, ns.
    pub duration_ns: u64,
    /// How far its flushes reached, for a partial rank.
    pub flushed_until_ns: Option<u64>,
    /// Its session id.
    pub session: String,
    /// Its run.
    pub run: Option<String>,
}

impl PayloadIdentity {
    /// The identity of the payload `header` heads.
    pub fn of(header: &PayloadHeader) -> Self {
        PayloadIdentity {
            rank: header.rank.rank,
            pid: header.rank.pid,
            start_unix_ns: header.clock.start_unix_ns,
            duration_ns: header.clock.duration_ns,
            flushed_until_ns: header.flushed_until_ns,
            session: header.session.id.clone(),
            run: header.session.run_id.clone(),
        }
    }
}

/// The trace and raw writers of one report. A payload's rows are converted
/// by [`RowWriters::prepare`], which any thread may call, then written in
/// order by [`RowWriters::write`]: the files come out the same whatever
/// the threads did.
pub struct RowWriters {
    ranks: BTreeMap<u32, RankSummary>,
    trace: TraceFile,
    raw: RawWriter,
    /// Tables left out of raw/: per reason, the ranks.
    raw_notes: BTreeMap<String, Vec<u32>>,
}

/// `trace.json.gz` being written, a rank at a time, and what its bounds
/// left out of each rank.
pub struct TraceFile {
    path: PathBuf,
    writer: TraceWriter<BufWriter<AtomicFile>>,
    /// The bound on each rank's events of a kind (`trace_max_stages`).
    pub max_events: u64,
    /// What the trace left out: per cut, how many and of which ranks.
    cuts: BTreeMap<Cut, (u64, Vec<u32>)>,
}

impl TraceFile {
    /// Starts the trace in `dir`, each rank's events of a kind bounded by
    /// `max_events`.
    pub fn create(dir: &Path, max_events: u64) -> Result<Self, WriteError> {
        let path = dir.join(TRACE_JSON_GZ);
        let failed = |source| WriteError {
            path: path.clone(),
            source,
        };
        let file = AtomicFile::create(&path).map_err(failed)?;
        let writer = TraceWriter::new(BufWriter::new(file)).map_err(failed)?;
        Ok(TraceFile {
            path,
            writer,
            max_events,
            cuts: BTreeMap::new(),
        })
    }

    /// Writes the events of `rank`, and counts what they left out.
    pub fn add(&mut self, rank: u32, events: RankEvents) -> Result<(), WriteError> {
        self.writer.add(&events).map_err(|source| WriteError {
            path: self.path.clone(),
            source,
        })?;
        for (cut, count) in events.left_out {
            let (total, ranks) = self.cuts.entry(cut).or_default();
            *total += count;
            if ranks.last() != Some(&rank) {
                ranks.push(rank);
            }
        }
        Ok(())
    }

    /// Closes the trace (not yet in place) and adds to `report` what was
    /// left out of it.
    fn close(self, report: &mut Report) -> Result<ClosedTrace, WriteError> {
        let failed = |source| WriteError {
            path: self.path.clone(),
            source,
        };
        let file = self.writer.finish().map_err(failed)?;
        let file = file.into_inner().map_err(|e| failed(e.into_error()))?;
        for (cut, (count, ranks)) in self.cuts {
            let message = cut.describe(count, self.max_events);
            report.session.notices.push(Notice { message, ranks });
        }
        Ok(ClosedTrace {
            path: self.path,
            file,
        })
    }

    /// Closes the trace, puts it in place and adds to `report` what was
    /// left out of it; returns its path.
    pub fn finish(self, report: &mut Report) -> Result<PathBuf, WriteError> {
        self.close(report)?.commit()
    }
}

/// A written trace, waiting to be put in place.
struct ClosedTrace {
    path: PathBuf,
    file: AtomicFile,
}

impl ClosedTrace {
    fn commit(self) -> Result<PathBuf, WriteError> {
        self.file.commit().map_err(|source| WriteError {
            path: self.path.clone(),
            source,
        })?;
        Ok(self.path)
    }
}

/// One payload's rows, converted for the files.
pub struct RankRows {
    rank: u32,
    events: Option<RankEvents>,
    batches: RankBatches,
}

impl RowWriters {
    /// Starts the files in `dir` for the ranks of `report`.
    pub fn create(
        dir: &Path,
        report: &Report,
        config: &AnalysisConfig,
    ) -> Result<Self, WriteError> {
        Ok(RowWriters {
            ranks: report.ranks.iter().map(|r| (r.rank, r.clone())).collect(),
            trace: TraceFile::create(dir, config.trace_max_stages)?,
            raw: RawWriter::new(&dir.join(RAW_DIR))?,
            raw_notes: BTreeMap::new(),
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
                .map(|summary| trace::rank_events(payload, summary, self.trace.max_events)),
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
        if let Some(events) = events {
            self.trace.add(rank, events)?;
        }
        for note in std::mem::take(&mut batches.left_out) {
            self.raw_notes.entry(note).or_default().push(rank);
        }
        self.raw.add(batches)
    }

    /// Converts and writes the rows of `payload`.
    pub fn add(&mut self, payload: &Payload) -> Result<(), WriteError> {
        self.write(self.prepare(payload))
    }

    /// Closes the files, puts them in place (and `raw/time_account.arrow`
    /// beside the tables' raw files) and adds to `report` what was left out
    /// of them; returns their paths.
    pub fn finish(self, report: &mut Report) -> Result<Vec<PathBuf>, WriteError> {
        // Every file complete before the trace is put in place.
        let trace = self.trace.close(report)?;
        let raw_dir = self.raw.dir().to_path_buf();
        let mut files = self.raw.finish()?;
        files.push(raw::write_account(&report.time_account, &raw_dir)?);
        files.insert(0, trace.commit()?);
        for (message, ranks) in self.raw_notes {
            report.session.notices.push(Notice { message, ranks });
        }
        Ok(files)
    }
}
