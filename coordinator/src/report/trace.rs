//! `trace.json.gz`: every rank on the shared timeline in the Trace Event
//! Format that Perfetto and chrome://tracing open. Each rank is a process
//! (`rank N @ host`, sorted by rank), each recording thread a track; stages
//! are complete (`X`) events with their call number and metadata, diffusion
//! steps, blocks, events and memory snapshots instants (`i`) on a track of
//! their own, GPU readings and metrics counters (`C`); the GPU activities
//! and collectives of torch.profiler windows slices on a track per GPU
//! stream and one for the collectives, beside the rank's stages, each
//! kernel with an arrow from its launch on the host, and the CPU operators
//! around them on a track per host thread.
//!
//! Bounded whatever the rank sent: each rank's first `trace_max_stages`
//! stages and as many instants in time order, [`COUNTER_TRACKS`] counters
//! of at most [`COUNTER_POINTS`] readings, names cut to 1 KiB and argument
//! texts to 64 KiB; the report says what was left out. A rank is process
//! `rank + 1` (Perfetto treats pid 0 apart), named `rank N @ host`.

use std::collections::BTreeMap;
use std::io::Write;

use rankscope_common::names::{cut, cut_to};
use rankscope_common::payload::GpuMeta;
use rankscope_common::table::{
    counted_collectives, BlocksView, CollectivesView, CpuSpansView, DiffusionStepsView, EventsView,
    GpuSamplesView, KernelsView, MemorySnapshotsView, MetricsView, PythonCallsView, StagesView,
    OVERHEAD_SECTION,
};
use rankscope_common::{Payload, Table};
use serde::Serialize;
use serde_json::json;

use super::gzip::{Deflated, GzipWriter};
use crate::analysis::gpus::{rows_by_gpu, GPU_METRICS};
use crate::analysis::series::min_max_indices;
use crate::model::RankSummary;

/// The merged trace, in the session directory.
pub const TRACE_JSON_GZ: &str = "trace.json.gz";

/// Readings kept per counter.
pub const COUNTER_POINTS: usize = 2_000;
/// Counters kept per rank (5 per GPU, one per metric name).
pub const COUNTER_TRACKS: usize = 256;
/// The track of a rank's instants (steps, blocks, events, snapshots), past
/// any thread's: Perfetto reads track ids as 32-bit numbers.
const MARKS_TRACK: u32 = 1 << 30;
/// Thread tracks stay below the instants' track.
const MAX_THREAD_TRACK: u32 = MARKS_TRACK - 1;
/// The track of a rank's collective calls (torch.profiler windows), after
/// the instants'; each GPU stream's track follows, at most
/// [`STREAM_TRACKS`] of them (the last takes the streams past them).
const COLLECTIVES_TRACK: u32 = MARKS_TRACK + 1;
/// GPU stream tracks per rank.
const STREAM_TRACKS: u32 = 256;
/// The track of a rank's kernel launches, after its GPU streams'.
const LAUNCHES_TRACK: u32 = COLLECTIVES_TRACK + STREAM_TRACKS + 1;
/// The first track of a rank's CPU operators (torch.profiler windows), one
/// per host thread of the trace, at most [`SPAN_TRACKS`] of them (the last
/// takes the threads past them).
const SPANS_TRACK: u32 = LAUNCHES_TRACK + 1;
/// CPU operator tracks per rank.
const SPAN_TRACKS: u32 = 64;
/// The first track of a rank's traced Python calls, one per recording
/// thread, after the CPU operators'.
const PYTHON_TRACK: u32 = SPANS_TRACK + SPAN_TRACKS;
/// Python call tracks per rank.
const PYTHON_TRACKS: u32 = 64;

/// A slice of a thread, for a track of its kind.
struct ThreadSlice<'a> {
    thread: u64,
    start_ns: u64,
    dur_ns: u64,
    name: &'a str,
    /// Its one argument, made an object once the slice is kept.
    arg: (&'static str, u64),
}

/// Slices that go on tracks of their own, one per thread.
struct SliceKind {
    /// Their tracks' names, before the thread.
    label: &'static str,
    /// Their events' category.
    category: &'static str,
    first_track: u32,
    tracks: u32,
    /// What the bound on events counts them as.
    cut: Cut,
}

