//! What an imported trace puts on the merged timeline (`trace.json.gz`):
//! its GPU activities with their launches, its collective calls, CPU
//! operators and Python calls, the earliest `max` of each kind, as the
//! tables an in-job rank's payload would carry, encoded into a file of
//! their own until the clocks are aligned (memory stays flat however many
//! ranks), then written by the same code as an in-job report's.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_schema::ArrowError;
use rankscope_common::kineto::RankTrace;
use rankscope_common::payload::{self, Compression};
use rankscope_common::table::{
    CollectiveRow, CollectivesBuilder, CpuSpanRow, CpuSpansBuilder, KernelRow, KernelsBuilder,
    PythonCallRow, PythonCallsBuilder, Table,
};
use rankscope_common::{Payload, PayloadHeader};
use tempfile::{NamedTempFile, TempPath};

use super::python::site;
use crate::model::RankSummary;
use crate::report::trace::{rank_events, Cut, RankEvents};

/// An imported trace's window: one per trace.
const WINDOW: u32 = 1;

/// The bounds of a trace's spilled rows: none past memory's.
const SPILL_LIMITS: payload::Limits = payload::Limits {
    table_bytes: u64::MAX,
    payload_bytes: u64::MAX,
};

/// One trace's rows for the timeline, times in ns after `origin`.
#[derive(Debug, Default)]
pub struct Timeline {
    /// The earliest time of the rows kept, ns on the trace's clock.
    pub origin: i64,
    /// From `origin` to the latest end of any row (kept or not), ns.
    span_ns: u64,
    /// The rows, as a payload's tables, encoded in a file of their own
    /// (removed when this is dropped, and not held open meanwhile);
    /// `None` without rows.
    rows: Option<TempPath>,
    /// Rows past `max`, by kind.
    left_out: Vec<(Cut, u64)>,
}

