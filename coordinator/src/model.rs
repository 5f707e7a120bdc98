//! The report model: what the analysis finds, as the data of `report.json`
//! (schema_version 1, the contract in DESIGN.md). The report writers render
//! it; `rankscope report` reads it back.

use std::collections::BTreeMap;

use rankscope_common::parallel::ParallelCoord;
use rankscope_common::payload::{ClockSync, GpuSource, Overflow, SamplerStats, TransportName};
use serde::{Deserialize, Serialize};

mod account;
pub use account::*;

/// At most this many missing ranks are listed by number.
pub const MISSING_LISTED: usize = 1_000;

/// The `schema_version` this build writes.
pub const SCHEMA_VERSION: u32 = 1;

/// The whole report of one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Version of this schema.
    pub schema_version: u32,
    /// The session.
    pub session: SessionSummary,
    /// For a window's report (`<session dir>/window-<k>/`): which window
    /// of the session, and its steps; `null` for the session's own report.
    #[serde(default)]
    pub window: Option<WindowSummary>,
    /// In a session's own report: the numbers of its windows that have a
    /// report (`window-<k>/`), in order. Empty in a window's report.
    #[serde(default)]
    pub windows: Vec<u32>,
    /// One entry per reporting rank.
    pub ranks: Vec<RankSummary>,
    /// One entry per stage name, by total time.
    pub stages: Vec<StageStats>,
    /// Ranks slower than their peers in a stage.
    pub stragglers: Vec<Straggler>,
    /// Stragglers of one stage on one host, two or more: one finding
    /// about the host, with what the ranks cost the job together.
    #[serde(default)]
    pub straggler_groups: Vec<StragglerGroup>,
    /// Per stage, call by call: which rank was slowest and the wait it imposed.
    pub lockstep: Vec<LockstepStage>,
    /// One entry per physical GPU.
    pub gpus: Vec<GpuSummary>,
    /// Diffusion steps, blocks and parameter counts.
    pub diffusion: DiffusionSummary,
    /// What to look at, with the evidence.
    pub recommendations: Vec<Recommendation>,
    /// The data of the HTML report's charts, downsampled to a bounded size.
    /// Absent from reports written before it existed.
    #[serde(default)]
    pub series: Series,
    /// Per rank and GPU, how its time went, from kernel traces (HTA's
    /// definitions). Empty without kernel traces.
    #[serde(default)]
    pub gpu_time: Vec<GpuTime>,
    /// GPU kernels across ranks, the largest total first; the rest folded
    /// into one row. Empty without kernel traces.
    #[serde(default)]
    pub kernels: Vec<KernelStats>,
    /// CPU operators across ranks (torch.profiler's `cpu_op` events), as
    /// `kernels[]`, category `cpu_op`. Empty without kernel traces.
    #[serde(default)]
    pub cpu_ops: Vec<KernelStats>,
    /// Traced Python functions across ranks, the most own time first (at
    /// most 100). Empty without `python_tracing`.
    #[serde(default)]
    pub python_functions: Vec<PythonFunctionStats>,
    /// Per stage, the GPU time of the activities launched while it was the
    /// innermost open stage, across ranks (as `kernels[]`, category
    /// `stage`); beside `stages[]`' host time. From torch.profiler windows.
    #[serde(default)]
    pub stage_kernels: Vec<KernelStats>,
    /// Kernels (and CPU operators) slower on one rank than on the others.
    #[serde(default)]
    pub kernel_stragglers: Vec<KernelStraggler>,
    /// Collectives per rank, kind and process group, split into waiting
    /// for the last rank to arrive and the rest.
    #[serde(default)]
    pub collectives: Vec<CollectiveStats>,
    /// The kernel traces the report read: one per rank.
    #[serde(default)]
    pub kernel_traces: Vec<KernelTraceInput>,
    /// One-off time, kept out of the straggler statistics: warm-up, stalls
    /// and steps the profiler perturbed, the costliest first.
    #[serde(default)]
    pub events: Vec<OneOffEvent>,
    /// Each rank's wall time split once into categories that add up to
    /// it, and the job's: every finding's cost is a slice of it. Empty in
    /// a report made before the account was.
    #[serde(default)]
    pub time_account: TimeAccount,
    /// The single costliest explanation of the job's lost time; `null` in
    /// a report made before verdicts were.
    #[serde(default)]
    pub verdict: Option<Verdict>,
}

/// One-off time of one or more ranks at one step: a warm-up call, a stall
/// (a call, or a gap between top-level calls, far outside the rank's steady
/// time), or a step the profiler's own spans perturbed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneOffEvent {
    /// `warmup`, `stall` or `profiler`.
    pub kind: String,
    /// The ranks it happened on (the first 64).
    pub ranks: Vec<u32>,
    /// How many ranks it happened on.
    pub rank_count: u32,
    /// The call of `step_stage` it happened in or just before, from 0.
    pub step: u64,
    /// The top-level stage whose calls are the steps.
    pub step_stage: String,
    /// The innermost stage that took the time (the profiler's span, for
    /// its own); `null` for a gap between top-level calls.
    pub stage: Option<String>,
    /// When it began, seconds on the shared timeline.
    pub started_s: f64,
    /// Wall-clock time it cost the job: the most any of its ranks spent
    /// past its steady time (the others wait for that rank), seconds.
    pub cost_s: f64,
    /// Of that, the profiler's own spans, seconds.
    pub profiler_s: f64,
    /// What each rank lost, in words.
    pub evidence: Vec<String>,
}

