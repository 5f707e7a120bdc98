//! The streaming reader: serde visitors walk the trace's top-level object
//! and its `traceEvents` array one event at a time, keeping the rows
//! [`RankTrace`] holds and nothing else.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::classify::{collective_kind, normalize_kind, KernelCategory};
use super::groups::{Groups, Lenient};
use super::{CollectiveRows, RankTrace, TraceError, TraceLimits};
use crate::parallel;

/// Reads the Kineto trace at `path` (plain JSON, or gzip by its magic
/// bytes, whatever the file is named).
pub fn read_trace(path: &Path, limits: &TraceLimits) -> Result<RankTrace, TraceError> {
    let io_error = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = BufReader::new(File::open(path).map_err(io_error)?);
    let gzip = file
        .fill_buf()
        .map_err(io_error)?
        .starts_with(&[0x1f, 0x8b]);
    if gzip {
        read_trace_from(MultiGzDecoder::new(file), path, limits)
    } else {
        read_trace_from(file, path, limits)
    }
}

/// Reads a Kineto trace from `input`; `path` names it in errors.
pub fn read_trace_from(
    input: impl Read,
    path: &Path,
    limits: &TraceLimits,
) -> Result<RankTrace, TraceError> {
    let since_event = Cell::new(0);
    let in_all = Cell::new(0);
    let counted = CountingReader {
        inner: input,
        since_event: &since_event,
        in_all: &in_all,
        limits,
    };
    // Buffered above the counter: serde_json reads byte by byte, which
    // std makes cheap for a BufReader.
    let mut json =
        serde_json::Deserializer::from_reader(BufReader::with_capacity(64 << 10, counted));
    let mut builder = Builder::new(limits, &since_event);
    let found = json
        .deserialize_any(TraceVisitor(&mut builder))
        .and_then(|found| json.end().map(|()| found))
        .map_err(|error| {
            if in_all.get() > limits.max_bytes {
                TraceError::TooLarge {
                    path: path.to_path_buf(),
                    limit: limits.max_bytes,
                }
            } else if error.is_io() {
                TraceError::Io {
                    path: path.to_path_buf(),
                    source: error.into(),
                }
            } else {
                TraceError::Format {
                    path: path.to_path_buf(),
                    source: error,
                }
            }
        })?;
    if !found {
        return Err(TraceError::NoEvents {
            path: path.to_path_buf(),
        });
    }
    Ok(builder.finish())
}

/// The rank in a file name that carries one: the number after the last
/// `rank` (`rank-3`, `rank_3`, `rank3`, any case). torch.profiler's own
/// trace handler names files by host and process, not rank: such a trace
/// needs its `distributedInfo`.
pub fn rank_from_file_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    name.rmatch_indices("rank").find_map(|(at, _)| {
        let rest = name[at + 4..].trim_start_matches(['-', '_']);
        let digits: &str = &rest[..rest.bytes().take_while(u8::is_ascii_digit).count()];
        digits.parse().ok()
    })
}

/// Counts the bytes read since the last event ended, and in all, and
/// refuses to read on past either limit: one event (a string of gigabytes)
/// cannot take memory past [`TraceLimits::max_event_bytes`], nor a trace
/// (a zip bomb) time past [`TraceLimits::max_bytes`]. Counted in the
/// chunks the buffer above asks for.
struct CountingReader<'a, R> {
    inner: R,
    since_event: &'a Cell<u64>,
    in_all: &'a Cell<u64>,
    limits: &'a TraceLimits,
}

impl<R: Read> Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let past = |what: String| Err(io::Error::new(io::ErrorKind::InvalidData, what));
        if self.since_event.get() > self.limits.max_event_bytes {
            return past(format!(
                "an event (or a top-level field) is larger than {} MiB",
                self.limits.max_event_bytes >> 20
            ));
        }
        if self.in_all.get() > self.limits.max_bytes {
            return past(format!("more than {} bytes", self.limits.max_bytes));
        }
        let read = self.inner.read(buf)?;
        self.since_event.set(self.since_event.get() + read as u64);
        self.in_all.set(self.in_all.get() + read as u64);
        Ok(read)
    }
}

