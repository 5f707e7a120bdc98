//! torch.profiler windows into the rank's data: a Kineto trace the rank
//! wrote is read as a stream (`rankscope_common::kineto`), and what the
//! report analyses of it — its GPU activities, collectives, each CPU
//! operator's calls and time, and the operators one by one for the
//! timeline — becomes rows of the `kernels`, `collectives`, `cpu_ops` and
//! `cpu_spans` tables,
//! their times mapped onto the session clock. The trace file itself is not
//! kept: the rows travel in the payload to rank 0 with everything else.
//! Collective calls can also be recorded one by one on the host
//! ([`Profiler::record_collective`], window [`HOST_WINDOW`]), with or
//! without a window.

use std::path::Path;

use rankscope_common::kineto::{self, RankTrace, TraceCut, TraceError, TraceLimits};
use rankscope_common::table::{
    CollectiveRecord, CpuOpRecord, CpuSpanRecord, KernelRecord, Table, HOST_WINDOW,
};

use crate::recorder::Recorder;
use crate::transport::clock;
use crate::Profiler;

/// What [`Profiler::add_kernel_trace`] kept of one trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelTraceRows {
    /// Trace events read.
    pub events: u64,
    /// GPU activities offered to the `kernels` table (past the row budget
    /// they are counted as the table's dropped rows).
    pub kernels: u64,
    /// Collective calls offered to the `collectives` table.
    pub collectives: u64,
    /// CPU operator names offered to the `cpu_ops` table.
    pub cpu_ops: u64,
    /// CPU operator calls offered to the `cpu_spans` table.
    pub cpu_spans: u64,
    /// Rows left out because they began before the session did.
    pub before_session: u64,
    /// What the read itself cut (names, rows past the per-trace budget,
    /// unusable times).
    pub cut: TraceCut,
}

impl Profiler {
    /// The session clock now, nanoseconds, while a session records: the
    /// start of a collective call for [`Profiler::record_collective`].
    pub fn collective_begin(&self) -> Option<u64> {
        self.recording().map(Recorder::now_ns)
    }

    /// Records one collective call that began at `start_ns` (from
    /// [`Profiler::collective_begin`]) and ends now, as a `collectives` row
    /// of window [`HOST_WINDOW`]: what the Python package records for each
    /// `torch.distributed` collective, so that every report can split a
    /// collective's time into waiting for the last rank and the rest.
    pub fn record_collective(
        &self,
        kind: &str,
        group: Option<&str>,
        bytes: Option<u64>,
        start_ns: u64,
    ) {
        let Some(recorder) = self.recording() else {
            return;
        };
        let dur_ns = recorder.now_ns().saturating_sub(start_ns);
        recorder.record_row(Table::Collectives, |t, _| {
            let record = CollectiveRecord {
                window: HOST_WINDOW,
                kind: t.names.intern(kind),
                group: group.map(str::to_string),
                bytes,
                start_ns,
                dur_ns,
            };
            t.records.collectives.push_back(record);
        });
    }

    /// Reads the torch.profiler / Kineto trace at `path`, written by this
    /// rank during the running session, into the session's `kernels` and
    /// `collectives` tables; `window` numbers the trace's window in the
    /// session, from 1. Kineto stamps wall-clock microseconds: they are
    /// mapped onto the session clock through this process's wall clock.
    /// Without a recording session, nothing is read.
    pub fn add_kernel_trace(
        &self,
        path: &Path,
        window: u32,
    ) -> Result<KernelTraceRows, TraceError> {
        let Some(hub) = self.recording_hub() else {
            return Ok(KernelTraceRows::default());
        };
        let recorder = hub.recording().recorder();
        let limits = TraceLimits {
            max_rows: recorder.max_rows(),
            cpu_spans: true,
            ..TraceLimits::default()
        };
        let trace = kineto::read_trace(path, &limits)?;
        if !trace.parallel.is_empty() {
            // The rank's place in its process groups: its payloads say it.
            hub.set_parallel(trace.parallel.clone());
        }
        Ok(keep(recorder, &trace, window))
    }
}

/// Records the rows of `trace` HTA analyses.
fn keep(recorder: &Recorder, trace: &RankTrace, window: u32) -> KernelTraceRows {
    let keeping = Keeping {
        recorder,
        trace,
        window,
        // The Unix time of the session's start, on this process's clock
        // (not shifted by `clock_shift_ns`: Kineto's clock is not).
        session_start: clock::wall_now_ns(0).saturating_sub(recorder.now_ns() as i64),
    };
    let mut rows = KernelTraceRows {
        events: trace.events,
        cut: trace.cut,
        ..KernelTraceRows::default()
    };
    keeping.kernels(&mut rows);
    keeping.collectives(&mut rows);
    keeping.cpu_ops(&mut rows);
    keeping.cpu_spans(&mut rows);
    rows
}