const CPU_OPERATORS: SliceKind = SliceKind {
    label: "CPU operators",
    category: "cpu_op",
    first_track: SPANS_TRACK,
    tracks: SPAN_TRACKS,
    cut: Cut::CpuSpans,
};

const PYTHON_CALLS: SliceKind = SliceKind {
    label: "Python",
    category: "python",
    first_track: PYTHON_TRACK,
    tracks: PYTHON_TRACKS,
    cut: Cut::PythonCalls,
};
/// Longest metadata or event payload text kept in an event's arguments.
const MAX_ARG_BYTES: usize = 64 << 10;

/// Writes the trace as payloads come: a header, each rank's events, a
/// closing line, gzipped.
pub struct TraceWriter<W: Write> {
    out: GzipWriter<W>,
    first: bool,
}

impl<W: Write> TraceWriter<W> {
    /// Starts the trace in `out`.
    pub fn new(out: W) -> std::io::Result<Self> {
        let mut out = GzipWriter::new(out)?;
        out.data(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        Ok(TraceWriter { out, first: true })
    }

    /// Adds the events of one rank, made (and compressed) by
    /// [`rank_events`].
    pub fn add(&mut self, events: &RankEvents) -> std::io::Result<()> {
        if events.deflated.is_empty() {
            return Ok(());
        }
        if !self.first {
            self.out.data(b",\n")?;
        }
        self.first = false;
        self.out.piece(&events.deflated)
    }

    /// Closes the event list and the gzip stream.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.data(b"\n]}\n")?;
        self.out.finish()
    }
}

/// One rank's events, compressed where they were made (any thread), for
/// [`TraceWriter::add`] to write in order; and what the bounds left out.
#[derive(Default)]
pub struct RankEvents {
    deflated: Deflated,
    /// What was left out, and how many.
    pub left_out: Vec<(Cut, u64)>,
}

/// Events being made: JSON, comma-separated.
#[derive(Default)]
struct EventList {
    json: Vec<u8>,
}

/// What a bound of the trace left out of a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cut {
    /// Stages past the rank's first `trace_max_stages`.
    Stages,
    /// Instants past the rank's first `trace_max_stages`.
    Instants,
    /// Counters past the rank's first [`COUNTER_TRACKS`].
    Counters,
    /// GPU activities and collective calls of torch.profiler windows past
    /// the rank's first `trace_max_stages`.
    Kernels,
    /// CPU operators of torch.profiler windows past the rank's first
    /// `trace_max_stages`.
    CpuSpans,
    /// Traced Python calls past the rank's first `trace_max_stages`.
    PythonCalls,
}

impl Cut {
    /// What was cut, in words, `limit` being the bound in force.
    pub fn describe(self, count: u64, limit: u64) -> String {
        let (what, bound) = match self {
            Cut::Stages => ("stages", format!("trace_max_stages ({limit})")),
            Cut::Instants => (
                "instants (steps, blocks, events, snapshots)",
                format!("trace_max_stages ({limit})"),
            ),
            Cut::Counters => ("counter tracks", COUNTER_TRACKS.to_string()),
            Cut::Kernels => (
                "GPU activities and collectives (torch.profiler windows)",
                format!("trace_max_stages ({limit})"),
            ),
            Cut::CpuSpans => (
                "CPU operators (torch.profiler windows)",
                format!("trace_max_stages ({limit})"),
            ),
            Cut::PythonCalls => (
                "Python calls (python_tracing)",
                format!("trace_max_stages ({limit})"),
            ),
        };
        format!(
            "{count} {what} past each rank's first {bound} left out of {TRACE_JSON_GZ}; \
             the statistics count them"
        )
    }
}

impl EventList {
    fn push(&mut self, event: &impl Serialize) {
        if !self.json.is_empty() {
            self.json.extend_from_slice(b",\n");
        }
        serde_json::to_writer(&mut self.json, event).expect("the events serialize into memory");
    }
}

/// One trace event; what an event of its phase does not have is left out.
#[derive(Serialize)]
struct Event<'a, A> {
    ph: &'static str,
    name: &'a str,
    pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    /// An instant's scope: `t`, its thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    /// A flow event's id (`s` and `f` with one id are one arrow).
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    /// A flow's end binding: `e`, the slice that encloses it.
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    args: A,
}

