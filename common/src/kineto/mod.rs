//! Kineto traces: what torch.profiler writes (`…trace.json` or
//! `.json.gz`, Chrome trace format with Kineto's categories and arguments),
//! read as a stream into compact columns, one rank at a time.
//!
//! - [`read_trace`]: a trace file → [`RankTrace`], never holding the JSON
//!   as a document: events are taken one by one, each bounded in size, and
//!   only the rows the analysis needs are kept, within [`TraceLimits`];
//! - [`KernelCategory`]: compute, communication or memory, by the kernel's
//!   name, as Holistic Trace Analysis (HTA) classifies them;
//! - [`rank_from_file_name`]: the rank in a file name that carries one
//!   (`…rank-3…`, `…rank_3…`, `…rank3…`, as HTA's test traces and many
//!   jobs' trace handlers name them); a trace's own `distributedInfo` is
//!   the first source.
//!
//! What is kept of a trace: GPU activities (kernels, memory copies and
//! sets: events with a CUDA stream and a correlation id), the CPU events
//! that launched them (those with a correlation id), the `ProfilerStep#N`
//! spans, and collective calls as the host saw them (`nccl:all_reduce`,
//! `gloo:broadcast`, `record_param_comms`, with the process group and bytes
//! where the trace gives them); and of a VizTracer trace, its Python
//! function calls. Timestamps stay on the trace's own clock,
//! in nanoseconds (Kineto writes wall-clock microseconds).

mod classify;
mod groups;
mod read;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::path::PathBuf;

use crate::parallel::ParallelCoord;

pub use classify::{collective_kind, function_kind, KernelCategory};
pub use read::{rank_from_file_name, read_trace, read_trace_from};

/// The bounds a trace is read within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceLimits {
    /// The most rows kept of each kind (GPU activities, launches,
    /// collectives); the rest are counted in [`TraceCut`].
    pub max_rows: usize,
    /// The most distinct names kept; events of further names are counted
    /// and left out.
    pub max_names: usize,
    /// The longest name kept, in bytes; a longer one is cut (at a
    /// character boundary) and counted.
    pub max_name_bytes: usize,
    /// The most bytes one event may take in the file: a larger one (a
    /// string of gigabytes) ends the read with an error.
    pub max_event_bytes: u64,
    /// The most bytes a trace may hold, as read (a gzip file inflated): a
    /// larger one (a zip bomb) is refused, saying so.
    pub max_bytes: u64,
    /// Whether the CPU operators are kept one by one as well as in totals
    /// ([`RankTrace::cpu_spans`], for a timeline).
    pub cpu_spans: bool,
}

impl Default for TraceLimits {
    fn default() -> Self {
        TraceLimits {
            max_rows: 1_000_000,
            max_names: 20_000,
            max_name_bytes: 4096,
            max_event_bytes: 16 << 20,
            max_bytes: 4 << 30,
            cpu_spans: false,
        }
    }
}

/// One rank's trace: the rows the analysis needs, by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankTrace {
    /// The rank, from the trace's `distributedInfo` (or the file name, set
    /// by the caller).
    pub rank: Option<u32>,
    /// The world size, from `distributedInfo`.
    pub world_size: Option<u32>,
    /// The host that wrote it (`host_name`, in newer torch's traces).
    pub host: Option<String>,
    /// The distributed backend (`nccl`, `gloo`), from `distributedInfo`.
    pub backend: Option<String>,
    /// The rank's parallel coordinates (TP, PP, ...), from the process
    /// groups of `distributedInfo.pg_config` ([`crate::parallel`]).
    pub parallel: Vec<ParallelCoord>,
    /// A `distributedInfo` field present but unusable (`rank: -1`,
    /// `world_size: 1.5`), named with its value: the trace's rank cannot be
    /// trusted.
    pub invalid_info: Option<String>,
    /// `baseTimeNanoseconds`: the Unix time, in nanoseconds, that the
    /// trace's timestamps count from (newer Kineto; VizTracer's in its
    /// `viztracer_metadata`); `None` where the timestamps are Unix times
    /// themselves (older Kineto) or on a clock of their own (older
    /// VizTracer).
    pub base_time_ns: Option<i64>,
    /// Names of kernels, launches and collectives, by id.
    pub names: Vec<String>,
    /// GPU activities: kernels, memory copies and sets.
    pub gpu: GpuRows,
    /// CPU events with a correlation id: the runtime calls that launched
    /// the GPU activities.
    pub launches: LaunchRows,
    /// `ProfilerStep#N` spans on the host: `(start_ns, end_ns)`.
    pub steps: Vec<(i64, i64)>,
    /// The latest start of a `ProfilerStep#N` annotation drawn on a GPU
    /// stream (`gpu_user_annotation`, which recent torch writes beside the
    /// host's span).
    pub last_gpu_step_ns: Option<i64>,
    /// Collective calls as the host saw them.
    pub collectives: CollectiveRows,
    /// CPU operators (`cpu_op` events) and `record_function` spans
    /// (`user_annotation`, but for `ProfilerStep#N` and collectives), per
    /// name: calls and inclusive time.
    pub cpu_ops: OpTotals,
    /// The same operators and spans one by one, for the timeline, where
    /// [`TraceLimits::cpu_spans`] asks for them (within
    /// [`TraceLimits::max_rows`], the rest counted as cut rows).
    pub cpu_spans: SpanRows,
    /// Python function calls as VizTracer records them (`cat: "fee"`),
    /// one by one within [`TraceLimits::max_rows`]: their names are
    /// VizTracer's, `qualified.name (file:line)`.
    pub python_calls: SpanRows,
    /// Whether the trace is VizTracer's (it has `viztracer_metadata`).
    pub viztracer: bool,
    /// Trace events read.
    pub events: u64,
    /// What was left out, and why.
    pub cut: TraceCut,
}