/// The rows of one trace as they are read.
struct Builder<'a> {
    limits: &'a TraceLimits,
    since_event: &'a Cell<u64>,
    trace: RankTrace,
    /// Name → id (each name held here only, until the read ends), with
    /// what the name says about the event.
    ids: HashMap<Box<str>, u32>,
    info: Vec<NameInfo>,
    /// Collectives from `nccl:…` / `gloo:…` annotations, and from
    /// `record_param_comms` with its arguments: the second are used where
    /// the trace has them (newer torch), the first otherwise.
    annotated: CollectiveRows,
    described: CollectiveRows,
    /// CPU operator totals by name id: (calls, nanoseconds).
    ops: HashMap<u32, (u64, i64)>,
}

/// What a name says about its event, worked out once per distinct name.
#[derive(Clone, Copy)]
struct NameInfo {
    category: KernelCategory,
    /// `ProfilerStep#N`.
    step: bool,
    /// The collective kind's name id, for `backend:kind` annotations.
    collective: Option<u32>,
    /// `record_param_comms`.
    param_comms: bool,
}

impl<'a> Builder<'a> {
    fn new(limits: &'a TraceLimits, since_event: &'a Cell<u64>) -> Self {
        Builder {
            limits,
            since_event,
            trace: RankTrace::default(),
            ids: HashMap::new(),
            info: Vec::new(),
            annotated: CollectiveRows::default(),
            described: CollectiveRows::default(),
            ops: HashMap::new(),
        }
    }

    /// The id of `name`, interned; `None` past the name budget.
    fn intern(&mut self, name: &str) -> Option<u32> {
        if let Some(&id) = self.ids.get(name) {
            return Some(id);
        }
        let mut kept = name;
        if kept.len() > self.limits.max_name_bytes {
            let mut end = self.limits.max_name_bytes;
            while !kept.is_char_boundary(end) {
                end -= 1;
            }
            kept = &kept[..end];
            self.trace.cut.long_names += 1;
            if let Some(&id) = self.ids.get(kept) {
                return Some(id);
            }
        }
        if self.ids.len() >= self.limits.max_names {
            return None;
        }
        let id = u32::try_from(self.ids.len()).ok()?;
        self.ids.insert(kept.into(), id);
        self.info.push(NameInfo {
            category: KernelCategory::of(kept),
            step: kept.starts_with("ProfilerStep#"),
            collective: None,
            param_comms: kept == "record_param_comms",
        });
        // The kind's own name, interned once this name's info is in place.
        if let Some(kind) = collective_kind(kept) {
            self.info[id as usize].collective = self.intern(&kind);
        }
        Some(id)
    }

    /// The trace's base time from `value`: a Unix time in nanoseconds, up
    /// to the year 2096; anything else is counted as a bad time.
    fn set_base_time(&mut self, value: Value) {
        let base = integer(value).filter(|ns| (0..=4_000_000_000_000_000_000).contains(ns));
        if base.is_none() {
            self.trace.cut.bad_times += 1;
        }
        self.trace.base_time_ns = base;
    }

    /// Keeps what `event` adds to the trace.
    fn add(&mut self, event: Event) {
        self.trace.events += 1;
        if !event.complete {
            return;
        }
        let (Some(start_ns), Some(dur_ns)) = (
            event.ts.and_then(micros_to_nanos),
            event.dur.and_then(micros_to_nanos),
        ) else {
            self.trace.cut.bad_times += 1;
            return;
        };
        if event.category == Category::GpuAnnotation {
            self.add_gpu_step(event.name, start_ns);
            return;
        }
        let gpu_activity = self.gpu_activity(&event.args, start_ns);
        let name = match event.name {
            Name::Id(id) => id,
            Name::PastBudget => {
                self.trace.cut.names += 1;
                return;
            }
            Name::Absent | Name::Unneeded => return,
        };
        let info = self.info[name as usize];
        if let Some(activity) = gpu_activity {
            self.add_gpu_row(name, info, &event.args, activity, start_ns, dur_ns);
            return;
        }
        if event.category == Category::Python {
            self.add_python_call(&event, name, start_ns, dur_ns);
            return;
        }
        self.add_cpu_op(&event, name, info, start_ns, dur_ns);
        if event.category.is_host_op() {
            self.add_host_op(info, &event.args, start_ns, dur_ns);
        }
    }