impl<'a, A> Event<'a, A> {
    fn new(ph: &'static str, name: &'a str, pid: u32, args: A) -> Self {
        Event {
            ph,
            name,
            pid,
            tid: None,
            ts: None,
            dur: None,
            cat: None,
            s: None,
            id: None,
            bp: None,
            args,
        }
    }
}

#[derive(Serialize)]
struct StageArgs<'a> {
    call: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a str>,
}

/// The trace events of one rank, `rank` being its summary in the report
/// (where it sits on the shared timeline): at most `max_events` stages and
/// as many instants (each the earliest), at most [`COUNTER_TRACKS`]
/// counters of at most [`COUNTER_POINTS`] readings.
pub fn rank_events(payload: &Payload, rank: &RankSummary, max_events: u64) -> RankEvents {
    let mut trace = RankTrace {
        events: EventList::default(),
        left_out: Vec::new(),
        threads: BTreeMap::new(),
        // Perfetto treats pid 0 apart: rank N is process N + 1, named for it.
        pid: rank.rank.saturating_add(1),
        started_s: rank.started_s,
        max: usize::try_from(max_events).unwrap_or(usize::MAX),
    };
    trace.process_metadata(rank);
    trace.stage_spans(payload);
    if trace.marks(payload) {
        trace
            .threads
            .insert(MARKS_TRACK, "diffusion, events, memory".into());
    }
    trace.gpu_activities(payload);
    trace.cpu_spans(payload);
    trace.python_calls(payload);
    trace.thread_metadata();
    trace.counters(payload);
    RankEvents {
        deflated: Deflated::new(&trace.events.json),
        left_out: trace.left_out,
    }
}

/// One rank's trace events as they are made: the rank's process (`pid`),
/// its tracks named so far, what the bounds left out, and the most events
/// of each kind (`max`).
struct RankTrace {
    events: EventList,
    left_out: Vec<(Cut, u64)>,
    threads: BTreeMap<u32, String>,
    pid: u32,
    /// Where the rank sits on the shared timeline, seconds.
    started_s: f64,
    max: usize,
}

impl RankTrace {
    /// Microseconds on the shared timeline from the rank's own nanoseconds.
    fn at(&self, ns: u64) -> f64 {
        self.started_s * 1e6 + ns as f64 / 1e3
    }