impl Timeline {
    /// The earliest `max` rows of each kind of `trace`; `depth` is each
    /// Python call's, by row.
    pub fn of(
        trace: &RankTrace,
        depth: &[u32],
        max: usize,
        spill: &Path,
    ) -> Result<Self, TimelineError> {
        let base = trace.base_time_ns.unwrap_or(0);
        let at = |ns: i64| base.saturating_add(ns);
        let name = |id: u32| trace.names[id as usize].clone();
        let mut left_out = Vec::new();

        let gpu = &trace.gpu;
        let launches = trace.launch_times();
        let kernels = earliest(&gpu.start_ns, max, Cut::Kernels, &mut left_out);
        let calls = &trace.collectives;
        let collectives = earliest(&calls.start_ns, max, Cut::Kernels, &mut left_out);
        let spans = &trace.cpu_spans;
        let cpu_spans = earliest(&spans.start_ns, max, Cut::CpuSpans, &mut left_out);
        let python = &trace.python_calls;
        let python_calls = earliest(&python.start_ns, max, Cut::PythonCalls, &mut left_out);

        let origin = kernels
            .iter()
            .flat_map(|&i| [Some(gpu.start_ns[i]), launches[i]])
            .flatten()
            .chain(collectives.iter().map(|&i| calls.start_ns[i]))
            .chain(cpu_spans.iter().map(|&i| spans.start_ns[i]))
            .chain(python_calls.iter().map(|&i| python.start_ns[i]))
            .min()
            .map_or(0, at);
        let since = |ns: i64| at(ns).saturating_sub(origin).unsigned_abs();
        // Every row's end, kept or not: the trace's length.
        let ends = |starts: &[i64], durs: &[i64]| -> Option<i64> {
            starts
                .iter()
                .zip(durs)
                .map(|(s, d)| s.saturating_add(*d))
                .max()
        };
        let span_ns = [
            ends(&gpu.start_ns, &gpu.dur_ns),
            ends(&calls.start_ns, &calls.dur_ns),
            ends(&spans.start_ns, &spans.dur_ns),
            ends(&python.start_ns, &python.dur_ns),
        ]
        .into_iter()
        .flatten()
        .map(since)
        .max()
        .unwrap_or(0);
        let mut kernel_rows = KernelsBuilder::default();
        for &i in &kernels {
            kernel_rows.append(&KernelRow {
                window: WINDOW,
                name: name(gpu.name[i]),
                category: gpu.category[i].as_str().to_string(),
                stream: gpu.stream[i].unsigned_abs(),
                device: u32::try_from(gpu.device[i]).ok(),
                start_ns: since(gpu.start_ns[i]),
                dur_ns: gpu.dur_ns[i].unsigned_abs(),
                launch_ns: launches[i].map(since),
            });
        }
        let mut collective_rows = CollectivesBuilder::default();
        for &i in &collectives {
            collective_rows.append(&CollectiveRow {
                window: WINDOW,
                kind: name(calls.kind[i]),
                group: calls.group[i].map(name),
                bytes: calls.bytes[i],
                start_ns: since(calls.start_ns[i]),
                dur_ns: calls.dur_ns[i].unsigned_abs(),
            });
        }
        let mut span_rows = CpuSpansBuilder::default();
        for &i in &cpu_spans {
            span_rows.append(&CpuSpanRow {
                window: WINDOW,
                name: name(spans.name[i]),
                thread: spans.thread[i].unsigned_abs(),
                start_ns: since(spans.start_ns[i]),
                dur_ns: spans.dur_ns[i].unsigned_abs(),
            });
        }
        let mut call_rows = PythonCallsBuilder::default();
        for &i in &python_calls {
            call_rows.append(&PythonCallRow {
                name: site(&trace.names[python.name[i] as usize]).0.to_string(),
                thread: u32::try_from(python.thread[i].unsigned_abs()).unwrap_or(u32::MAX),
                depth: depth.get(i).copied().unwrap_or(0),
                start_ns: since(python.start_ns[i]),
                end_ns: since(python.start_ns[i].saturating_add(python.dur_ns[i])),
            });
        }
        let mut tables: BTreeMap<Table, RecordBatch> = BTreeMap::from([
            (Table::Kernels, kernel_rows.finish()?),
            (Table::Collectives, collective_rows.finish()?),
            (Table::CpuSpans, span_rows.finish()?),
            (Table::PythonCalls, call_rows.finish()?),
        ]);
        tables.retain(|_, batch| batch.num_rows() > 0);
        let rows = if tables.is_empty() {
            None
        } else {
            let payload = Payload {
                header: PayloadHeader::new("import", "import", 0, 1),
                tables,
            };
            // A local file of this process's own: not bound as a payload
            // on the wire is.
            let bytes = payload::encode_within(&payload, Compression::Lz4, &SPILL_LIMITS)?;
            let mut file = NamedTempFile::new_in(spill)?;
            file.write_all(&bytes)?;
            Some(file.into_temp_path())
        };
        Ok(Timeline {
            origin,
            span_ns,
            rows,
            left_out,
        })
    }

    /// From the earliest row to the latest end, seconds.
    pub fn span_s(&self) -> f64 {
        self.span_ns as f64 / 1e9
    }

    /// The trace's events, `rank` placing it on the shared timeline.
    pub fn events(&self, rank: &RankSummary, max: u64) -> Result<RankEvents, TimelineError> {
        let payload = match &self.rows {
            Some(path) => payload::decode_within(&std::fs::read(path)?, &SPILL_LIMITS)?,
            None => Payload {
                header: PayloadHeader::new("import", "import", rank.rank, rank.rank + 1),
                tables: BTreeMap::new(),
            },
        };
        let mut events = rank_events(&payload, rank, max);
        events.left_out.extend(self.left_out.iter().copied());
        Ok(events)
    }
}

/// Why a trace's timeline rows could not be kept or read back.
#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    /// A table could not be built.
    #[error(transparent)]
    Batch(#[from] ArrowError),
    /// The rows could not be encoded or decoded.
    #[error(transparent)]
    Payload(#[from] payload::PayloadError),
    /// Their file could not be written or read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The rows of the earliest `max` of `starts`, in time order; how many
/// were past it is added to `left_out` as `cut`.
fn earliest(starts: &[i64], max: usize, cut: Cut, left_out: &mut Vec<(Cut, u64)>) -> Vec<usize> {
    let mut rows: Vec<usize> = (0..starts.len()).collect();
    rows.sort_by_key(|&i| starts[i]);
    if rows.len() > max {
        left_out.push((cut, (rows.len() - max) as u64));
        rows.truncate(max);
    }
    rows
}