    /// A GPU annotation: only a step's start is used (HTA's last step may
    /// begin here).
    fn add_gpu_step(&mut self, name: Name, start_ns: i64) {
        if let Name::Id(id) = name {
            if self.info[id as usize].step {
                let last = &mut self.trace.last_gpu_step_ns;
                *last = (*last).max(Some(start_ns));
            }
        }
    }

    /// The stream and correlation of a GPU activity; `None` for another
    /// event. A launch (a correlation without a stream) is kept here: its
    /// correlation and time, not its name.
    fn gpu_activity(&mut self, args: &Args, start_ns: i64) -> Option<(i64, i64)> {
        match (args.stream, args.correlation) {
            (Some(stream), Some(correlation)) if stream >= 0 && correlation >= 0 => {
                Some((stream, correlation))
            }
            (_, Some(correlation)) if correlation >= 0 => {
                let launches = &mut self.trace.launches;
                if keep(
                    launches.start_ns.len(),
                    self.limits.max_rows,
                    &mut self.trace.cut.rows,
                ) {
                    launches.start_ns.push(start_ns);
                    launches.correlation.push(correlation);
                }
                None
            }
            _ => None,
        }
    }

    /// A GPU activity's row, within the row budget.
    fn add_gpu_row(
        &mut self,
        name: u32,
        info: NameInfo,
        args: &Args,
        (stream, correlation): (i64, i64),
        start_ns: i64,
        dur_ns: i64,
    ) {
        let trace = &mut self.trace;
        let gpu = &mut trace.gpu;
        if keep(gpu.name.len(), self.limits.max_rows, &mut trace.cut.rows) {
            gpu.name.push(name);
            gpu.category.push(info.category);
            gpu.stream.push(stream);
            gpu.device.push(args.device.unwrap_or(-1));
            gpu.start_ns.push(start_ns);
            gpu.dur_ns.push(dur_ns);
            gpu.correlation.push(correlation);
        }
    }

    /// Operators, and `record_function` spans other than the steps and the
    /// collectives (counted apart): totalled, and kept as spans where asked.
    fn add_cpu_op(&mut self, event: &Event, name: u32, info: NameInfo, start_ns: i64, dur_ns: i64) {
        let annotation = event.category == Category::Annotation;
        if !(event.category == Category::CpuOp
            || (annotation && !info.step && info.collective.is_none()))
        {
            return;
        }
        let totals = self.ops.entry(name).or_insert((0, 0));
        totals.0 += 1;
        totals.1 = totals.1.saturating_add(dur_ns);
        let trace = &mut self.trace;
        let spans = &mut trace.cpu_spans;
        if self.limits.cpu_spans
            && keep(spans.name.len(), self.limits.max_rows, &mut trace.cut.rows)
        {
            spans.name.push(name);
            spans.thread.push(event.tid.unwrap_or(0));
            spans.start_ns.push(start_ns);
            spans.dur_ns.push(dur_ns);
        }
    }

    /// A Python function's call (VizTracer's), within the row budget.
    fn add_python_call(&mut self, event: &Event, name: u32, start_ns: i64, dur_ns: i64) {
        let trace = &mut self.trace;
        let calls = &mut trace.python_calls;
        if keep(calls.name.len(), self.limits.max_rows, &mut trace.cut.rows) {
            calls.name.push(name);
            calls.thread.push(event.tid.unwrap_or(0));
            calls.start_ns.push(start_ns);
            calls.dur_ns.push(dur_ns);
        }
    }

