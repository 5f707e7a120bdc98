//! `trace.json.gz`: every rank on the shared timeline in the Trace Event
//! Format that Perfetto and chrome://tracing open. Each rank is a process
//! (`rank N @ host`, sorted by rank), each recording thread a track; stages
//! are complete (`X`) events with their call number and metadata, diffusion
//! steps, blocks, events and memory snapshots instants (`i`) on a track of
//! their own, GPU readings and metrics counters (`C`).
//!
//! Bounded like the HTML: each rank's first `trace_max_stages` stages in
//! start order (the report counts the rest), each GPU metric downsampled to
//! [`COUNTER_POINTS`] readings.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};

use flate2::write::GzEncoder;
use rankscope_common::table::{
    BlocksView, DiffusionStepsView, EventsView, GpuSamplesView, MemorySnapshotsView, MetricsView,
    StagesView,
};
use rankscope_common::Payload;
use serde::Serialize;
use serde_json::{json, Value};

use crate::analysis::series::min_max_buckets;
use crate::model::RankSummary;

/// Readings kept per GPU metric.
pub const COUNTER_POINTS: usize = 2_000;
/// The track of a rank's instants (steps, blocks, events, snapshots).
const MARKS_TRACK: u64 = 1 << 32;

/// Writes the trace as payloads come: a header, each rank's events, a
/// closing line.
pub struct TraceWriter<W: Write> {
    // Buffered before the encoder: the encoder's cost is per write call.
    out: BufWriter<GzEncoder<W>>,
    first: bool,
}

impl<W: Write> TraceWriter<W> {
    /// Starts the trace in `out`.
    pub fn new(out: W) -> std::io::Result<Self> {
        let encoder = GzEncoder::new(out, flate2::Compression::fast());
        let mut out = BufWriter::with_capacity(1 << 18, encoder);
        out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        Ok(TraceWriter { out, first: true })
    }

    /// Adds the events of one rank, made by [`rank_events`].
    pub fn add(&mut self, events: &RankEvents) -> std::io::Result<()> {
        if events.json.is_empty() {
            return Ok(());
        }
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.out.write_all(&events.json)
    }

    /// Closes the event list and the gzip stream.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.write_all(b"\n]}\n")?;
        self.out.into_inner().map_err(|e| e.into_error())?.finish()
    }
}

/// One rank's events as JSON, comma-separated: made on any thread, written
/// in order by [`TraceWriter::add`].
#[derive(Default)]
pub struct RankEvents {
    json: Vec<u8>,
}