    /// The rank's process named and sorted in Perfetto: `rank N @ host`,
    /// and its parallel coordinates where known (`· tp 1/4 · pp 0/2`).
    fn process_metadata(&mut self, rank: &RankSummary) {
        // An imported trace does not say its host.
        let mut process = match rank.host.as_str() {
            "" => format!("rank {}", rank.rank),
            host => format!("rank {} @ {}", rank.rank, cut(host)),
        };
        if !rank.parallel.is_empty() {
            let label = rankscope_common::parallel::label(&rank.parallel);
            process = format!("{process} · {}", cut(&label));
        }
        self.events.push(&Event::new(
            "M",
            "process_name",
            self.pid,
            json!({ "name": process }),
        ));
        let sort = json!({ "sort_index": rank.rank });
        self.events
            .push(&Event::new("M", "process_sort_index", self.pid, sort));
    }
    /// The rank's stages as complete events, the earliest `max` of them, on
    /// their threads' tracks.
    fn stage_spans(&mut self, payload: &Payload) {
        let Ok(Some(v)) = payload.view::<StagesView>() else {
            return;
        };
        let mut rows: Vec<usize> = (0..v.len).collect();
        rows.sort_by_key(|&i| (v.start_ns[i], std::cmp::Reverse(v.end_ns[i])));
        keep_first(&mut rows, self.max, Cut::Stages, &mut self.left_out);
        for i in rows {
            let tid = v.thread[i].min(MAX_THREAD_TRACK);
            self.threads
                .entry(tid)
                .or_insert_with(|| cut(v.thread_name.get(i)).to_string());
            let args = StageArgs {
                call: v.call_index[i],
                metadata: v.metadata.get(i).map(|m| cut_to(m, MAX_ARG_BYTES)),
            };
            self.events.push(&Event {
                tid: Some(tid),
                ts: Some(self.at(v.start_ns[i])),
                dur: Some(v.end_ns[i].saturating_sub(v.start_ns[i]) as f64 / 1e3),
                cat: Some("stage"),
                ..Event::new("X", cut(v.name.get(i)), self.pid, args)
            });
        }
    }
    /// Each track named and sorted by its thread id.
    fn thread_metadata(&mut self) {
        for (tid, name) in std::mem::take(&mut self.threads) {
            self.events.push(&Event {
                tid: Some(tid),
                ..Event::new("M", "thread_name", self.pid, json!({ "name": name }))
            });
            self.events.push(&Event {
                tid: Some(tid),
                ..Event::new(
                    "M",
                    "thread_sort_index",
                    self.pid,
                    json!({ "sort_index": tid }),
                )
            });
        }
    }
    /// Adds the rank's diffusion steps, blocks, events and memory snapshots as
    /// instants on their own track, the earliest `max` of them; whether there
    /// were any.
    fn marks(&mut self, payload: &Payload) -> bool {
        let tables = MarkTables::of(payload);
        let mut rows = tables.rows();
        keep_first(&mut rows, self.max, Cut::Instants, &mut self.left_out);
        for &(ts, table, i) in &rows {
            let Some((name, category, args)) = tables.mark(table, i) else {
                continue;
            };
            self.events.push(&Event {
                tid: Some(MARKS_TRACK),
                ts: Some(self.at(ts)),
                cat: Some(category),
                s: Some("t"),
                ..Event::new("i", &name, self.pid, args)
            });
        }
        !rows.is_empty()
    }
    /// Adds the GPU activities (kernels, copies, sets) and collective calls of
    /// the rank's torch.profiler windows as slices: one track per GPU stream
    /// (`GPU d stream s`), one for the collectives; the earliest `max` of them.
    fn gpu_activities(&mut self, payload: &Payload) {
        let kernels = payload.view::<KernelsView>().ok().flatten();
        let calls = payload.view::<CollectivesView>().ok().flatten();
        let mut rows = activity_rows(kernels.as_ref(), calls.as_ref());
        keep_first(&mut rows, self.max, Cut::Kernels, &mut self.left_out);
        let mut streams: BTreeMap<(Option<u32>, u64), u32> = BTreeMap::new();
        for (start, kernel, i) in rows {
            let (tid, name, dur, category, args) = match (kernel, &kernels, &calls) {
                (true, Some(k), _) => {
                    let tid = stream_track(
                        &mut streams,
                        &mut self.threads,
                        (k.device.get(i), k.stream[i]),
                    );
                    if let Some(launch_ns) = k.launch_ns.get(i) {
                        let kernel = (tid, self.at(start));
                        self.launch_flow(self.at(launch_ns), kernel, i);
                    }
                    let args = json!({ "category": cut(k.category.get(i)), "window": k.window[i] });
                    (tid, k.name.get(i), k.dur_ns[i], "kernel", args)
                }
                (false, _, Some(c)) => {
                    self.threads
                        .entry(COLLECTIVES_TRACK)
                        .or_insert_with(|| "collectives (host)".into());
                    let args = json!({ "group": c.group.get(i).map(cut), "bytes": c.bytes.get(i),
                                       "window": c.window[i] });
                    (
                        COLLECTIVES_TRACK,
                        c.kind.get(i),
                        c.dur_ns[i],
                        "collective",
                        args,
                    )
                }
                _ => continue,
            };
            self.events.push(&Event {
                tid: Some(tid),
                ts: Some(self.at(start)),
                dur: Some(dur as f64 / 1e3),
                cat: Some(category),
                ..Event::new("X", cut(name), self.pid, args)
            });
        }
    }
    /// Adds the CPU operators of the rank's torch.profiler windows as slices,
    /// one track per host thread of the trace (`CPU operators, thread T`); the
    /// earliest `max` of them.
    fn cpu_spans(&mut self, payload: &Payload) {
        let Some(v) = payload.view::<CpuSpansView>().ok().flatten() else {
            return;
        };
        let slices = (0..v.len).map(|i| ThreadSlice {
            thread: v.thread[i],
            start_ns: v.start_ns[i],
            dur_ns: v.dur_ns[i],
            name: v.name.get(i),
            arg: ("window", u64::from(v.window[i])),
        });
        self.thread_slices(slices.collect(), &CPU_OPERATORS);
    }