/// What the verdict says holds the job back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Ranks slower than the others, whom the others wait for.
    Straggler,
    /// Nothing costs the job 1 % of its time.
    Balanced,
    /// One-off time: warm-up, stalls, the profiler's own.
    Stalls,
    /// Time in collective calls that is no rank's wait.
    CommunicationBound,
    /// GPUs idle while no rank waits: the hosts do not keep them busy.
    HostBound,
    /// GPUs busy computing, the ranks balanced.
    GpuBound,
}

impl VerdictKind {
    /// The kind's name in report.json.
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Straggler => "straggler",
            VerdictKind::Balanced => "balanced",
            VerdictKind::Stalls => "stalls",
            VerdictKind::CommunicationBound => "communication_bound",
            VerdictKind::HostBound => "host_bound",
            VerdictKind::GpuBound => "gpu_bound",
        }
    }
}

/// The costliest explanation of the job's lost time, in one sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// What holds the job back.
    pub kind: VerdictKind,
    /// The ranks it blames (none for a job-wide cause).
    pub ranks: Vec<u32>,
    /// The stage where the time goes.
    pub stage: Option<String>,
    /// The kernel (or CPU operator) slower there, where traced.
    pub kernel: Option<String>,
    /// The collective the others wait in.
    pub collective: Option<String>,
    /// Wall-clock time it cost the job, seconds.
    pub cost_s: f64,
    /// Of the job's wall-clock time (`session.duration_s`), percent.
    pub cost_pct: f64,
    /// The verdict in one sentence.
    pub sentence: String,
    /// The chain of evidence behind it.
    pub evidence: Vec<String>,
    /// Its number among `recommendations[]` (from 1): the finding it is,
    /// which the summary and the page tell once; `null` for a balanced job.
    #[serde(default)]
    pub finding: Option<u32>,
}

/// The session as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// Id shared by every rank.
    pub id: String,
    /// Session name.
    pub name: String,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Ranks in the job.
    pub world_size: u32,
    /// Ranks whose data is in the report.
    pub ranks_reporting: Vec<u32>,
    /// Ranks with no data: the first [`MISSING_LISTED`] of them.
    pub ranks_missing: Vec<u32>,
    /// How many ranks have no data.
    pub ranks_missing_count: u32,
    /// Launcher detected on the ranks.
    pub launcher: String,
    /// The transport that gathered the payloads: `dir`, `mpi` or `tcp`.
    pub transport: TransportName,
    /// How clock offsets were obtained: `none`, `mpi-pingpong` or `tcp-pingpong`.
    pub clock_sync: ClockSync,
    /// Where rank 0 listened (TCP): `host:port`.
    pub endpoint: Option<String>,
    /// Longest rank session, seconds.
    pub duration_s: f64,
    /// `nvml`, `simulated` or `none`.
    pub gpu_source: GpuSource,
    /// Identity of the run the report covers, when one was established.
    pub run_id: Option<String>,
    /// Session start (rank 0's, else the earliest), seconds since the Unix epoch.
    pub started_unix_s: f64,
    /// Inputs refused while gathering.
    pub skipped: Vec<SkippedInput>,
    /// Files of other runs that used the same session id, left out.
    pub other_runs: Vec<SkippedInput>,
    /// The files judged this run's by their age alone (the directory
    /// transport without a run identity, RANKSCOPE_RUN_ID): a run started
    /// within seconds of this one could be among them. Empty otherwise.
    #[serde(default)]
    pub judged_by_age: Vec<String>,
    /// Calls of each stage name on each rank left out of the stage
    /// statistics as warm-up (`warmup_calls`).
    #[serde(default)]
    pub warmup_calls: u32,
    /// What the agents told (or, on quiet ranks, kept from) the user, each
    /// distinct message once.
    pub notices: Vec<Notice>,
    /// Rows ranks recorded but could not keep.
    pub dropped_rows: Vec<DroppedRows>,
    /// The levels of the gather that brought the payloads to rank 0: 1,
    /// every rank straight to rank 0 (the only gather there is yet; a
    /// report that does not say was gathered so).
    #[serde(default = "one_level")]
    pub gather_levels: u32,
    /// The nodes the reporting ranks ran on (by the host, or the node name
    /// the launcher gave: `RANKSCOPE_NODE`), in name order.
    #[serde(default)]
    pub nodes: Vec<NodeSummary>,
}

/// `gather_levels` of a report that does not say.
fn one_level() -> u32 {
    1
}

/// One node of the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// The host, or the node's name.
    pub name: String,
    /// Its leader: its lowest rank of local rank 0, else its lowest rank.
    pub leader: u32,
    /// Its reporting ranks, ascending.
    pub ranks: Vec<u32>,
}