impl RankTrace {
    /// The GPU activities HTA analyses, by row: with two or more
    /// `ProfilerStep`s, those launched before the last step began (HTA
    /// drops the last, incomplete iteration:
    /// `Trace._filter_irrelevant_gpu_kernels`); else all. As in HTA, the
    /// last step begins at the latest start of a step's span on the host
    /// or of its annotation on a GPU stream, whichever is later.
    pub fn analysed_activities(&self) -> Vec<usize> {
        let all = 0..self.gpu.name.len();
        let last_step = self
            .steps
            .iter()
            .map(|s| s.0)
            .chain(self.last_gpu_step_ns)
            .max();
        let Some(last_step) = last_step.filter(|_| self.steps.len() >= 2) else {
            return all.collect();
        };
        let launched: HashSet<i64> = (0..self.launches.start_ns.len())
            .filter(|&i| self.launches.start_ns[i] < last_step)
            .map(|i| self.launches.correlation[i])
            .collect();
        all.filter(|&i| launched.contains(&self.gpu.correlation[i]))
            .collect()
    }
}

impl RankTrace {
    /// When each GPU activity was launched on the host: the start of the
    /// CPU event (a runtime call) with its correlation id, by row of
    /// [`RankTrace::gpu`]; `None` where the trace holds no such event.
    pub fn launch_times(&self) -> Vec<Option<i64>> {
        let launched: std::collections::HashMap<i64, i64> = (0..self.launches.start_ns.len())
            .map(|i| (self.launches.correlation[i], self.launches.start_ns[i]))
            .collect();
        self.gpu
            .correlation
            .iter()
            .map(|c| launched.get(c).copied())
            .collect()
    }
}

/// GPU activities by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuRows {
    /// Name id (into [`RankTrace::names`]).
    pub name: Vec<u32>,
    /// Category, from the name.
    pub category: Vec<KernelCategory>,
    /// CUDA stream.
    pub stream: Vec<i64>,
    /// Device index (-1 when the trace does not say).
    pub device: Vec<i64>,
    /// Start, nanoseconds on the trace's clock.
    pub start_ns: Vec<i64>,
    /// Duration, nanoseconds.
    pub dur_ns: Vec<i64>,
    /// Correlation id with the launching CPU event.
    pub correlation: Vec<i64>,
}

/// CPU events with a correlation id, by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchRows {
    /// Start, nanoseconds on the trace's clock.
    pub start_ns: Vec<i64>,
    /// Correlation id.
    pub correlation: Vec<i64>,
}

/// Collective calls on the host, by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectiveRows {
    /// Kind id (into [`RankTrace::names`]): `all_reduce`, `broadcast`, …
    pub kind: Vec<u32>,
    /// Process group name id, where the trace gives one.
    pub group: Vec<Option<u32>>,
    /// Bytes of the input, where the trace gives them.
    pub bytes: Vec<Option<u64>>,
    /// Start, nanoseconds on the trace's clock.
    pub start_ns: Vec<i64>,
    /// Duration, nanoseconds.
    pub dur_ns: Vec<i64>,
}

/// Calls and inclusive time per operator name, by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpTotals {
    /// Name id.
    pub name: Vec<u32>,
    /// Calls.
    pub calls: Vec<u64>,
    /// Time in the calls, nested operators included, nanoseconds.
    pub total_ns: Vec<i64>,
}

/// Host spans (operators, Python calls) by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpanRows {
    /// Name id.
    pub name: Vec<u32>,
    /// The trace's thread id (0 where it gives none that is a number).
    pub thread: Vec<i64>,
    /// Start, nanoseconds since the trace's time base.
    pub start_ns: Vec<i64>,
    /// Length, nanoseconds.
    pub dur_ns: Vec<i64>,
}

/// What a read left out of a [`RankTrace`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TraceCut {
    /// Rows past [`TraceLimits::max_rows`].
    pub rows: u64,
    /// Events whose name was past [`TraceLimits::max_names`] (and, in an
    /// import, calls whose name was past the shared name budget).
    pub names: u64,
    /// Events whose name was past [`TraceLimits::max_name_bytes`] (kept cut).
    pub long_names: u64,
    /// Events with a negative, non-finite or overflowing time (and a
    /// `baseTimeNanoseconds` that is no Unix time).
    pub bad_times: u64,
}

impl TraceCut {
    /// Whether anything was left out.
    pub fn is_empty(&self) -> bool {
        *self == TraceCut::default()
    }
}

/// A trace that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be opened or read (a truncated gzip stream too).
    #[error("reading {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a Kineto trace: invalid JSON, a field of the wrong
    /// type, nesting past serde_json's limit, an event past the size limit.
    #[error("{path} is not a readable trace")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong, and where.
        #[source]
        source: serde_json::Error,
    },
    /// The trace holds more bytes than [`TraceLimits::max_bytes`].
    #[error(
        "{path} holds more than {limit} bytes (inflated): refused (raise --max-bytes to read it)"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// Valid JSON with no `traceEvents` array.
    #[error("{path} has no traceEvents array: not a torch.profiler / Kineto trace")]
    NoEvents {
        /// The file.
        path: PathBuf,
    },
}