/// One trace on its way into the recorder's tables, as rows of `window`.
struct Keeping<'a> {
    recorder: &'a Recorder,
    trace: &'a RankTrace,
    window: u32,
    /// The session's start, Unix nanoseconds.
    session_start: i64,
}

impl Keeping<'_> {
    /// A trace time (from its base time) on the session clock; `None`
    /// before the session began.
    fn on_session_clock(&self, start: i64) -> Option<u64> {
        let unix = self.trace.base_time_ns.unwrap_or(0).checked_add(start)?;
        u64::try_from(unix.checked_sub(self.session_start)?).ok()
    }

    /// Every GPU activity: a window rankscope drives holds complete steps
    /// (HTA's dropping of the last step is for traces cut off mid-step).
    fn kernels(&self, rows: &mut KernelTraceRows) {
        let (trace, gpu) = (self.trace, &self.trace.gpu);
        for (i, launch) in trace.launch_times().iter().enumerate() {
            let Some(start_ns) = self.on_session_clock(gpu.start_ns[i]) else {
                rows.before_session += 1;
                continue;
            };
            rows.kernels += 1;
            self.recorder.record_row(Table::Kernels, |t, _| {
                let record = KernelRecord {
                    window: self.window,
                    name: t.names.intern(&trace.names[gpu.name[i] as usize]),
                    category: t.names.intern(gpu.category[i].as_str()),
                    stream: gpu.stream[i].unsigned_abs(),
                    device: u32::try_from(gpu.device[i]).ok(),
                    start_ns,
                    dur_ns: gpu.dur_ns[i].unsigned_abs(),
                    launch_ns: launch.and_then(|at| self.on_session_clock(at)),
                };
                t.records.kernels.push_back(record);
            });
        }
    }

    /// The collective calls, with their process group and size.
    fn collectives(&self, rows: &mut KernelTraceRows) {
        let (trace, calls) = (self.trace, &self.trace.collectives);
        for i in 0..calls.kind.len() {
            let Some(start_ns) = self.on_session_clock(calls.start_ns[i]) else {
                rows.before_session += 1;
                continue;
            };
            rows.collectives += 1;
            self.recorder.record_row(Table::Collectives, |t, _| {
                let record = CollectiveRecord {
                    window: self.window,
                    kind: t.names.intern(&trace.names[calls.kind[i] as usize]),
                    group: calls.group[i].map(|g| trace.names[g as usize].clone()),
                    bytes: calls.bytes[i],
                    start_ns,
                    dur_ns: calls.dur_ns[i].unsigned_abs(),
                };
                t.records.collectives.push_back(record);
            });
        }
    }

    /// Each CPU operator's calls and total time.
    fn cpu_ops(&self, rows: &mut KernelTraceRows) {
        let (trace, ops) = (self.trace, &self.trace.cpu_ops);
        for i in 0..ops.name.len() {
            rows.cpu_ops += 1;
            self.recorder.record_row(Table::CpuOps, |t, _| {
                let record = CpuOpRecord {
                    window: self.window,
                    name: t.names.intern(&trace.names[ops.name[i] as usize]),
                    calls: ops.calls[i],
                    total_ns: ops.total_ns[i].unsigned_abs(),
                };
                t.records.cpu_ops.push_back(record);
            });
        }
    }

    /// The CPU operators one by one, for the timeline.
    fn cpu_spans(&self, rows: &mut KernelTraceRows) {
        let (trace, spans) = (self.trace, &self.trace.cpu_spans);
        for i in 0..spans.name.len() {
            let Some(start_ns) = self.on_session_clock(spans.start_ns[i]) else {
                rows.before_session += 1;
                continue;
            };
            rows.cpu_spans += 1;
            self.recorder.record_row(Table::CpuSpans, |t, _| {
                let record = CpuSpanRecord {
                    window: self.window,
                    name: t.names.intern(&trace.names[spans.name[i] as usize]),
                    thread: spans.thread[i].unsigned_abs(),
                    start_ns,
                    dur_ns: spans.dur_ns[i].unsigned_abs(),
                };
                t.records.cpu_spans.push_back(record);
            });
        }
    }
}