impl RankEvents {
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
    tid: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    /// An instant's scope: `t`, its thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
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
/// (where it sits on the shared timeline).
pub fn rank_events(payload: &Payload, rank: &RankSummary, max_stages: u64) -> RankEvents {
    let mut events = RankEvents::default();
    let pid = rank.rank;
    // Microseconds on the shared timeline from the rank's own nanoseconds.
    let at = |ns: u64| rank.started_s * 1e6 + ns as f64 / 1e3;
    let process = format!("rank {} @ {}", rank.rank, rank.host);
    events.push(&Event::new(
        "M",
        "process_name",
        pid,
        json!({ "name": process }),
    ));
    events.push(&Event::new(
        "M",
        "process_sort_index",
        pid,
        json!({ "sort_index": rank.rank }),
    ));
    let mut threads: BTreeMap<u64, String> = BTreeMap::new();
    if let Ok(Some(v)) = payload.view::<StagesView>() {
        let mut rows: Vec<usize> = (0..v.len).collect();
        rows.sort_by_key(|&i| (v.start_ns[i], std::cmp::Reverse(v.end_ns[i])));
        rows.truncate(usize::try_from(max_stages).unwrap_or(usize::MAX));
        for i in rows {
            let tid = u64::from(v.thread[i]);
            threads
                .entry(tid)
                .or_insert_with(|| v.thread_name.get(i).to_string());
            let args = StageArgs {
                call: v.call_index[i],
                metadata: v.metadata.get(i),
            };
            events.push(&Event {
                tid: Some(tid),
                ts: Some(at(v.start_ns[i])),
                dur: Some(v.end_ns[i].saturating_sub(v.start_ns[i]) as f64 / 1e3),
                cat: Some("stage"),
                ..Event::new("X", v.name.get(i), pid, args)
            });
        }
    }
    let mut marks = RankEvents::default();
    let mut mark = |ns: u64, name: &str, category: &'static str, args: Value| {
        marks.push(&Event {
            tid: Some(MARKS_TRACK),
            ts: Some(at(ns)),
            cat: Some(category),
            s: Some("t"),
            ..Event::new("i", name, pid, args)
        });
    };
    if let Ok(Some(v)) = payload.view::<DiffusionStepsView>() {
        for i in 0..v.len {
            mark(
                v.ts_ns[i],
                &format!("step {}", v.step[i]),
                "diffusion",
                json!({ "timestep": v.timestep[i], "block_size": v.block_size[i],
                        "computation_ms": v.computation_ms[i],
                        "guidance_scale": v.guidance_scale.get(i) }),
            );
        }
    }
    if let Ok(Some(v)) = payload.view::<BlocksView>() {
        for i in 0..v.len {
            mark(
                v.ts_ns[i],
                &format!("block {}", v.block_index[i]),
                "diffusion",
                json!({ "frames": v.block_size[i], "computation_ms": v.computation_ms[i],
                        "memory_mb": v.memory_mb.get(i) }),
            );
        }
    }
    if let Ok(Some(v)) = payload.view::<EventsView>() {
        for i in 0..v.len {
            mark(
                v.ts_ns[i],
                v.name.get(i),
                "event",
                json!({ "payload": v.payload.get(i) }),
            );
        }
    }
    if let Ok(Some(v)) = payload.view::<MemorySnapshotsView>() {
        for i in 0..v.len {
            mark(
                v.ts_ns[i],
                &format!("memory: {}", v.label.value(i)),
                "memory",
                json!({ "source": v.source.get(i), "gpu": v.gpu.get(i),
                        "allocated_bytes": v.allocated_bytes.get(i),
                        "reserved_bytes": v.reserved_bytes.get(i),
                        "max_allocated_bytes": v.max_allocated_bytes.get(i) }),
            );
        }
    }
    if !marks.json.is_empty() {
        threads.insert(MARKS_TRACK, "diffusion, events, memory".into());
        events.json.extend_from_slice(b",\n");
        events.json.append(&mut marks.json);
    }
    for (tid, name) in threads {
        events.push(&Event {
            tid: Some(tid),
            ..Event::new("M", "thread_name", pid, json!({ "name": name }))
        });
        events.push(&Event {
            tid: Some(tid),
            ..Event::new("M", "thread_sort_index", pid, json!({ "sort_index": tid }))
        });
    }
    let mut counter = |name: String, ts_ns: &[u64], values: &[Option<f64>]| {
        let (t, v): (Vec<f64>, Vec<f64>) = ts_ns
            .iter()
            .zip(values)
            .filter_map(|(&t, v)| Some((at(t), (*v)?)))
            .filter(|(_, v)| v.is_finite())
            .unzip();
        let kept = min_max_buckets(&t, &v, COUNTER_POINTS);
        for (&ts, &value) in kept.t_s.iter().zip(&kept.value) {
            events.push(&Event {
                ts: Some(ts),
                ..Event::new("C", &name, pid, CounterArgs { value })
            });
        }
    };
    if let Ok(Some(v)) = payload.view::<GpuSamplesView>() {
        let gpus = &payload.header.gpus;
        for (g, meta) in gpus.iter().enumerate() {
            let rows: Vec<usize> = (0..v.len).filter(|&i| v.gpu[i] as usize == g).collect();
            let ts: Vec<u64> = rows.iter().map(|&i| v.ts_ns[i]).collect();
            let metric = |get: &dyn Fn(usize) -> Option<f64>| -> Vec<Option<f64>> {
                rows.iter().map(|&i| get(i)).collect()
            };
            let gpu = format!("GPU {}", meta.index);
            counter(
                format!("{gpu} utilisation %"),
                &ts,
                &metric(&|i| v.util_gpu_pct.get(i)),
            );
            counter(
                format!("{gpu} memory MB"),
                &ts,
                &metric(&|i| v.memory_used_bytes.get(i).map(|b| b as f64 / 1048576.0)),
            );
            counter(
                format!("{gpu} temperature °C"),
                &ts,
                &metric(&|i| v.temperature_c.get(i)),
            );
            counter(
                format!("{gpu} power W"),
                &ts,
                &metric(&|i| v.power_w.get(i)),
            );
            counter(
                format!("{gpu} SM clock MHz"),
                &ts,
                &metric(&|i| v.sm_clock_mhz.get(i).map(f64::from)),
            );
        }
    }
    if let Ok(Some(v)) = payload.view::<MetricsView>() {
        let mut by_name: BTreeMap<String, (Vec<u64>, Vec<Option<f64>>)> = BTreeMap::new();
        for i in 0..v.len {
            let name = format!("{}: {}", v.section.get(i), v.name.get(i));
            let series = by_name.entry(name).or_default();
            series.0.push(v.ts_ns[i]);
            series.1.push(Some(v.value[i]));
        }
        for (name, (ts, values)) in by_name {
            counter(name, &ts, &values);
        }
    }
    events
}

#[derive(Serialize)]
struct CounterArgs {
    value: f64,
}