/// The window a report covers: a span of steps every rank profiled at
/// once while the session went on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowSummary {
    /// The window's number in its session, from 1.
    pub index: u32,
    /// What opened it: `rolling`, `command`, `signal`.
    pub trigger: String,
    /// The step at which every rank was to open it.
    pub first_step: u64,
    /// Steps it was to cover.
    pub steps: u64,
    /// When it opened, seconds after the session's start (rank 0's clock).
    pub started_s: f64,
    /// How long it was open, seconds.
    pub duration_s: f64,
    /// Ranks that opened it later than `first_step` (they heard of its
    /// plan late): their rows start later.
    pub ranks_opened_late: Vec<u32>,
    /// Ranks whose window covered fewer steps than planned: opened late,
    /// or the session ended first.
    pub ranks_cut_short: Vec<u32>,
    /// Ranks whose window was planned otherwise than rank 0's (other
    /// steps): their rows are of other steps.
    #[serde(default)]
    pub ranks_other_plan: Vec<u32>,
    /// Why rank 0 ended the window early (`rankscope trigger --cancel`),
    /// where it did: `steps` are then the steps it kept.
    #[serde(default)]
    pub cancelled: Option<String>,
}

impl WindowSummary {
    /// The window in a line: `window 2 (rolling): steps 5 to 10, opened
    /// 0.512 s into the session, 0.060 s long`, and the ranks that differ.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "window {} ({}): steps {} to {}, opened {:.3} s into the session, {:.3} s long",
            self.index,
            self.trigger,
            self.first_step,
            self.first_step.saturating_add(self.steps),
            self.started_s,
            self.duration_s
        );
        if let Some(reason) = &self.cancelled {
            text.push_str(&format!(", ended early: {reason}"));
        }
        for (what, ranks) in [
            ("opened late on", &self.ranks_opened_late),
            ("cut short on", &self.ranks_cut_short),
            ("planned otherwise on", &self.ranks_other_plan),
        ] {
            if !ranks.is_empty() {
                let listed = rankscope_common::text::rank_ranges(ranks);
                text.push_str(&format!("; {what} ranks {listed}"));
            }
        }
        text
    }
}

impl SessionSummary {
    /// The missing ranks in a few words: `[2, 5-9]`, with how many more
    /// there are when the list is cut.
    pub fn missing_text(&self) -> String {
        let listed = rankscope_common::text::rank_ranges(&self.ranks_missing);
        let more = (self.ranks_missing_count as usize).saturating_sub(self.ranks_missing.len());
        match more {
            0 => format!("[{listed}]"),
            more => format!("[{listed}] and {more} more"),
        }
    }
}

/// A message of the agents and the ranks that gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    /// The message.
    pub message: String,
    /// The ranks that gave it.
    pub ranks: Vec<u32>,
}

/// An input refused while gathering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkippedInput {
    /// File or peer.
    pub source: String,
    /// Why.
    pub reason: String,
}

/// Rows one rank dropped from one table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedRows {
    /// The rank.
    pub rank: u32,
    /// The table.
    pub table: String,
    /// Rows dropped.
    pub rows: u64,
}

/// One rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    /// Global rank.
    pub rank: u32,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Rank within the node.
    pub local_rank: u32,
    /// Its parallel coordinates (`[{dim: "tp", index: 1, size: 4}, …]`),
    /// where its kernel traces' process groups named them; else empty.
    #[serde(default)]
    pub parallel: Vec<ParallelCoord>,
    /// This rank's clock minus the reference rank's (rank 0 in a job; in
    /// `rankscope import`, the rank whose offset is 0: the lowest with NCCL
    /// kernels, else the lowest), nanoseconds; `null` where none was
    /// measured.
    pub clock_offset_ns: Option<i64>,
    /// Round trip of the exchange the offset came from, nanoseconds: the
    /// offset is known to within half of it.
    pub clock_round_trip_ns: Option<u64>,
    /// Where the offset came from the ends of matched collectives (`rankscope
    /// import`): how far a typical call's end is from the reference rank's
    /// once aligned (the median absolute deviation; through VizTracer
    /// traces, plus each one's lag to its rank's torch.profiler trace),
    /// nanoseconds; else `null`.
    #[serde(default)]
    pub clock_offset_spread_ns: Option<u64>,
    /// Session start on the shared timeline (clock offsets applied),
    /// seconds after rank 0's (after the earliest rank's without rank 0).
    pub started_s: f64,
    /// How far the rank's clock drifted against rank 0's over the session,
    /// nanoseconds; `null` unless the offset was measured at start and finish.
    pub clock_drift_ns: Option<i64>,
    /// Session length on this rank, seconds.
    pub duration_s: f64,
    /// Whether the rank never finished: its data is what its flushes
    /// wrote, up to `duration_s`.
    pub partial: bool,
    /// GPUs the rank sampled.
    pub gpus: Vec<RankGpu>,
    /// How the rank's GPUs were chosen.
    pub gpu_selection: String,
    /// The host over the session, from the rank's host readings.
    pub host_telemetry: Option<HostSummary>,
    /// Recording limits the rank reached, beside the rows it dropped.
    pub overflow: Overflow,
    /// What the telemetry sampler cost the rank.
    #[serde(default)]
    pub sampler: SamplerStats,
    /// Rows the rank recorded, by table (as in `raw/`).
    #[serde(default)]
    pub rows: BTreeMap<String, u64>,
    /// What profiling cost the rank, as its agent measured it; `null` from
    /// an agent that did not.
    #[serde(default)]
    pub overhead: Option<RankOverhead>,
}