    /// A host operator: a step kept as one, a collective as a call of its
    /// kind (annotated, or described by `record_param_comms`).
    fn add_host_op(&mut self, info: NameInfo, args: &Args, start_ns: i64, dur_ns: i64) {
        let max_rows = self.limits.max_rows;
        let trace = &mut self.trace;
        if info.step && keep(trace.steps.len(), max_rows, &mut trace.cut.rows) {
            trace
                .steps
                .push((start_ns, start_ns.saturating_add(dur_ns)));
        }
        let kind = if info.param_comms {
            args.collective
                .as_deref()
                .and_then(|kind| self.intern(&normalize_kind(kind)))
        } else {
            info.collective
        };
        let Some(kind) = kind else { return };
        let group = args.group.as_deref().and_then(|group| self.intern(group));
        let bytes = args
            .elements
            .zip(args.dtype.as_deref().and_then(dtype_bytes));
        let rows = if info.param_comms {
            &mut self.described
        } else {
            &mut self.annotated
        };
        if keep(rows.kind.len(), max_rows, &mut self.trace.cut.rows) {
            rows.kind.push(kind);
            rows.group.push(group);
            rows.bytes
                .push(bytes.map(|(n, size)| n.saturating_mul(size)));
            rows.start_ns.push(start_ns);
            rows.dur_ns.push(dur_ns);
        }
    }

    /// The trace, its names in id order and the collectives and operator
    /// totals put in place.
    fn finish(mut self) -> RankTrace {
        // Each name was held once, as its key: now in id order.
        let mut names: Vec<(u32, Box<str>)> = self.ids.into_iter().map(|(n, id)| (id, n)).collect();
        names.sort_unstable_by_key(|(id, _)| *id);
        self.trace.names = names.into_iter().map(|(_, n)| n.into_string()).collect();
        let mut ops: Vec<(u32, (u64, i64))> = self.ops.into_iter().collect();
        ops.sort_unstable_by_key(|(name, _)| *name);
        for (name, (calls, total_ns)) in ops {
            self.trace.cpu_ops.name.push(name);
            self.trace.cpu_ops.calls.push(calls);
            self.trace.cpu_ops.total_ns.push(total_ns);
        }
        self.trace.collectives = if self.described.kind.is_empty() {
            self.annotated
        } else {
            self.described
        };
        self.trace
    }
}

/// Whether a table of `len` rows takes one more; counts it in `cut` if not.
fn keep(len: usize, max_rows: usize, cut: &mut u64) -> bool {
    if len < max_rows {
        true
    } else {
        *cut += 1;
        false
    }
}

/// Kineto's microseconds (fractional) as whole nanoseconds; `None` for a
/// negative, non-finite or overflowing time. The whole microseconds and
/// the fraction are converted apart: a wall-clock time in nanoseconds is
/// past f64's exact integers.
fn micros_to_nanos(micros: f64) -> Option<i64> {
    if !(0.0..9.0e15).contains(&micros) {
        return None;
    }
    let whole = micros.trunc();
    let fraction = ((micros - whole) * 1000.0).round() as i64;
    (whole as i64).checked_mul(1000)?.checked_add(fraction)
}

/// Bytes per element of a torch dtype, as `record_param_comms` names it.
fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype.to_ascii_lowercase().as_str() {
        "double" | "long" | "complexfloat" | "float64" | "int64" => 8,
        "float" | "int" | "float32" | "int32" => 4,
        "half" | "bfloat16" | "short" | "float16" | "int16" => 2,
        "byte" | "char" | "bool" | "uint8" | "int8" | "float8_e4m3fn" | "float8_e5m2" => 1,
        _ => return None,
    })
}

/// The categories of Kineto events the reader tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Category {
    /// `cpu_op` (`Operator` in older traces): an operator.
    CpuOp,
    /// `user_annotation`: a `record_function` span.
    Annotation,
    /// `gpu_user_annotation`: a `record_function` span drawn on a GPU stream.
    GpuAnnotation,
    /// Python frames (`python_function`, with `with_stack`) and runtime or
    /// driver calls: their names are not used.
    Unnamed,
    /// `fee`: a Python function's call, as VizTracer records it (function
    /// entry and exit).
    Python,
    #[default]
    Other,
}