    /// Adds the rank's traced Python calls as slices, one track per
    /// recording thread (`Python, thread T`); the earliest `max` of them.
    fn python_calls(&mut self, payload: &Payload) {
        let Some(v) = payload.view::<PythonCallsView>().ok().flatten() else {
            return;
        };
        let slices = (0..v.len).map(|i| ThreadSlice {
            thread: u64::from(v.thread[i]),
            start_ns: v.start_ns[i],
            dur_ns: v.end_ns[i].saturating_sub(v.start_ns[i]),
            name: v.name.get(i),
            arg: ("depth", u64::from(v.depth[i])),
        });
        self.thread_slices(slices.collect(), &PYTHON_CALLS);
    }

    /// Adds `slices` of one `kind`, the earliest `max` of them, on tracks of
    /// their own, one per thread (the last track takes the threads past
    /// the kind's count).
    fn thread_slices(&mut self, mut slices: Vec<ThreadSlice<'_>>, kind: &SliceKind) {
        // Earliest first; an enclosing slice before the slices inside it.
        slices.sort_unstable_by_key(|s| (s.start_ns, std::cmp::Reverse(s.dur_ns)));
        keep_first(&mut slices, self.max, kind.cut, &mut self.left_out);
        let mut tracks: BTreeMap<u64, u32> = BTreeMap::new();
        for slice in slices {
            let tid = capped_track(&mut tracks, slice.thread, kind.first_track, kind.tracks);
            self.threads.entry(tid).or_insert_with(|| {
                if tid == kind.first_track + kind.tracks - 1 {
                    format!("{}, threads past the first {}", kind.label, kind.tracks - 1)
                } else {
                    format!("{}, thread {}", kind.label, slice.thread)
                }
            });
            self.events.push(&Event {
                tid: Some(tid),
                ts: Some(self.at(slice.start_ns)),
                dur: Some(slice.dur_ns as f64 / 1e3),
                cat: Some(kind.category),
                ..Event::new(
                    "X",
                    cut(slice.name),
                    self.pid,
                    json!({ slice.arg.0: slice.arg.1 }),
                )
            });
        }
    }
    /// Adds a kernel's launch: a slice on the host's launches track at
    /// `launch_us` and an arrow from it to the kernel's slice (`kernel`: its
    /// track and start), flow id `row` of the rank's process.
    fn launch_flow(&mut self, launch_us: f64, kernel: (u32, f64), row: usize) {
        self.threads
            .entry(LAUNCHES_TRACK)
            .or_insert_with(|| "kernel launches (host)".into());
        // Flow ids are the whole trace's: the process in the high bits.
        let id = (u64::from(self.pid) << 32) | (row as u64 & 0xffff_ffff);
        let launch = |ph| Event {
            tid: Some(LAUNCHES_TRACK),
            ts: Some(launch_us),
            cat: Some("launch"),
            ..Event::new(ph, "launch", self.pid, json!({}))
        };
        self.events.push(&Event {
            dur: Some(0.0),
            ..launch("X")
        });
        self.events.push(&Event {
            id: Some(id),
            ..launch("s")
        });
        self.events.push(&Event {
            tid: Some(kernel.0),
            ts: Some(kernel.1),
            cat: Some("launch"),
            id: Some(id),
            bp: Some("e"),
            ..Event::new("f", "launch", self.pid, json!({}))
        });
    }
    /// Adds the rank's GPU readings and metrics as counters: each series' finite
    /// values, at most [`COUNTER_POINTS`] of them (the lowest and highest of
    /// equal runs), at most [`COUNTER_TRACKS`] series.
    fn counters(&mut self, payload: &Payload) {
        // In the order made: the GPUs' readings, then the metrics.
        let mut series = gpu_counters(payload);
        series.extend(metric_counters(payload));
        keep_first(
            &mut series,
            COUNTER_TRACKS,
            Cut::Counters,
            &mut self.left_out,
        );
        for (name, ts, values) in &series {
            for i in min_max_indices(values, COUNTER_POINTS) {
                self.events.push(&Event {
                    ts: Some(self.at(ts[i])),
                    ..Event::new("C", name, self.pid, CounterArgs { value: values[i] })
                });
            }
        }
    }
}