/// What profiling cost one rank: its stages on the threads that record them
/// (calls × the cost of one, measured on the rank's machine), and on
/// threads of the profiler's own, the sampler's CPU time and the
/// flushes' wall time; and the encoding of the rank's final payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankOverhead {
    /// Stages begun: rows kept, dropped past the row budget, and refused
    /// past the open-stage limit.
    pub stage_calls: u64,
    /// What one stage costs the thread recording it, nanoseconds.
    pub stage_ns_per_call: f64,
    /// `stage_calls` × `stage_ns_per_call`, seconds.
    pub stages_s: f64,
    /// CPU time of the telemetry sampler's thread, seconds (`null`: no
    /// sampler ran, or its time could not be read).
    pub sampler_cpu_s: Option<f64>,
    /// Wall time of the flushes (periodic and asked for), seconds.
    pub flushes_s: f64,
    /// Time the agent took to encode the rank's final payload (each time
    /// it did: again after a clock resync), seconds (`null`: not measured,
    /// as by agents writing payload format 2). Paid after the session's
    /// end, counted in `share_pct` as if within it.
    pub encode_s: Option<f64>,
    /// Time in the profiler's own spans on the rank's critical path (a
    /// torch.profiler window's start, stop, trace export and parse: the
    /// stages named `rankscope:`), seconds.
    #[serde(default)]
    pub profiler_s: f64,
    /// All of these together (those not measured left out), seconds.
    pub total_s: f64,
    /// `total_s` over the rank's session time, percent (the profiler's own
    /// threads counted as if the program waited for them); `null` for a
    /// session of no length.
    pub share_pct: Option<f64>,
}

/// One rank's host over the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSummary {
    /// Readings taken.
    pub samples: u64,
    /// Mean CPU use, percent of all cores.
    pub cpu_avg_pct: Option<f64>,
    /// Highest CPU use, percent of all cores.
    pub cpu_peak_pct: Option<f64>,
    /// Highest host memory in use, MB.
    pub memory_peak_mb: f64,
    /// Host memory in all, MB.
    pub memory_total_mb: f64,
    /// Highest 1-minute load average.
    pub load_1_max: Option<f64>,
    /// Highest resident memory of the rank's process, MB.
    pub process_rss_peak_mb: Option<f64>,
}

/// A GPU as one rank saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankGpu {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Name.
    pub name: String,
}

/// One stage name across ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageStats {
    /// Stage name.
    pub name: String,
    /// The stage its calls run inside most often; `null` at the top.
    pub parent: Option<String>,
    /// Calls, all ranks together.
    pub count: u64,
    /// Ranks that ran the stage.
    pub ranks: u32,
    /// Spread of the per-rank total time (inclusive: nested stages count
    /// in it), seconds.
    pub total_s: Spread,
    /// Spread of the per-rank self time (exclusive: the stages directly
    /// inside it taken out), seconds.
    pub self_s: Spread,
    /// Spread of the per-rank GPU time (the calls timed on the GPU: CUDA
    /// events of the Python package), seconds, over the ranks that measured
    /// it; `null` where no rank did.
    #[serde(default)]
    pub gpu_s: Option<Spread>,
    /// Per-call time over every call of every rank, milliseconds.
    pub per_call_ms: Percentiles,
    /// Spread of the per-rank wait in collective calls within the stage
    /// (a rank's time in them past the least any rank spent in the same
    /// calls), seconds; `null` where no rank recorded a collective call in
    /// it.
    #[serde(default)]
    pub wait_s: Option<Spread>,
    /// Spread of the per-rank work: the time outside those waits and the
    /// profiler's own spans, one-off calls (warm-up, stalls, steps the
    /// profiler perturbed: `events[]`) counted at the rank's steady time,
    /// seconds. Ranks are compared on it. `null` in a report made before.
    #[serde(default)]
    pub work_s: Option<Spread>,
    /// Calls of all ranks counted at their rank's steady time as one-off.
    #[serde(default)]
    pub one_off_calls: u64,
    /// How much slower the slowest rank's work is than the median of the
    /// other ranks' work, percent (the straggler rule's ratio; one measure
    /// everywhere).
    pub imbalance_pct: f64,
    /// Self time summed over the ranks over the session time summed over
    /// the reporting ranks, percent: nested time counts once, so the shares
    /// of stages on one thread per rank add up to at most 100.
    pub share_pct: f64,
}