/// The fields of one event the reader uses.
#[derive(Default)]
struct Event {
    complete: bool,
    category: Category,
    name: Name,
    ts: Option<f64>,
    dur: Option<f64>,
    /// The thread, where it is a number.
    tid: Option<i64>,
    args: Args,
}

/// An event's name as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Name {
    /// The event has none.
    #[default]
    Absent,
    /// Interned.
    Id(u32),
    /// A new name past the name budget.
    PastBudget,
    /// Not kept: the event's category, read before its name, says the
    /// name is of no use (Python frames, runtime calls).
    Unneeded,
}

/// The arguments of one event the reader uses.
#[derive(Default)]
struct Args {
    correlation: Option<i64>,
    stream: Option<i64>,
    device: Option<i64>,
    collective: Option<String>,
    group: Option<String>,
    elements: Option<u64>,
    dtype: Option<String>,
}

/// An integer argument as HTA reads one (pandas' `to_numeric`): a number,
/// or a string that holds one; anything else is absent.
fn integer(value: Value) -> Option<i64> {
    serde::Deserialize::deserialize(value)
        .ok()
        .and_then(|n: LenientInt| n.0)
}

/// An integer a trace writes as a number or a numeric string (`tid`,
/// `correlation`, `stream`); anything else is `None`. Read as it comes,
/// with no JSON value built: these are in every event.
struct LenientInt(Option<i64>);

impl<'de> serde::Deserialize<'de> for LenientInt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LenientIntVisitor)
    }
}

struct LenientIntVisitor;