/// A counter's readings: times (ns on the rank's clock) and values.
type Samples = (Vec<u64>, Vec<f64>);

/// Where an instant's row is: (time, table, row).
type MarkRow = (u64, Table, usize);

/// Keeps the first `max` of `rows`, and adds how many it cut to
/// `left_out` as `cut`.
fn keep_first<T>(rows: &mut Vec<T>, max: usize, cut: Cut, left_out: &mut Vec<(Cut, u64)>) {
    if rows.len() > max {
        left_out.push((cut, (rows.len() - max) as u64));
        rows.truncate(max);
    }
}

/// The tables of a rank whose rows are instants on the marks track.
struct MarkTables<'a> {
    steps: Option<DiffusionStepsView<'a>>,
    blocks: Option<BlocksView<'a>>,
    user: Option<EventsView<'a>>,
    memory: Option<MemorySnapshotsView<'a>>,
}

impl<'a> MarkTables<'a> {
    /// The tables of `payload` it holds and can read.
    fn of(payload: &'a Payload) -> Self {
        MarkTables {
            steps: payload.view::<DiffusionStepsView>().ok().flatten(),
            blocks: payload.view::<BlocksView>().ok().flatten(),
            user: payload.view::<EventsView>().ok().flatten(),
            memory: payload.view::<MemorySnapshotsView>().ok().flatten(),
        }
    }

    /// Every row of the tables, earliest first.
    fn rows(&self) -> Vec<MarkRow> {
        let mut rows: Vec<MarkRow> = Vec::new();
        let mut add = |table: Table, ts: &[u64]| {
            rows.extend(ts.iter().enumerate().map(|(i, &t)| (t, table, i)));
        };
        if let Some(v) = &self.steps {
            add(Table::DiffusionSteps, v.ts_ns);
        }
        if let Some(v) = &self.blocks {
            add(Table::Blocks, v.ts_ns);
        }
        if let Some(v) = &self.user {
            add(Table::Events, v.ts_ns);
        }
        if let Some(v) = &self.memory {
            add(Table::MemorySnapshots, v.ts_ns);
        }
        rows.sort_unstable();
        rows
    }

    /// The instant of row `i` of `table`: its name, category and arguments.
    fn mark(&self, table: Table, i: usize) -> Option<(String, &'static str, serde_json::Value)> {
        Some(
            match (table, &self.steps, &self.blocks, &self.user, &self.memory) {
                (Table::DiffusionSteps, Some(v), ..) => (
                    format!("step {}", v.step[i]),
                    "diffusion",
                    json!({ "timestep": v.timestep[i], "block_size": v.block_size[i],
                        "computation_ms": v.computation_ms[i],
                        "guidance_scale": v.guidance_scale.get(i) }),
                ),
                (Table::Blocks, _, Some(v), ..) => (
                    format!("block {}", v.block_index[i]),
                    "diffusion",
                    json!({ "frames": v.block_size[i], "computation_ms": v.computation_ms[i],
                        "memory_mb": v.memory_mb.get(i) }),
                ),
                (Table::Events, _, _, Some(v), _) => (
                    cut(v.name.get(i)).to_string(),
                    "event",
                    json!({ "payload": v.payload.get(i).map(|p| cut_to(p, MAX_ARG_BYTES)) }),
                ),
                (Table::MemorySnapshots, .., Some(v)) => (
                    format!("memory: {}", cut(v.label.value(i))),
                    "memory",
                    json!({ "source": cut(v.source.get(i)), "gpu": v.gpu.get(i),
                        "allocated_bytes": v.allocated_bytes.get(i),
                        "reserved_bytes": v.reserved_bytes.get(i),
                        "max_allocated_bytes": v.max_allocated_bytes.get(i) }),
                ),
                _ => return None,
            },
        )
    }
}

/// The kernels and counted collective calls, each as (start, whether a
/// kernel, row), earliest first.
fn activity_rows(
    kernels: Option<&KernelsView<'_>>,
    calls: Option<&CollectivesView<'_>>,
) -> Vec<(u64, bool, usize)> {
    let mut rows: Vec<(u64, bool, usize)> = Vec::new();
    if let Some(k) = kernels {
        rows.extend((0..k.len).map(|i| (k.start_ns[i], true, i)));
    }
    if let Some(c) = calls {
        rows.extend(counted_collectives(c).map(|i| (c.start_ns[i], false, i)));
    }
    rows.sort_unstable();
    rows
}