/// Min / max / avg / std of one value across ranks, with the extreme ranks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Mean.
    pub avg: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Rank of the smallest value.
    pub min_rank: u32,
    /// Rank of the largest value.
    pub max_rank: u32,
}

/// Percentiles of a distribution (linear interpolation between the values
/// where they are exact), with min, mean and max.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Smallest value.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Largest value.
    pub max: f64,
    /// `null` where p50 / p95 / p99 are exact; else how far each may be
    /// from the value at its rank, relative to that value (a quantile
    /// sketch's bound: a stage's calls past 65,536 across ranks). Min,
    /// mean and max are exact either way.
    #[serde(default)]
    pub relative_error: Option<f64>,
}

impl Report {
    /// The stages whose percentiles came from a quantile sketch, and the
    /// largest relative error of them; `None` where every one is exact.
    pub fn sketched_stages(&self) -> Option<(usize, f64)> {
        let errors = self
            .stages
            .iter()
            .filter_map(|s| s.per_call_ms.relative_error);
        errors.fold(None, |found, e| match found {
            Some((n, most)) => Some((n + 1, f64::max(most, e))),
            None => Some((1, e)),
        })
    }
}

/// A rank slower than the median of the other ranks in a stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Straggler {
    /// The slow rank.
    pub rank: u32,
    /// The stage.
    pub stage: String,
    /// Its work in the stage (`stages[].work_s`: waits and one-off calls
    /// left out) over the median of the other ranks' work.
    pub slowdown: f64,
    /// Its work minus that median, seconds.
    pub excess_s: f64,
    /// Its self work (the stages inside taken out) minus the median of
    /// the other ranks' self work, seconds: where, of the nested stages it
    /// is slow in, the extra time is spent.
    #[serde(default)]
    pub self_excess_s: f64,
    /// Time the other ranks spent waiting on it in this stage,
    /// rank-seconds (lockstep: Σ over the calls where it was slowest of
    /// Σ (max − own)).
    pub wait_s: f64,
    /// Wall-clock time it alone cost the job in this stage, seconds
    /// (lockstep: Σ over the calls where it was slowest of its time − the
    /// next slowest rank's; nothing where another rank was as slow):
    /// findings are ordered by it.
    #[serde(default)]
    pub job_time_s: f64,
    /// `excess_s` in units of `spread_s`: how far out of the ordinary it
    /// is (past the score the rank count calls for); `null` without a
    /// spread (fewer than eight ranks) or with none (all ordinary ranks
    /// the same).
    #[serde(default)]
    pub score: Option<f64>,
    /// The stage's ordinary spread across ranks: 1.4826 × the median
    /// absolute deviation of the totals within the threshold over their
    /// median, seconds; `null` with fewer than eight ranks.
    #[serde(default)]
    pub spread_s: Option<f64>,
    /// What explains it, where something does: the bottlenecks of the GPUs
    /// it sampled, its host's CPU saturation. Empty when none was found.
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// Ranks that straggle in one stage on one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StragglerGroup {
    /// The stage.
    pub stage: String,
    /// The host the ranks share, where that is what they share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The GPU model the ranks share, where that is what they share: the
    /// job's other ranks (most of them) run on other GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    /// The ranks, ascending.
    pub ranks: Vec<u32>,
    /// Wall-clock time the ranks together cost the job in this stage,
    /// seconds (lockstep: Σ over the calls of the slowest rank's time −
    /// the slowest time among the other ranks, where one of these is the
    /// slowest).
    pub job_time_s: f64,
}

impl Straggler {
    /// How far out of the stage's ordinary spread this straggler is, as
    /// words to follow its excess (empty where the spread was not judged).
    pub fn out_of_spread(&self) -> String {
        match (self.score, self.spread_s) {
            (Some(score), Some(spread)) => {
                format!(", {score:.1} times the stage's spread across ranks ({spread:.3} s)")
            }
            (None, Some(_)) => ", where the ordinary ranks all took the same".into(),
            _ => String::new(),
        }
    }
}

/// How one rank's GPU spent the window its kernel trace covers, with the
/// definitions of Holistic Trace Analysis (HTA): the window runs from the
/// first GPU activity's start to the last one's end; idle is the time no
/// activity ran on any stream; compute is the union of compute kernels;
/// non-compute the rest of the busy time (communication, memory, other).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuTime {
    /// The rank.
    pub rank: u32,
    /// The device index in the trace; `null` where the trace gives none.
    pub gpu: Option<i64>,
    /// From the first activity's start to the last one's end, seconds.
    pub window_s: f64,
    /// No activity on any stream, seconds.
    pub idle_s: f64,
    /// Some compute kernel running, seconds.
    pub compute_s: f64,
    /// Busy but no compute kernel running, seconds.
    pub non_compute_s: f64,
    /// Some communication kernel running (overlapped or not), seconds.
    pub communication_s: f64,
    /// Some memory copy or set running (overlapped or not), seconds.
    pub memory_s: f64,
    /// `idle_s` of `window_s`, %.
    pub idle_pct: f64,
    /// `compute_s` of `window_s`, %.
    pub compute_pct: f64,
    /// `non_compute_s` of `window_s`, %.
    pub non_compute_pct: f64,
    /// The share of communication time during which a compute kernel ran
    /// too, %; `null` without communication kernels.
    pub comm_overlap_pct: Option<f64>,
    /// Of the window, the rank's wait in collective calls (its time in
    /// them past the least any rank spent in the same calls), seconds:
    /// idle time then is waiting, not starving; `null` where no call
    /// of the window was compared across ranks.
    #[serde(default)]
    pub waiting_s: Option<f64>,
}