impl<'de> Visitor<'de> for LenientIntVisitor {
    type Value = LenientInt;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer, or anything (read as none)")
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<LenientInt, E> {
        Ok(LenientInt(Some(n)))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<LenientInt, E> {
        Ok(LenientInt(i64::try_from(n).ok()))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<LenientInt, E> {
        let whole = f.fract() == 0.0 && f.abs() < 9e18;
        Ok(LenientInt(whole.then_some(f as i64)))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<LenientInt, E> {
        Ok(LenientInt(s.trim().parse().ok()))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<LenientInt, E> {
        Ok(LenientInt(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<LenientInt, E> {
        Ok(LenientInt(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LenientInt, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(LenientInt(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LenientInt, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(LenientInt(None))
    }
}

fn text(value: Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// The top-level value: Kineto's object, or a bare array of events (the
/// Chrome trace format allows both). Yields whether events were found.
struct TraceVisitor<'b, 'a>(&'b mut Builder<'a>);

impl<'de> Visitor<'de> for TraceVisitor<'_, '_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace object with traceEvents, or an array of events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        EventsSeed(self.0).visit_seq(seq).map(|()| true)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let builder = self.0;
        let mut found = false;
        while let Some(key) = map.next_key::<Key<TopField>>()? {
            match key.0 {
                TopField::TraceEvents => {
                    if found {
                        return Err(de::Error::custom("a second traceEvents array"));
                    }
                    map.next_value_seed(EventsSeed(builder))?;
                    found = true;
                }
                TopField::DistributedInfo => {
                    let info: DistributedInfo = map.next_value()?;
                    let trace = &mut builder.trace;
                    let mut count = |field: &str, value: Option<Value>| {
                        let value = value.filter(|v| !v.is_null())?;
                        let n = integer(value.clone()).and_then(|n| u32::try_from(n).ok());
                        if n.is_none() {
                            let shown: String = value.to_string().chars().take(40).collect();
                            trace
                                .invalid_info
                                .get_or_insert(format!("{field} ({shown})"));
                        }
                        n
                    };
                    trace.rank = count("rank", info.rank);
                    trace.world_size = count("world_size", info.world_size);
                    trace.backend = info.backend.and_then(text);
                    let groups = info.pg_config.and_then(|groups| groups.0);
                    if let (Some(rank), Some(Groups(groups))) = (trace.rank, groups) {
                        trace.parallel = parallel::coordinates(rank, trace.world_size, &groups);
                    }
                }
                TopField::BaseTime => {
                    let value: Value = map.next_value()?;
                    builder.set_base_time(value);
                }
                TopField::HostName => {
                    builder.trace.host = text(map.next_value::<Value>()?);
                }
                TopField::VizTracer => {
                    // Its base (the Unix time its clock counts from), where
                    // it is an object that says one; a top-level base wins.
                    let metadata: Value = map.next_value()?;
                    builder.trace.viztracer = true;
                    let base = metadata.get("baseTimeNanoseconds").cloned();
                    if let Some(base) = base.filter(|_| builder.trace.base_time_ns.is_none()) {
                        builder.set_base_time(base);
                    }
                }
                TopField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            builder.since_event.set(0);
        }
        Ok(found)
    }
}

/// `distributedInfo`: the rank, the world, the backend and the process
/// groups.
#[derive(serde::Deserialize)]
struct DistributedInfo {
    rank: Option<Value>,
    world_size: Option<Value>,
    backend: Option<Value>,
    pg_config: Option<Lenient<Groups>>,
}

/// The `traceEvents` array, event by event into the builder.
struct EventsSeed<'b, 'a>(&'b mut Builder<'a>);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let builder = self.0;
        while let Some(event) = seq.next_element_seed(EventSeed(builder))? {
            builder.add(event);
            builder.since_event.set(0);
        }
        Ok(())
    }
}

/// One event: its fields read as they come, its name interned.
struct EventSeed<'b, 'a>(&'b mut Builder<'a>);

impl<'de> DeserializeSeed<'de> for EventSeed<'_, '_> {
    type Value = Event;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Event, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_, '_> {
    type Value = Event;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
        let mut event = Event::default();
        while let Some(key) = map.next_key::<Key<EventField>>()? {
            match key.0 {
                EventField::Ph => {
                    event.complete = map.next_value::<Key<Phase>>()?.0 == Phase::Complete
                }
                EventField::Cat => event.category = map.next_value::<Key<Category>>()?.0,
                EventField::Name => {
                    let needed = !event.category.name_unneeded();
                    event.name = map.next_value_seed(NameSeed(self.0, needed))?;
                }
                EventField::Ts => event.ts = Some(map.next_value()?),
                EventField::Dur => event.dur = Some(map.next_value()?),
                EventField::Tid => event.tid = map.next_value::<LenientInt>()?.0,
                EventField::Args => event.args = map.next_value_seed(ArgsSeed)?,
                EventField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(event)
    }
}

/// An event's name, interned as it is read (no allocation for a name seen
/// before), where it is needed.
struct NameSeed<'b, 'a>(&'b mut Builder<'a>, bool);

impl<'de> DeserializeSeed<'de> for NameSeed<'_, '_> {
    type Value = Name;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Name, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for NameSeed<'_, '_> {
    type Value = Name;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event name (a string)")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Name, E> {
        if !self.1 {
            return Ok(Name::Unneeded);
        }
        Ok(self.0.intern(name).map_or(Name::PastBudget, Name::Id))
    }
}

/// The arguments the reader uses; the rest are skipped unread.
struct ArgsSeed;

impl<'de> DeserializeSeed<'de> for ArgsSeed {
    type Value = Args;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Args, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ArgsSeed {
    type Value = Args;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of event arguments")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Args, A::Error> {
        let mut args = Args::default();
        while let Some(key) = map.next_key::<Key<ArgField>>()? {
            if key.0 == ArgField::Other {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let int = |map: &mut A| map.next_value::<LenientInt>().map(|n| n.0);
            let string = |map: &mut A| map.next_value::<Value>().map(text);
            match key.0 {
                ArgField::Correlation => args.correlation = int(&mut map)?,
                ArgField::Stream => args.stream = int(&mut map)?,
                ArgField::Device => args.device = int(&mut map)?,
                ArgField::Collective => args.collective = string(&mut map)?,
                ArgField::Group => args.group = string(&mut map)?,
                ArgField::Elements => {
                    args.elements = int(&mut map)?.and_then(|n| u64::try_from(n).ok())
                }
                ArgField::Dtype => args.dtype = string(&mut map)?,
                ArgField::Other => {}
            }
        }
        Ok(args)
    }
}

/// A word the reader knows, read from a string without allocating.
trait Word: Sized {
    fn from_word(word: &str) -> Self;
}

/// A [`Word`] read from JSON.
struct Key<W>(W);

impl<'de, W: Word> serde::Deserialize<'de> for Key<W> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WordVisitor<W>(std::marker::PhantomData<W>);
        impl<W: Word> Visitor<'_> for WordVisitor<W> {
            type Value = Key<W>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, word: &str) -> Result<Key<W>, E> {
                Ok(Key(W::from_word(word)))
            }
        }
        deserializer.deserialize_str(WordVisitor(std::marker::PhantomData))
    }
}

#[derive(PartialEq)]
enum TopField {
    TraceEvents,
    DistributedInfo,
    BaseTime,
    HostName,
    VizTracer,
    Other,
}

impl Word for TopField {
    fn from_word(word: &str) -> Self {
        match word {
            "traceEvents" => TopField::TraceEvents,
            "distributedInfo" => TopField::DistributedInfo,
            "baseTimeNanoseconds" => TopField::BaseTime,
            "viztracer_metadata" => TopField::VizTracer,
            "host_name" => TopField::HostName,
            _ => TopField::Other,
        }
    }
}

#[derive(PartialEq)]
enum EventField {
    Ph,
    Cat,
    Name,
    Ts,
    Dur,
    Tid,
    Args,
    Other,
}

impl Word for EventField {
    fn from_word(word: &str) -> Self {
        match word {
            "ph" => EventField::Ph,
            "cat" => EventField::Cat,
            "name" => EventField::Name,
            "ts" => EventField::Ts,
            "dur" => EventField::Dur,
            "tid" => EventField::Tid,
            "args" => EventField::Args,
            _ => EventField::Other,
        }
    }
}

#[derive(PartialEq)]
enum Phase {
    Complete,
    Other,
}

impl Word for Phase {
    fn from_word(word: &str) -> Self {
        if word == "X" {
            Phase::Complete
        } else {
            Phase::Other
        }
    }
}

impl Category {
    /// An operator or a `record_function` span on the host.
    fn is_host_op(self) -> bool {
        matches!(self, Category::CpuOp | Category::Annotation)
    }

    /// Whether an event of this category needs no name kept.
    fn name_unneeded(self) -> bool {
        self == Category::Unnamed
    }
}

impl Word for Category {
    fn from_word(word: &str) -> Self {
        match word {
            "cpu_op" | "Operator" => Category::CpuOp,
            "user_annotation" => Category::Annotation,
            "gpu_user_annotation" => Category::GpuAnnotation,
            "python_function" | "cuda_runtime" | "cuda_driver" | "hip_runtime" | "Runtime" => {
                Category::Unnamed
            }
            "fee" | "FEE" => Category::Python,
            _ => Category::Other,
        }
    }
}

#[derive(PartialEq)]
enum ArgField {
    Correlation,
    Stream,
    Device,
    Collective,
    Group,
    Elements,
    Dtype,
    Other,
}

impl Word for ArgField {
    fn from_word(word: &str) -> Self {
        match word {
            "correlation" => ArgField::Correlation,
            "stream" => ArgField::Stream,
            "device" => ArgField::Device,
            "Collective name" => ArgField::Collective,
            "Process Group Name" => ArgField::Group,
            "In msg nelems" => ArgField::Elements,
            "dtype" => ArgField::Dtype,
            _ => ArgField::Other,
        }
    }
}