/// The track of a GPU stream (`key`: device and stream), named in
/// `threads` when new; streams past the first [`STREAM_TRACKS`] `- 1`
/// share the last track.
fn stream_track(
    streams: &mut BTreeMap<(Option<u32>, u64), u32>,
    threads: &mut BTreeMap<u32, String>,
    key: (Option<u32>, u64),
) -> u32 {
    let tid = capped_track(streams, key, COLLECTIVES_TRACK + 1, STREAM_TRACKS);
    threads.entry(tid).or_insert_with(|| match key.0 {
        _ if tid == COLLECTIVES_TRACK + STREAM_TRACKS => {
            format!("GPU streams past the first {}", STREAM_TRACKS - 1)
        }
        Some(device) => format!("GPU {device} stream {}", key.1),
        None => format!("GPU stream {}", key.1),
    });
    tid
}

/// The track of `key` among `count` tracks numbered from `first`: a new
/// key takes the next, the last takes every key past them.
fn capped_track<K: Ord>(tracks: &mut BTreeMap<K, u32>, key: K, first: u32, count: u32) -> u32 {
    let next = first + (tracks.len() as u32).min(count - 1);
    *tracks.entry(key).or_insert(next)
}

/// A counter track: its name, and its readings' times (ns on the rank's
/// clock) and values.
type Counter = (String, Vec<u64>, Vec<f64>);

/// A counter per GPU of the rank's header and metric of [`GPU_METRICS`]:
/// its finite readings.
fn gpu_counters(payload: &Payload) -> Vec<Counter> {
    let Ok(Some(v)) = payload.view::<GpuSamplesView>() else {
        return Vec::new();
    };
    let gpus = &payload.header.gpus;
    let rows_of = rows_by_gpu(&v, gpus.len());
    let mut series = Vec::new();
    for (rows, gpu) in rows_of.iter().zip(gpu_track_names(gpus)) {
        for metric in &GPU_METRICS {
            let value = |i: usize| (metric.value)(&v, i).filter(|x| x.is_finite());
            let (ts, values) = rows
                .iter()
                .filter_map(|&i| Some((v.ts_ns[i], value(i)?)))
                .unzip();
            series.push((format!("{gpu} {}", metric.label), ts, values));
        }
    }
    series
}

/// Each GPU's name on its counters: `GPU i`, or `GPU i #g` where two GPUs
/// of the header (a crafted one) share index `i`, so that they stay two
/// tracks.
fn gpu_track_names(gpus: &[GpuMeta]) -> Vec<String> {
    let mut index_count: BTreeMap<u32, usize> = BTreeMap::new();
    for meta in gpus {
        *index_count.entry(meta.index).or_default() += 1;
    }
    gpus.iter()
        .enumerate()
        .map(|(g, meta)| {
            let same_index = index_count.get(&meta.index).is_some_and(|&n| n > 1);
            if same_index {
                format!("GPU {} #{g}", meta.index)
            } else {
                format!("GPU {}", meta.index)
            }
        })
        .collect()
}

/// A counter per section and name of the rank's metrics (but the
/// profiler's own cost): its finite values.
fn metric_counters(payload: &Payload) -> Vec<Counter> {
    let Ok(Some(v)) = payload.view::<MetricsView>() else {
        return Vec::new();
    };
    let mut by_name: BTreeMap<(&str, &str), Samples> = BTreeMap::new();
    for i in 0..v.len {
        // The profiler's own cost is in the report, not on the timeline.
        if v.value[i].is_finite() && v.section.get(i) != OVERHEAD_SECTION {
            let one = by_name
                .entry((v.section.get(i), v.name.get(i)))
                .or_default();
            one.0.push(v.ts_ns[i]);
            one.1.push(v.value[i]);
        }
    }
    by_name
        .into_iter()
        .map(|((section, name), (ts, values))| {
            (format!("{}: {}", cut(section), cut(name)), ts, values)
        })
        .collect()
}

#[derive(Serialize)]
struct CounterArgs {
    value: f64,
}