/// One GPU kernel (or copy or set) name across ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelStats {
    /// The kernel's name as the trace gives it; the folded row is
    /// `(N other kernels)`.
    pub name: String,
    /// `compute`, `communication`, `memory` or `other` (`cpu_op` in
    /// `cpu_ops[]`).
    pub category: String,
    /// Launches on all ranks.
    pub calls: u64,
    /// Time on all ranks, seconds.
    pub total_s: f64,
    /// The least per-rank total, seconds, and its rank.
    pub min_s: f64,
    /// The rank of `min_s`.
    pub min_rank: u32,
    /// The greatest per-rank total, seconds.
    pub max_s: f64,
    /// The rank of `max_s`.
    pub max_rank: u32,
    /// The mean per-rank total over the ranks with kernel traces, seconds.
    pub avg_s: f64,
    /// The slowest rank against the median of the others, %.
    pub imbalance_pct: f64,
}

/// One traced Python function across ranks (`python_tracing`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PythonFunctionStats {
    /// Qualified name, its module first.
    pub name: String,
    /// Source file.
    pub file: String,
    /// First line.
    pub line: u32,
    /// Calls on all ranks.
    pub calls: u64,
    /// Own time on all ranks (less the traced calls it made), seconds.
    pub self_s: f64,
    /// Time in its calls on all ranks, those they made included (a
    /// recursive call's once), seconds.
    pub total_s: f64,
    /// The rank with the least own time in it (a tracing rank that never
    /// called it: 0 s there).
    pub min_rank: Option<u32>,
    /// The rank with the most own time in it.
    pub max_rank: Option<u32>,
    /// The least per-rank own time, seconds.
    pub min_s: Option<f64>,
    /// The greatest per-rank own time, seconds.
    pub max_s: Option<f64>,
    /// The slowest rank's own time against the median of the others', %.
    pub imbalance_pct: f64,
}

/// A kernel whose total on one rank is past the straggler rule over the
/// median of the other ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelStraggler {
    /// The slow rank.
    pub rank: u32,
    /// The kernel.
    pub kernel: String,
    /// Its category.
    pub category: String,
    /// Its total over the median of the other ranks' totals.
    pub slowdown: f64,
    /// Its total minus that median, seconds.
    pub excess_s: f64,
    /// The stage that launched most of its GPU time on that rank, where
    /// the rank recorded stages around its torch.profiler window.
    #[serde(default)]
    pub stage: Option<String>,
    /// What else the report knows of the rank: its stage stragglers and
    /// its GPUs' bottlenecks.
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// One kind of collective in one process group on one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveStats {
    /// The rank.
    pub rank: u32,
    /// `all_reduce`, `all_gather`, `broadcast`, …
    pub kind: String,
    /// The process group, where the trace names it.
    pub group: Option<String>,
    /// Calls.
    pub calls: u64,
    /// Time in the calls on the host, seconds.
    pub total_s: f64,
    /// Calls matched with the other ranks' (the k-th call of this kind
    /// and group in the same window on every rank).
    pub compared: u64,
    /// Of the time in the steady compared calls (`steady_compared`),
    /// waiting for the last rank to arrive, seconds: per call, this rank's
    /// time in it past the least any rank spent in it (the ranks leave a
    /// collective together, so the one that spent the least arrived last;
    /// no clock offset enters). `null` where no call could be compared.
    pub wait_s: Option<f64>,
    /// Of the time in the compared calls (all of them), the collective's
    /// own: per call, the least any rank spent in it, which is no rank's
    /// wait, seconds; `null` as `wait_s`.
    #[serde(default)]
    pub own_s: Option<f64>,
    /// Of the compared calls, those in steady state: where no rank was in
    /// a one-off (warm-up, a stall, the profiler's own) when it came to the
    /// call, as its stages tell. `wait_s` and the three fields below count
    /// these.
    #[serde(default)]
    pub steady_compared: u64,
    /// Steady compared calls in which this rank arrived last; `null` as
    /// `wait_s`.
    pub last_to_arrive: Option<u64>,
    /// The wait this rank imposed on the others by arriving last at steady
    /// calls, rank-seconds; `null` as `wait_s`.
    pub wait_imposed_s: Option<f64>,
    /// How much later those calls ended because of it: per call, its
    /// arrival past the next-to-last rank's, seconds; `null` as `wait_s`.
    #[serde(default)]
    pub delay_imposed_s: Option<f64>,
    /// Bytes of the inputs, where the trace gives them.
    pub bytes: Option<u64>,
}

/// One kernel trace a report read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelTraceInput {
    /// The rank.
    pub rank: u32,
    /// The file, or where the trace came from.
    pub source: String,
    /// Events read; `null` for windows a rank read itself (its payload
    /// carries the rows, not the count).
    pub events: Option<u64>,
    /// GPU activities kept.
    pub gpu_activities: u64,
    /// What the read left out, and why; `null` for windows a rank read
    /// itself (rows past its budget are its dropped rows of `kernels`).
    pub cut: Option<rankscope_common::kineto::TraceCut>,
    /// The rank's parallel coordinates, where the trace's process groups
    /// named them.
    #[serde(default)]
    pub parallel: Vec<ParallelCoord>,
}

/// One stage, call by call across ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockstepStage {
    /// Stage name.
    pub stage: String,
    /// Calls compared (the fewest any rank made).
    pub calls: u64,
    /// Per rank: how often it was slowest and the wait it imposed.
    pub ranks: Vec<LockstepRank>,
}

/// One rank in a lockstep comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockstepRank {
    /// The rank.
    pub rank: u32,
    /// Calls in which it was the slowest.
    pub slowest_calls: u64,
    /// Σ (its time − each other rank's time) over those calls:
    /// rank-seconds the others idled on it.
    pub wait_imposed_s: f64,
    /// Σ (its time − the next slowest rank's) over those calls: how much
    /// later the stage's calls ended because of it, seconds of wall-clock
    /// (job) time.
    #[serde(default)]
    pub delay_imposed_s: f64,
}

/// One physical GPU over the session, counted once however many ranks
/// sampled it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSummary {
    /// The rank whose readings are used (the lowest, when several sampled it).
    pub rank: u32,
    /// Every rank that sampled it.
    pub sampled_by: Vec<u32>,
    /// Host.
    pub host: String,
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Name.
    pub name: String,
    /// `nvml`, or `simulated` for synthetic readings.
    pub source: GpuSource,
    /// Readings used.
    pub samples: u64,
    /// Memory in all, MB.
    pub memory_total_mb: Option<f64>,
    /// Peak memory used, MB.
    pub memory_peak_mb: Option<f64>,
    /// Mean GPU utilisation, percent.
    pub util_avg: Option<f64>,
    /// Highest temperature, °C.
    pub temp_max_c: Option<f64>,
    /// Mean power, W.
    pub power_avg_w: Option<f64>,
    /// Energy, joules: Σ power · Δt over the intervals between readings.
    pub energy_j: Option<f64>,
    /// Mean SM clock, MHz.
    pub sm_clock_avg_mhz: Option<f64>,
    /// Highest SM clock the GPU supports, MHz.
    pub sm_clock_max_mhz: Option<u32>,
    /// Readings with a throttle reason other than idle, percent.
    pub throttled_pct: Option<f64>,
    /// Bottlenecks found.
    pub bottlenecks: Vec<Bottleneck>,
}

/// What holds a GPU back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BottleneckKind {
    /// Peak memory near the total.
    MemoryPressure,
    /// Thermal throttling.
    ThermalThrottling,
    /// Power capping.
    PowerCapped,
    /// SM clock well below the maximum under load.
    ClockThrottled,
    /// Low utilisation inside compute stages.
    Underutilized,
    /// Out of line with its peers.
    Outlier,
}

impl BottleneckKind {
    /// The name in reports: `memory_pressure`, `thermal_throttling`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            BottleneckKind::MemoryPressure => "memory_pressure",
            BottleneckKind::ThermalThrottling => "thermal_throttling",
            BottleneckKind::PowerCapped => "power_capped",
            BottleneckKind::ClockThrottled => "clock_throttled",
            BottleneckKind::Underutilized => "underutilized",
            BottleneckKind::Outlier => "outlier",
        }
    }
}

/// A GPU bottleneck and what showed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bottleneck {
    /// What kind of bottleneck.
    pub kind: BottleneckKind,
    /// The readings that showed it.
    pub evidence: String,
}

/// Diffusion steps, blocks and model size.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiffusionSummary {
    /// Step times.
    pub steps: Option<StepSummary>,
    /// Block throughput.
    pub blocks: Option<BlockSummary>,
    /// Parameter counts by name (the largest a rank reported).
    pub model_parameters: BTreeMap<String, u64>,
}

/// Denoising steps across ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSummary {
    /// Steps, all ranks together.
    pub count: u64,
    /// Step time over every step of every rank, milliseconds.
    pub step_ms: Percentiles,
    /// Per rank: mean step time, milliseconds.
    pub per_rank_mean_ms: Vec<RankValue>,
}

/// Blocks across ranks. Each frame counts once per block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockSummary {
    /// Blocks per rank (the most any rank computed).
    pub count: u64,
    /// Frames per rank (the most any rank computed).
    pub frames: u64,
    /// Frames per second of block computation, slowest rank.
    pub fps: f64,
    /// Blocks per second of block computation, slowest rank.
    pub bps: f64,
    /// Per rank: frames per second.
    pub per_rank_fps: Vec<RankValue>,
}

/// One rank's value of a per-rank quantity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RankValue {
    /// The rank.
    pub rank: u32,
    /// The value.
    pub value: f64,
}

/// How urgent a recommendation is; orders most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Data is missing or wrong: read the report with care.
    Critical,
    /// Something slows the job down.
    Warning,
    /// Worth knowing.
    Info,
}

impl Severity {
    /// The name in reports: `critical`, `warning` or `info`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// A finding worth acting on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// How urgent: a finding that cost the job less than 1 % of its time
    /// is `info`.
    pub severity: Severity,
    /// Wall-clock time it cost the job, seconds, where that is measured:
    /// findings are ordered by it; `null` for a finding about the data or
    /// one whose cost is not known.
    #[serde(default)]
    pub cost_s: Option<f64>,
    /// `stage`, `straggler`, `data`, ...
    pub category: String,
    /// What to do.
    pub message: String,
    /// What fired the rule.
    pub evidence: String,
}

/// The data of the report's charts over time, downsampled so that its size
/// is bounded whatever the session's length and world size: long series
/// keep the lowest and highest value of each bucket, long timelines the
/// stage that ran most within each bucket. Times are seconds on the shared
/// timeline (the zero of `ranks[].started_s`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// The columns of the stage × rank heatmap, in the order of `ranks`:
    /// one per rank up to 256 ranks, else runs of consecutive ranks (empty
    /// in a report made before columns were: one per rank).
    #[serde(default)]
    pub columns: Vec<RankRun>,
    /// Per stage (the first 50 of `stages`, the largest), per column: the
    /// total seconds in it of the column's slowest rank, `null` where none
    /// of its ranks ran it.
    pub stage_totals_s: Vec<Vec<Option<f64>>>,
    /// Where the columns are runs of ranks: per stage, per column, which
    /// rank `stage_totals_s` is; empty where each column is one rank.
    #[serde(default)]
    pub stage_slowest: Vec<Vec<Option<u32>>>,
    /// Per rank drawn, the stages that ran inside no other: every rank up
    /// to 64 ranks, else the stragglers and then the slowest ranks.
    pub timelines: Vec<RankTimeline>,
    /// Per GPU (in the order of `gpus`), its readings over time.
    pub gpus: Vec<GpuSeries>,
    /// Per rank drawn (as for `timelines`), its diffusion step times.
    pub steps: Vec<RankSteps>,
    /// Ranks whose timeline and step times are not drawn (past 64 ranks).
    #[serde(default)]
    pub ranks_not_drawn: u64,
}

/// Consecutive ranks (in the order of `ranks`) drawn as one column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankRun {
    /// The first rank.
    pub first: u32,
    /// The last rank.
    pub last: u32,
    /// How many ranks the run holds (ranks missing from the report are
    /// not in it).
    pub ranks: u32,
}

/// One rank's outermost stages as bars on the shared timeline, in columns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankTimeline {
    /// The rank.
    pub rank: u32,
    /// The stage names the bars refer to.
    pub names: Vec<String>,
    /// Per bar: index into `names`.
    pub name: Vec<u32>,
    /// Per bar: start, seconds.
    pub start_s: Vec<f64>,
    /// Per bar: end, seconds.
    pub end_s: Vec<f64>,
    /// Per bar: the calls it stands for (more than 1 where coalesced).
    pub calls: Vec<u64>,
    /// Whether the rank had more stages than the budget, so that each bar
    /// is the stage that ran most within its stretch of time.
    pub coalesced: bool,
}

/// One metric of one GPU over time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timed {
    /// Reading times, seconds.
    pub t_s: Vec<f64>,
    /// The values at those times.
    pub value: Vec<f64>,
}

/// One GPU's readings over time, each metric downsampled on its own;
/// a metric the GPU never reported is empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSeries {
    /// The rank whose readings these are.
    pub rank: u32,
    /// NVML index.
    pub index: u32,
    /// Utilisation, percent.
    pub util_pct: Timed,
    /// Memory in use, MB.
    pub memory_mb: Timed,
    /// Temperature, °C.
    pub temperature_c: Timed,
    /// Power draw, W.
    pub power_w: Timed,
    /// SM clock, MHz.
    pub sm_clock_mhz: Timed,
}

impl GpuSeries {
    /// Each metric's series, in the order of `analysis::gpus::GPU_METRICS`.
    pub fn metrics(&self) -> [&Timed; 5] {
        [
            &self.util_pct,
            &self.memory_mb,
            &self.temperature_c,
            &self.power_w,
            &self.sm_clock_mhz,
        ]
    }

    /// Each metric's series, in the order of `analysis::gpus::GPU_METRICS`.
    pub fn metrics_mut(&mut self) -> [&mut Timed; 5] {
        [
            &mut self.util_pct,
            &mut self.memory_mb,
            &mut self.temperature_c,
            &mut self.power_w,
            &mut self.sm_clock_mhz,
        ]
    }
}

/// One rank's diffusion step times.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankSteps {
    /// The rank.
    pub rank: u32,
    /// Step numbers (positions in the rank's step table).
    pub step: Vec<u64>,
    /// Step times, ms.
    pub ms: Vec<f64>,
}
