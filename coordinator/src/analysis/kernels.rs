//! Kernel traces: each rank's GPU time broken down as Holistic Trace
//! Analysis (HTA) breaks it down, kernels and collectives compared across
//! ranks. A rank's trace is digested ([`RankKernels::digest`]) as soon as it
//! is read, so that only its digest is kept; [`analyze_kernels`] merges the
//! digests.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use rankscope_common::kineto::{KernelCategory, RankTrace};
use rankscope_common::table::{
    counted_collectives, CollectivesView, CpuOpsView, KernelsView, StagesView,
};
use rankscope_common::{Payload, PayloadHeader};

use super::account::{GpuAccount, TracedRank};
use super::intervals::{length, merge, overlap};
use super::launches::launching_stages;
use super::shared_names::SharedNames;
use super::stats::imbalance_pct;
use super::steady::Spans;
use super::{timeline, StragglerRule};
use crate::model::{
    CollectiveStats, GpuTime, KernelStats, KernelStraggler, KernelTraceInput, Straggler,
};

/// How many kernel names `kernels[]` lists; the rest are folded, one row
/// per category.
pub const KERNELS_LISTED: usize = 50;
/// How many kernel stragglers are kept, the largest excess first.
pub const KERNEL_STRAGGLERS_LISTED: usize = 50;

/// Per name: its category, calls and total nanoseconds.
pub type Totals = HashMap<Arc<str>, (KernelCategory, u64, i64)>;

/// What the analysis keeps of one rank's kernel trace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankKernels {
    /// The rank.
    pub rank: u32,
    /// Where the trace came from, and what was cut of it; `None` for a
    /// rank whose only rows are its collective calls recorded on the host.
    pub input: Option<KernelTraceInput>,
    /// Per GPU, its time broken down.
    pub gpu_time: Vec<GpuTime>,
    /// Per kernel name: its category, launches and total nanoseconds.
    pub kernels: Totals,
    /// Per CPU operator name: [`KernelCategory::CpuOp`], calls and
    /// inclusive nanoseconds.
    pub ops: Totals,
    /// Per stage name: [`KernelCategory::Stage`], the GPU activities
    /// launched while it was the innermost open stage, and their GPU
    /// nanoseconds (in-job windows only: an imported trace has no stages).
    pub by_stage: Totals,
    /// Per kernel name, the stage that launched most of its GPU time.
    pub kernel_stage: HashMap<Arc<str>, Arc<str>>,
    /// Collective calls on the host, in start order.
    pub collectives: Vec<CollectiveCall>,
    /// Per window, from its first GPU activity's start to its last one's
    /// end, on the trace's clock (the GPU time's windows).
    #[serde(default)]
    pub spans: Vec<(i64, i64)>,
    /// What its GPUs did in the windows beside its host, summed.
    #[serde(default)]
    pub gpu: GpuAccount,
}

/// One collective call on a rank's host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveCall {
    /// The torch.profiler window it ran in (1 for an imported trace):
    /// calls are matched across ranks within a window.
    pub window: u32,
    /// `all_reduce`, …
    pub kind: Arc<str>,
    /// The process group, where the trace names it.
    pub group: Option<Arc<str>>,
    /// Input bytes, where the trace gives them.
    pub bytes: Option<u64>,
    /// Start, Unix nanoseconds (the trace's clock taken as the host's).
    pub start_ns: i64,
    /// Length, nanoseconds.
    pub dur_ns: i64,
    /// Whether it ran in the rank's steady state: in no step that held a
    /// one-off call or followed a one-off gap (see the analysis's `steady`).
    #[serde(default = "steady")]
    pub steady: bool,
}

/// A collective call of a digest that does not say: steady.
fn steady() -> bool {
    true
}

/// A payload's unsigned nanoseconds as the trace's signed ones; `None`
/// past `i64::MAX`.
fn as_ns(value: u64) -> Option<i64> {
    i64::try_from(value).ok()
}

/// The rows of a payload's `kernels` table, each into its window's trace.
fn add_kernel_rows(windows: &mut BTreeMap<u32, TraceOf>, k: &KernelsView<'_>) {
    for i in 0..k.len {
        let (Some(start_ns), Some(dur_ns)) = (as_ns(k.start_ns[i]), as_ns(k.dur_ns[i])) else {
            continue;
        };
        let trace = windows.entry(k.window[i]).or_default();
        let name = trace.intern(k.name.get(i));
        let gpu = &mut trace.trace.gpu;
        gpu.name.push(name);
        // From the name, as the rank did: not a payload's claim.
        gpu.category.push(KernelCategory::of(k.name.get(i)));
        gpu.stream.push(as_ns(k.stream[i]).unwrap_or(0));
        gpu.device.push(k.device.get(i).map_or(-1, i64::from));
        gpu.start_ns.push(start_ns);
        gpu.dur_ns.push(dur_ns);
        gpu.correlation.push(i as i64);
    }
}

/// The counted rows of a payload's `collectives` table, each into its
/// window's trace.
fn add_collective_rows(windows: &mut BTreeMap<u32, TraceOf>, c: &CollectivesView<'_>) {
    for i in counted_collectives(c) {
        let (Some(start_ns), Some(dur_ns)) = (as_ns(c.start_ns[i]), as_ns(c.dur_ns[i])) else {
            continue;
        };
        let trace = windows.entry(c.window[i]).or_default();
        let kind = trace.intern(c.kind.get(i));
        let group = c.group.get(i).map(|g| trace.intern(g));
        let rows = &mut trace.trace.collectives;
        rows.kind.push(kind);
        rows.group.push(group);
        rows.bytes.push(c.bytes.get(i));
        rows.start_ns.push(start_ns);
        rows.dur_ns.push(dur_ns);
    }
}

/// The rows of a payload's `cpu_ops` table, each into its window's trace.
fn add_cpu_op_rows(windows: &mut BTreeMap<u32, TraceOf>, o: &CpuOpsView<'_>) {
    for i in 0..o.len {
        let Some(total_ns) = as_ns(o.total_ns[i]) else {
            continue;
        };
        let trace = windows.entry(o.window[i]).or_default();
        let name = trace.intern(o.name.get(i));
        let totals = &mut trace.trace.cpu_ops;
        totals.name.push(name);
        totals.calls.push(o.calls[i]);
        totals.total_ns.push(total_ns);
    }
}

impl RankKernels {
    /// The digest of a rank whose only rows are its collective calls as
    /// its host saw them, in start order.
    pub fn of_host_calls(rank: u32, mut collectives: Vec<CollectiveCall>) -> Self {
        collectives.sort_by_key(|c| c.start_ns);
        RankKernels {
            rank,
            input: None,
            gpu_time: Vec::new(),
            kernels: Totals::new(),
            ops: Totals::new(),
            by_stage: Totals::new(),
            kernel_stage: HashMap::new(),
            collectives,
            spans: Vec::new(),
            gpu: GpuAccount::default(),
        }
    }

    /// Moves the digest's times `by_ns` earlier: onto another clock, whose
    /// time is this one's less `by_ns`.
    pub fn shift_clock(&mut self, by_ns: i64) {
        for call in &mut self.collectives {
            call.start_ns = call.start_ns.saturating_sub(by_ns);
        }
        for span in &mut self.spans {
            *span = (span.0.saturating_sub(by_ns), span.1.saturating_sub(by_ns));
        }
    }

    /// The digest of window `window` of rank `rank`, read from `source`:
    /// the activities of `kept` (rows of `trace.gpu`), every collective
    /// call and operator, their names held as `names`' shared copies.
    pub fn digest(
        (rank, window): (u32, u32),
        source: String,
        trace: &RankTrace,
        kept: &[usize],
        names: &SharedNames,
    ) -> Self {
        let mut named = TraceNames::new(trace, names);
        let (kernels, gpu_time) = kernel_totals(rank, trace, kept, &mut named);
        let collectives = collective_calls(window, trace);
        let base_ns = trace.base_time_ns.unwrap_or(0);
        let gpu = &trace.gpu;
        let spans = kept
            .iter()
            .map(|&i| {
                (
                    gpu.start_ns[i],
                    gpu.start_ns[i].saturating_add(gpu.dur_ns[i]),
                )
            })
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
            .map(|(start, end)| (base_ns.saturating_add(start), base_ns.saturating_add(end)))
            .into_iter()
            .collect();
        let cpu = &trace.cpu_ops;
        let mut ops = Totals::new();
        for i in 0..cpu.name.len() {
            let totals = (KernelCategory::CpuOp, cpu.calls[i], cpu.total_ns[i]);
            named.add(&mut ops, cpu.name[i], totals);
        }
        let calls = &trace.collectives;
        let gpu_account = GpuAccount::of_window(
            kept.iter().map(|&i| {
                (
                    gpu.category[i],
                    gpu.start_ns[i],
                    gpu.start_ns[i].saturating_add(gpu.dur_ns[i]),
                )
            }),
            (0..calls.start_ns.len()).map(|i| {
                (
                    calls.start_ns[i],
                    calls.start_ns[i].saturating_add(calls.dur_ns[i]),
                )
            }),
        );
        let mut cut = trace.cut;
        cut.names += named.past_budget;
        RankKernels {
            rank,
            input: Some(KernelTraceInput {
                rank,
                source,
                events: Some(trace.events),
                gpu_activities: kept.len() as u64,
                cut: Some(cut),
                parallel: trace.parallel.clone(),
            }),
            gpu_time,
            kernels,
            ops,
            by_stage: Totals::new(),
            kernel_stage: HashMap::new(),
            collectives,
            spans,
            gpu: gpu_account,
        }
    }
}

/// The totals per kernel name of the activities `kept` (rows of
/// `trace.gpu`) of rank `rank`, and each GPU's time broken down.
fn kernel_totals(
    rank: u32,
    trace: &RankTrace,
    kept: &[usize],
    named: &mut TraceNames<'_>,
) -> (Totals, Vec<GpuTime>) {
    let gpu = &trace.gpu;
    let mut by_device: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    // By name id first: a name is looked up once, however many rows.
    let mut by_id: HashMap<u32, (KernelCategory, u64, i64)> = HashMap::new();
    for &i in kept {
        by_device.entry(gpu.device[i]).or_default().push(i);
        let entry = by_id.entry(gpu.name[i]).or_insert((gpu.category[i], 0, 0));
        entry.1 += 1;
        entry.2 = entry.2.saturating_add(gpu.dur_ns[i]);
    }
    let mut kernels = Totals::new();
    for (id, totals) in by_id {
        named.add(&mut kernels, id, totals);
    }
    let gpu_time = by_device
        .into_iter()
        .filter_map(|(device, rows)| {
            GpuParts::of_rows(trace, &rows).time(rank, (device >= 0).then_some(device))
        })
        .collect();
    (kernels, gpu_time)
}

/// A trace's names as the shared copies of [`SharedNames`]; the totals of
/// a name past its budget go to the name standing for its category's, and
/// its calls are counted.
struct TraceNames<'a> {
    trace: &'a RankTrace,
    shared: &'a SharedNames,
    /// Calls under names past the budget.
    past_budget: u64,
}

impl<'a> TraceNames<'a> {
    fn new(trace: &'a RankTrace, shared: &'a SharedNames) -> Self {
        TraceNames {
            trace,
            shared,
            past_budget: 0,
        }
    }

    /// Adds `totals` of the name with id `id` to `into`.
    fn add(&mut self, into: &mut Totals, id: u32, totals: (KernelCategory, u64, i64)) {
        let (category, calls, ns) = totals;
        let name = self
            .shared
            .get(&self.trace.names[id as usize])
            .unwrap_or_else(|| {
                self.past_budget += calls;
                self.shared.past_budget(category.as_str())
            });
        let entry = into.entry(name).or_insert((category, 0, 0));
        entry.1 = entry.1.saturating_add(calls);
        entry.2 = entry.2.saturating_add(ns);
    }
}

/// The collective calls of `trace`, window `window`, in start order, on
/// the trace's clock.
fn collective_calls(window: u32, trace: &RankTrace) -> Vec<CollectiveCall> {
    let base_ns = trace.base_time_ns.unwrap_or(0);
    let rows = &trace.collectives;
    // One shared string per kind or group name, not per call.
    let mut shared: HashMap<u32, Arc<str>> = HashMap::new();
    let mut shared_name = |id: u32| {
        let text = shared
            .entry(id)
            .or_insert_with(|| Arc::from(trace.names[id as usize].as_str()));
        Arc::clone(text)
    };
    let mut collectives: Vec<CollectiveCall> = (0..rows.kind.len())
        .map(|i| CollectiveCall {
            window,
            kind: shared_name(rows.kind[i]),
            group: rows.group[i].map(&mut shared_name),
            bytes: rows.bytes[i],
            start_ns: base_ns.saturating_add(rows.start_ns[i]),
            dur_ns: rows.dur_ns[i],
            steady: true,
        })
        .collect();
    collectives.sort_by_key(|c| c.start_ns);
    collectives
}

impl RankKernels {
    /// The digest of the `kernels` and `collectives` tables of a rank's
    /// payload, window by window; `None` where it has neither. Times move
    /// from the rank's session clock onto the shared timeline (its start on
    /// rank 0's clock, offsets applied where they were measured); the
    /// collective calls starting within `perturbed` (spans of the session
    /// clock) are not steady. Its GPUs' time beside the host's is set
    /// against `collectives`, the rank's collective calls the analysis
    /// counts (on the session clock).
    pub fn from_payload(
        payload: &Payload,
        perturbed: &[(u64, u64)],
        collectives: &Spans,
    ) -> Result<Option<Self>, String> {
        let kernels = payload.view::<KernelsView>().map_err(|e| e.to_string())?;
        let calls = payload
            .view::<CollectivesView>()
            .map_err(|e| e.to_string())?;
        let ops = payload.view::<CpuOpsView>().map_err(|e| e.to_string())?;
        if kernels.is_none() && calls.is_none() && ops.is_none() {
            return Ok(None);
        }
        let header = &payload.header;
        let mut windows: BTreeMap<u32, TraceOf> = BTreeMap::new();
        if let Some(k) = &kernels {
            add_kernel_rows(&mut windows, k);
        }
        if let Some(c) = &calls {
            add_collective_rows(&mut windows, c);
        }
        if let Some(o) = &ops {
            add_cpu_op_rows(&mut windows, o);
        }
        let names = SharedNames::default();
        let Some(mut digest) = Self::of_windows(header, windows, &names) else {
            return Ok(None);
        };
        let windowed = kernels.is_some() || ops.is_some();
        digest.input = digest
            .input
            .filter(|_| windowed)
            .map(|input| KernelTraceInput {
                events: None,
                cut: None,
                parallel: header.parallel.clone(),
                ..input
            });
        if let (Some(k), Ok(Some(stages))) = (&kernels, payload.view::<StagesView>()) {
            digest.attribute_to_stages(k, &stages, &names);
        }
        digest.gpu = kernels
            .as_ref()
            .map_or_else(GpuAccount::default, |k| gpu_beside_host(k, collectives));
        let zero = timeline::aligned_start_ns(header);
        for call in &mut digest.collectives {
            let at = call.start_ns.saturating_sub(zero);
            call.steady = !perturbed
                .iter()
                .any(|&(from, to)| (from as i64..to as i64).contains(&at));
        }
        Ok(Some(digest))
    }

    /// The digests of a rank's windows merged into one; `None` where it
    /// has none.
    fn of_windows(
        header: &PayloadHeader,
        windows: BTreeMap<u32, TraceOf>,
        names: &SharedNames,
    ) -> Option<Self> {
        let rank = header.rank.rank;
        let source = format!("rank {rank}'s torch.profiler windows");
        let mut digests = windows.into_iter().map(|(window, mut of)| {
            of.trace.base_time_ns = Some(timeline::aligned_start_ns(header));
            // Every row: the rank kept a window's complete steps only.
            let all: Vec<usize> = (0..of.trace.gpu.name.len()).collect();
            RankKernels::digest((rank, window), source.clone(), &of.trace, &all, names)
        });
        let mut digest = digests.next()?;
        for window in digests {
            digest.absorb(window);
        }
        Some(digest)
    }

    /// Each GPU activity's time to the stage that launched it:
    /// `by_stage` and `kernel_stage`.
    fn attribute_to_stages(
        &mut self,
        kernels: &KernelsView,
        stages: &StagesView,
        names: &SharedNames,
    ) {
        let launches: Vec<Option<u64>> =
            (0..kernels.len).map(|i| kernels.launch_ns.get(i)).collect();
        let mut per_kernel: HashMap<&str, HashMap<&str, i64>> = HashMap::new();
        // By stage name first: each name is made a shared one once.
        let mut per_stage: HashMap<&str, (u64, i64)> = HashMap::new();
        for (i, stage) in launching_stages(stages, &launches).into_iter().enumerate() {
            let Some(stage) = stage.map(|row| stages.name.get(row)) else {
                continue;
            };
            let dur_ns = i64::try_from(kernels.dur_ns[i]).unwrap_or(i64::MAX);
            let totals = per_stage.entry(stage).or_default();
            totals.0 += 1;
            totals.1 = totals.1.saturating_add(dur_ns);
            let time = per_kernel
                .entry(kernels.name.get(i))
                .or_default()
                .entry(stage)
                .or_default();
            *time = time.saturating_add(dur_ns);
        }
        for (stage, (calls, ns)) in per_stage {
            let stage = names
                .get(stage)
                .unwrap_or_else(|| names.past_budget("stage"));
            let totals = self
                .by_stage
                .entry(stage)
                .or_insert((KernelCategory::Stage, 0, 0));
            totals.1 += calls;
            totals.2 = totals.2.saturating_add(ns);
        }
        for (kernel, stages) in per_kernel {
            if let Some((stage, _)) = stages.into_iter().max_by_key(|&(stage, ns)| (ns, stage)) {
                if let (Some(kernel), Some(stage)) = (names.get(kernel), names.get(stage)) {
                    self.kernel_stage.insert(kernel, stage);
                }
            }
        }
    }

    /// Adds another window of the same rank: its times to this one's,
    /// GPU by GPU (the gap between windows is no GPU's idle time).
    fn absorb(&mut self, other: RankKernels) {
        self.gpu.add(&other.gpu);
        if let (Some(mine), Some(theirs)) = (&mut self.input, other.input) {
            mine.gpu_activities += theirs.gpu_activities;
        }
        for (mine, theirs) in [
            (&mut self.kernels, other.kernels),
            (&mut self.ops, other.ops),
        ] {
            for (name, (category, calls, total_ns)) in theirs {
                let entry = mine.entry(name).or_insert((category, 0, 0));
                entry.1 = entry.1.saturating_add(calls);
                entry.2 = entry.2.saturating_add(total_ns);
            }
        }
        // Each window's calls in start order: they are matched window by window.
        self.collectives.extend(other.collectives);
        self.spans.extend(other.spans);
        for time in other.gpu_time {
            match self.gpu_time.iter_mut().find(|g| g.gpu == time.gpu) {
                Some(mine) => {
                    let both = GpuParts::of_time(mine).add(GpuParts::of_time(&time));
                    if let Some(sum) = both.time(mine.rank, mine.gpu) {
                        *mine = sum;
                    }
                }
                None => self.gpu_time.push(time),
            }
        }
    }
}

/// What the GPU activities of a payload's `kernels` did beside the host's
/// `collectives` (session clock), window by window.
fn gpu_beside_host(kernels: &KernelsView<'_>, collectives: &Spans) -> GpuAccount {
    let mut windows: BTreeMap<u32, Vec<(KernelCategory, i64, i64)>> = BTreeMap::new();
    for i in 0..kernels.len {
        let (Some(start), Some(dur)) = (as_ns(kernels.start_ns[i]), as_ns(kernels.dur_ns[i]))
        else {
            continue;
        };
        windows.entry(kernels.window[i]).or_default().push((
            KernelCategory::of(kernels.name.get(i)),
            start,
            start.saturating_add(dur),
        ));
    }
    let host: Vec<(i64, i64)> = collectives
        .spans()
        .filter_map(|(start, end)| Some((as_ns(start)?, as_ns(end)?)))
        .collect();
    let mut gpu = GpuAccount::default();
    for activities in windows.into_values() {
        gpu.add(&GpuAccount::of_window(
            activities.into_iter(),
            host.iter().copied(),
        ));
    }
    gpu
}

/// A trace being rebuilt from payload rows, with its names interned.
#[derive(Default)]
struct TraceOf {
    trace: RankTrace,
    ids: HashMap<String, u32>,
}

impl TraceOf {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.trace.names.len() as u32;
        self.trace.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }
}

/// One GPU's time in seconds, before its shares of the window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct GpuParts {
    window_s: f64,
    idle_s: f64,
    compute_s: f64,
    communication_s: f64,
    memory_s: f64,
    /// Communication during which compute ran.
    overlap_s: f64,
}

impl GpuParts {
    /// One GPU's time from its activities `rows` of `trace.gpu`.
    fn of_rows(trace: &RankTrace, rows: &[usize]) -> Self {
        let g = &trace.gpu;
        let merged_of = |category: Option<KernelCategory>| {
            merge(
                rows.iter()
                    .filter(|&&i| category.is_none_or(|c| g.category[i] == c))
                    .map(|&i| (g.start_ns[i], g.start_ns[i].saturating_add(g.dur_ns[i]))),
            )
        };
        let busy = merged_of(None);
        let compute = merged_of(Some(KernelCategory::Compute));
        let communication = merged_of(Some(KernelCategory::Communication));
        let window = match (busy.first(), busy.last()) {
            (Some(first), Some(last)) => last.1 - first.0,
            _ => 0,
        };
        let seconds = |ns: i64| ns as f64 / 1e9;
        GpuParts {
            window_s: seconds(window),
            idle_s: seconds(window - length(&busy)),
            compute_s: seconds(length(&compute)),
            communication_s: seconds(length(&communication)),
            memory_s: seconds(length(&merged_of(Some(KernelCategory::Memory)))),
            overlap_s: seconds(overlap(&communication, &compute)),
        }
    }

    /// The parts of a GPU time already worked out.
    fn of_time(time: &GpuTime) -> Self {
        GpuParts {
            window_s: time.window_s,
            idle_s: time.idle_s,
            compute_s: time.compute_s,
            communication_s: time.communication_s,
            memory_s: time.memory_s,
            overlap_s: time.comm_overlap_pct.unwrap_or(0.0) / 100.0 * time.communication_s,
        }
    }

    /// Two windows of one GPU as one (the gap between them is no idle time).
    fn add(self, other: Self) -> Self {
        GpuParts {
            window_s: self.window_s + other.window_s,
            idle_s: self.idle_s + other.idle_s,
            compute_s: self.compute_s + other.compute_s,
            communication_s: self.communication_s + other.communication_s,
            memory_s: self.memory_s + other.memory_s,
            overlap_s: self.overlap_s + other.overlap_s,
        }
    }

    /// The GPU time of rank `rank`'s GPU `gpu`, with its shares; `None`
    /// for a window of no length, which has no shares.
    fn time(self, rank: u32, gpu: Option<i64>) -> Option<GpuTime> {
        if self.window_s <= 0.0 {
            return None;
        }
        // The rest of the window; never below 0 from rounding (a window of
        // compute alone printed `-0.0` %).
        let non_compute_s = (self.window_s - self.compute_s - self.idle_s).max(0.0);
        let pct = |s: f64| s / self.window_s * 100.0;
        Some(GpuTime {
            rank,
            gpu,
            window_s: self.window_s,
            idle_s: self.idle_s,
            compute_s: self.compute_s,
            non_compute_s,
            communication_s: self.communication_s,
            memory_s: self.memory_s,
            idle_pct: pct(self.idle_s),
            compute_pct: pct(self.compute_s),
            non_compute_pct: pct(non_compute_s),
            comm_overlap_pct: (self.communication_s > 0.0)
                .then(|| self.overlap_s / self.communication_s * 100.0),
            waiting_s: None,
        })
    }
}

/// The report's kernel sections, from every rank's digest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelAnalysis {
    /// `gpu_time[]`.
    pub gpu_time: Vec<GpuTime>,
    /// `kernels[]`.
    pub kernels: Vec<KernelStats>,
    /// `cpu_ops[]`.
    pub cpu_ops: Vec<KernelStats>,
    /// `stage_kernels[]`.
    pub stage_kernels: Vec<KernelStats>,
    /// `kernel_stragglers[]`.
    pub kernel_stragglers: Vec<KernelStraggler>,
    /// `collectives[]`.
    pub collectives: Vec<CollectiveStats>,
    /// `kernel_traces[]`.
    pub kernel_traces: Vec<KernelTraceInput>,
    /// Per rank with a trace, what its time account reads of it.
    pub traced: Vec<TracedRank>,
}

impl KernelAnalysis {
    /// Puts `more` stragglers (Python functions') among the kernels' and
    /// operators', the largest excess first.
    pub fn with_stragglers(mut self, more: Vec<KernelStraggler>) -> Self {
        self.kernel_stragglers.extend(more);
        largest_excess_first(&mut self.kernel_stragglers);
        self
    }
}

/// Merges the digests of every rank's kernel trace.
pub fn analyze_kernels(mut ranks: Vec<RankKernels>, rule: StragglerRule) -> KernelAnalysis {
    ranks.sort_by_key(|r| r.rank);
    let (kernels, mut kernel_stragglers) = across_ranks(&ranks, |r| &r.kernels, rule);
    let (cpu_ops, op_stragglers) = across_ranks(&ranks, |r| &r.ops, rule);
    let (stage_kernels, _) = across_ranks(&ranks, |r| &r.by_stage, rule);
    kernel_stragglers.extend(op_stragglers);
    largest_excess_first(&mut kernel_stragglers);
    for straggler in &mut kernel_stragglers {
        let rank = ranks.iter().find(|r| r.rank == straggler.rank);
        if let Some(stage) = rank.and_then(|r| r.kernel_stage.get(straggler.kernel.as_str())) {
            straggler.stage = Some(stage.to_string());
            straggler
                .evidence
                .push(format!("launched inside stage `{stage}`"));
        }
    }
    let (collectives, waiting) = collectives(&ranks);
    let mut analysis = KernelAnalysis {
        kernels,
        cpu_ops,
        stage_kernels,
        kernel_stragglers,
        collectives,
        ..KernelAnalysis::default()
    };
    for rank in ranks {
        let waiting_s = waiting.in_windows.get(&rank.rank).copied();
        let calls = merge(
            rank.collectives
                .iter()
                .map(|c| (c.start_ns, c.start_ns.saturating_add(c.dur_ns))),
        );
        analysis.traced.push(TracedRank {
            rank: rank.rank,
            collective_s: length(&calls) as f64 / 1e9,
            wait_s: waiting.all.get(&rank.rank).copied().unwrap_or(0.0),
            gpu: rank.gpu,
        });
        analysis.gpu_time.extend(
            rank.gpu_time
                .into_iter()
                .map(|time| GpuTime { waiting_s, ..time }),
        );
        analysis.kernel_traces.extend(rank.input);
    }
    analysis
}

/// Sorts kernel stragglers by excess, the largest first, and keeps the
/// first [`KERNEL_STRAGGLERS_LISTED`].
fn largest_excess_first(stragglers: &mut Vec<KernelStraggler>) {
    stragglers.sort_by(|a, b| {
        b.excess_s
            .total_cmp(&a.excess_s)
            .then(a.kernel.cmp(&b.kernel))
    });
    stragglers.truncate(KERNEL_STRAGGLERS_LISTED);
}

/// One kernel name's launches and per-rank totals.
struct KernelAcross {
    category: KernelCategory,
    calls: u64,
    /// Seconds, by rank: every rank with GPU activity, 0 where it ran none.
    totals: BTreeMap<u32, f64>,
}

impl KernelAcross {
    fn new(category: KernelCategory, ranks: &[u32]) -> Self {
        KernelAcross {
            category,
            calls: 0,
            totals: ranks.iter().map(|&r| (r, 0.0)).collect(),
        }
    }

    fn stats(&self, name: String) -> KernelStats {
        let totals: Vec<(u32, f64)> = self.totals.iter().map(|(&r, &t)| (r, t)).collect();
        let least = totals.iter().min_by(|a, b| a.1.total_cmp(&b.1)).copied();
        let most = totals.iter().max_by(|a, b| a.1.total_cmp(&b.1)).copied();
        let mut sorted: Vec<f64> = totals.iter().map(|t| t.1).collect();
        sorted.sort_by(f64::total_cmp);
        let total_s: f64 = sorted.iter().sum();
        KernelStats {
            name,
            category: self.category.as_str().to_string(),
            calls: self.calls,
            total_s,
            min_s: least.map_or(0.0, |t| t.1),
            min_rank: least.map_or(0, |t| t.0),
            max_s: most.map_or(0.0, |t| t.1),
            max_rank: most.map_or(0, |t| t.0),
            avg_s: total_s / sorted.len().max(1) as f64,
            imbalance_pct: imbalance_pct(&sorted),
        }
    }
}

/// Names of the table `of` each rank across ranks (`kernels[]` or
/// `cpu_ops[]`), the largest total first (the top [`KERNELS_LISTED`], the
/// rest folded per category), and their stragglers.
fn across_ranks(
    ranks: &[RankKernels],
    of: fn(&RankKernels) -> &Totals,
    rule: StragglerRule,
) -> (Vec<KernelStats>, Vec<KernelStraggler>) {
    let with_gpu: Vec<u32> = ranks
        .iter()
        .filter(|r| !of(r).is_empty())
        .map(|r| r.rank)
        .collect();
    let mut by_name: HashMap<&str, KernelAcross> = HashMap::new();
    for rank in ranks {
        for (name, &(category, calls, total_ns)) in of(rank) {
            let across = by_name
                .entry(&**name)
                .or_insert_with(|| KernelAcross::new(category, &with_gpu));
            across.calls = across.calls.saturating_add(calls);
            across.totals.insert(rank.rank, total_ns as f64 / 1e9);
        }
    }
    let stragglers = name_stragglers(&by_name, rule);
    (listed_and_folded(by_name, &with_gpu), stragglers)
}

/// The ranks slow at each name of `by_name`, the largest excess first.
fn name_stragglers(
    by_name: &HashMap<&str, KernelAcross>,
    rule: StragglerRule,
) -> Vec<KernelStraggler> {
    let mut stragglers: Vec<KernelStraggler> = by_name
        .iter()
        .flat_map(|(name, across)| {
            let totals = across.totals.iter().map(|(&r, &t)| (r, t)).collect();
            rule.slow_ranks(totals)
                .into_iter()
                .map(|slow| KernelStraggler {
                    rank: slow.rank,
                    kernel: (*name).to_string(),
                    category: across.category.as_str().to_string(),
                    slowdown: slow.total / slow.median,
                    excess_s: slow.total - slow.median,
                    stage: None,
                    evidence: Vec::new(),
                })
        })
        .collect();
    largest_excess_first(&mut stragglers);
    stragglers
}

/// The statistics of the names of `by_name` with the largest totals (the
/// top [`KERNELS_LISTED`]), then a row per category for the rest folded;
/// `with_gpu` the ranks every row counts.
fn listed_and_folded(by_name: HashMap<&str, KernelAcross>, with_gpu: &[u32]) -> Vec<KernelStats> {
    let mut named: Vec<(&str, KernelAcross)> = by_name.into_iter().collect();
    named.sort_by(|a, b| {
        let total = |k: &KernelAcross| k.totals.values().sum::<f64>();
        total(&b.1).total_cmp(&total(&a.1)).then(a.0.cmp(b.0))
    });
    let rest = named.split_off(named.len().min(KERNELS_LISTED));
    let mut stats: Vec<KernelStats> = named
        .into_iter()
        .map(|(name, across)| across.stats(name.to_string()))
        .collect();
    let mut folded: BTreeMap<KernelCategory, (usize, KernelAcross)> = BTreeMap::new();
    for (_, across) in rest {
        let (count, fold) = folded
            .entry(across.category)
            .or_insert_with(|| (0, KernelAcross::new(across.category, with_gpu)));
        *count += 1;
        fold.calls = fold.calls.saturating_add(across.calls);
        for (rank, total) in across.totals {
            *fold.totals.entry(rank).or_default() += total;
        }
    }
    for (category, (count, fold)) in folded {
        let what = match category {
            KernelCategory::CpuOp => "CPU operators".to_string(),
            KernelCategory::Stage => "stages".to_string(),
            _ => format!("{} kernels", category.as_str()),
        };
        stats.push(fold.stats(format!("({count} other {what})")));
    }
    stats
}

/// Per rank, its wait in the compared collective calls: those that
/// started within its kernel trace's windows, and all, seconds.
#[derive(Default)]
struct Waiting {
    /// In the calls that started within the rank's traced windows.
    in_windows: BTreeMap<u32, f64>,
    /// In every call compared (a hash map: it takes every call of every
    /// rank).
    all: HashMap<u32, f64>,
}

/// A rank that arrives at a collective less than this before the last one
/// (nanoseconds) arrives with it: jitter, not a late arrival.
const ARRIVED_TOGETHER_NS: i64 = 50_000;
/// Calls whose every rank spent less than this in them (nanoseconds) are
/// launches, not waits (an asynchronous collective returns at once): their
/// arrivals are not compared.
const LAUNCH_NS: i64 = 100_000;

/// `collectives[]`: per rank, kind and group, the time in the calls and
/// how much of it was waiting for the last rank to arrive. Within each
/// window, the k-th call of a kind and group on each rank are taken as one
/// collective. Also each rank's wait, within its traced windows and in all.
fn collectives(ranks: &[RankKernels]) -> (Vec<CollectiveStats>, Waiting) {
    type Key<'a> = (&'a str, Option<&'a str>);
    // Per kind and group: per window, per rank, its calls in start order.
    let mut calls: BTreeMap<Key, BTreeMap<u32, BTreeMap<u32, Vec<&CollectiveCall>>>> =
        BTreeMap::new();
    for rank in ranks {
        for call in &rank.collectives {
            calls
                .entry((&call.kind, call.group.as_deref()))
                .or_default()
                .entry(call.window)
                .or_default()
                .entry(rank.rank)
                .or_default()
                .push(call);
        }
    }
    let traced: BTreeMap<u32, &[(i64, i64)]> =
        ranks.iter().map(|r| (r.rank, r.spans.as_slice())).collect();
    let mut stats = Vec::new();
    let mut waiting = Waiting::default();
    for ((kind, group), windows) in calls {
        let mut rows: BTreeMap<u32, CollectiveStats> = BTreeMap::new();
        for by_rank in windows.values() {
            for (&rank, calls) in by_rank {
                let row = rows.entry(rank).or_insert_with(|| CollectiveStats {
                    rank,
                    kind: kind.to_string(),
                    group: group.map(str::to_string),
                    calls: 0,
                    total_s: 0.0,
                    compared: 0,
                    wait_s: None,
                    own_s: None,
                    steady_compared: 0,
                    last_to_arrive: None,
                    wait_imposed_s: None,
                    delay_imposed_s: None,
                    bytes: Some(0),
                });
                row.calls += calls.len() as u64;
                row.total_s += calls.iter().map(|c| c.dur_ns as f64).sum::<f64>() / 1e9;
                row.bytes = calls.iter().fold(row.bytes, |sum, c| {
                    sum.zip(c.bytes)
                        .map(|(sum, bytes)| sum.saturating_add(bytes))
                });
            }
            compare_arrivals(by_rank, &mut rows, |rank, at, wait| {
                let inside = traced
                    .get(&rank)
                    .is_some_and(|spans| spans.iter().any(|s| (s.0..s.1).contains(&at)));
                if inside {
                    *waiting.in_windows.entry(rank).or_default() += wait;
                }
                *waiting.all.entry(rank).or_default() += wait;
            });
        }
        stats.extend(rows.into_values());
    }
    stats.sort_by_key(|s| s.rank);
    (stats, waiting)
}

/// Matches the k-th calls of one window across its ranks (`by_rank`, two
/// or more): each rank's wait for the last to arrive (its time in the call
/// past the least any rank spent in it: they leave together) and the
/// collective's own time (that least), and, over the calls steady on every
/// rank, which rank arrived last, the wait it imposed and how much later
/// the call ended for it; added to `rows`. Each rank's wait in each call is
/// also handed to `waited` (rank, the call's start, seconds).
fn compare_arrivals(
    by_rank: &BTreeMap<u32, Vec<&CollectiveCall>>,
    rows: &mut BTreeMap<u32, CollectiveStats>,
    mut waited: impl FnMut(u32, i64, f64),
) {
    let matched = match by_rank.len() {
        0 | 1 => 0,
        _ => by_rank.values().map(Vec::len).min().unwrap_or(0),
    };
    for k in 0..matched {
        // The two shortest calls: the last to arrive, the next to last.
        let mut shortest = [(i64::MAX, u32::MAX); 2];
        let mut longest = 0;
        for (&rank, calls) in by_rank {
            let dur = calls[k].dur_ns.max(0);
            longest = longest.max(dur);
            if (dur, rank) < shortest[0] {
                shortest = [(dur, rank), shortest[0]];
            } else if (dur, rank) < shortest[1] {
                shortest[1] = (dur, rank);
            }
        }
        let [(least, last_rank), (next, _)] = shortest;
        let steady = by_rank.values().all(|calls| calls[k].steady);
        // Launches of asynchronous calls say nothing of arrivals.
        let compared = longest >= LAUNCH_NS;
        let mut imposed = 0.0;
        for (&rank, calls) in by_rank {
            let wait = if compared {
                (calls[k].dur_ns.max(0) - least) as f64 / 1e9
            } else {
                0.0
            };
            imposed += wait;
            waited(rank, calls[k].start_ns, wait);
            if let Some(row) = rows.get_mut(&rank) {
                row.compared += 1;
                *row.wait_s.get_or_insert(0.0) += if steady { wait } else { 0.0 };
                *row.own_s.get_or_insert(0.0) += least as f64 / 1e9;
                row.steady_compared += u64::from(steady);
                row.last_to_arrive.get_or_insert(0);
                row.wait_imposed_s.get_or_insert(0.0);
                row.delay_imposed_s.get_or_insert(0.0);
            }
        }
        // All arriving together (within jitter), none was last.
        if steady && compared && next - least >= ARRIVED_TOGETHER_NS {
            if let Some(row) = rows.get_mut(&last_rank) {
                *row.last_to_arrive.get_or_insert(0) += 1;
                *row.wait_imposed_s.get_or_insert(0.0) += imposed;
                *row.delay_imposed_s.get_or_insert(0.0) += (next - least) as f64 / 1e9;
            }
        }
    }
}

/// Joins each kernel straggler to what the report already says of its
/// rank: its stage stragglers (the stage that launched the kernel first)
/// and their evidence.
pub fn attribute_kernels(kernel_stragglers: &mut [KernelStraggler], stragglers: &[Straggler]) {
    for kernel in kernel_stragglers {
        let mut stages: Vec<&Straggler> = stragglers
            .iter()
            .filter(|s| s.rank == kernel.rank)
            .collect();
        stages.sort_by_key(|s| Some(&s.stage) != kernel.stage.as_ref());
        for stage in stages {
            kernel.evidence.push(format!(
                "rank {} is {:.0}% slower in stage `{}`",
                stage.rank,
                (stage.slowdown - 1.0) * 100.0,
                stage.stage
            ));
            kernel.evidence.extend(stage.evidence.iter().cloned());
        }
        kernel.evidence.dedup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::kineto::{read_trace_from, TraceLimits};
    use std::path::Path;

    fn trace(json: &str) -> RankTrace {
        read_trace_from(json.as_bytes(), Path::new("t"), &TraceLimits::default()).unwrap()
    }

    /// A GPU activity on stream 7: `name`, from `ts` for `dur` µs.
    fn kernel(name: &str, ts: u32, dur: u32, correlation: u32) -> String {
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "ts": {ts}, "dur": {dur},
                "args": {{"stream": 7, "correlation": {correlation}, "device": 0}}}}"#
        )
    }

    #[test]
    fn temporal_breakdown_and_overlap_by_hand() {
        // compute 0–10 and 5–20 (merged 0–20), NCCL 15–40, a copy 50–60:
        // window 0–60, busy 0–40 and 50–60 (50), idle 10; compute 20;
        // non-compute 30; communication 25, 5 of it under compute.
        let events = [
            kernel("gemm", 0, 10, 1),
            kernel("gemm", 5, 15, 2),
            kernel("ncclDevKernel_AllReduce_Sum_f32", 15, 25, 3),
            kernel("Memcpy DtoD", 50, 10, 4),
        ]
        .join(",");
        let trace = trace(&format!(r#"{{"traceEvents": [{events}]}}"#));
        let names = SharedNames::default();
        let digest = RankKernels::digest((3, 1), "t".into(), &trace, &[0, 1, 2, 3], &names);
        let [time] = digest.gpu_time.as_slice() else {
            panic!("{:?}", digest.gpu_time)
        };
        assert_eq!((time.rank, time.gpu), (3, Some(0)));
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(time.window_s, 60e-6));
        assert!(close(time.idle_s, 10e-6));
        assert!(close(time.compute_s, 20e-6));
        assert!(close(time.non_compute_s, 30e-6));
        assert!(close(time.communication_s, 25e-6));
        assert!(close(time.memory_s, 10e-6));
        assert!(close(time.comm_overlap_pct.unwrap(), 20.0));
        assert!(close(
            time.idle_pct + time.compute_pct + time.non_compute_pct,
            100.0
        ));
        assert_eq!(digest.kernels["gemm"], (KernelCategory::Compute, 2, 25_000));
    }

    #[test]
    fn a_window_of_compute_alone_has_no_negative_non_compute_time() {
        // An H200 window's figures: the difference rounds to -4e-19 s.
        let parts = GpuParts {
            window_s: 0.06666787,
            idle_s: 0.000873473,
            compute_s: 0.065794397,
            communication_s: 0.0,
            memory_s: 0.0,
            overlap_s: 0.0,
        };
        let time = parts.time(0, Some(0)).unwrap();
        assert_eq!(time.non_compute_s, 0.0);
        assert!(time.non_compute_pct.is_sign_positive());
    }

    #[test]
    fn the_last_profiler_step_is_left_out_as_hta_does() {
        let events = [
            r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100}"#.to_string(),
            r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 100, "dur": 100}"#.to_string(),
            r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 10, "dur": 1, "args": {"correlation": 1}}"#.to_string(),
            r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 1, "args": {"correlation": 2}}"#.to_string(),
            kernel("early", 20, 10, 1),
            kernel("late", 120, 10, 2),
        ]
        .join(",");
        let trace = trace(&format!(r#"{{"traceEvents": [{events}]}}"#));
        let kept = trace.analysed_activities();
        let digest =
            RankKernels::digest((0, 1), "t".into(), &trace, &kept, &SharedNames::default());
        assert!(digest.kernels.contains_key("early"));
        assert!(!digest.kernels.contains_key("late"));
    }

    fn rank_with(rank: u32, kernels: &[(&str, i64)]) -> RankKernels {
        RankKernels {
            rank,
            input: None,
            gpu_time: Vec::new(),
            kernels: kernels
                .iter()
                .map(|&(name, ns)| (Arc::from(name), (KernelCategory::of(name), 1, ns)))
                .collect(),
            ops: HashMap::new(),
            by_stage: HashMap::new(),
            kernel_stage: HashMap::new(),
            collectives: Vec::new(),
            spans: Vec::new(),
            gpu: GpuAccount::default(),
        }
    }

    #[test]
    fn a_kernel_slower_on_one_rank_is_its_straggler() {
        let rule = StragglerRule {
            threshold_pct: 10.0,
            min_excess_s: 0.0,
        };
        let ranks = (0..4)
            .map(|r| {
                let conv = if r == 2 { 1_380_000_000 } else { 1_000_000_000 };
                rank_with(r, &[("conv2d", conv), ("gemm", 500_000_000)])
            })
            .collect();
        let analysis = analyze_kernels(ranks, rule);
        let [straggler] = analysis.kernel_stragglers.as_slice() else {
            panic!("{:?}", analysis.kernel_stragglers)
        };
        assert_eq!((straggler.rank, straggler.kernel.as_str()), (2, "conv2d"));
        assert!((straggler.slowdown - 1.38).abs() < 1e-9);
        let conv = &analysis.kernels[0];
        assert_eq!(
            (conv.name.as_str(), conv.max_rank, conv.calls),
            ("conv2d", 2, 4)
        );
        assert!((conv.imbalance_pct - 38.0).abs() < 1e-9);
        assert!((conv.total_s - 4.38).abs() < 1e-9);
    }

    #[test]
    fn kernels_past_the_listed_are_folded_per_category() {
        let names: Vec<String> = (0..KERNELS_LISTED + 5)
            .map(|i| format!("k{i:03}"))
            .collect();
        let kernels: Vec<(&str, i64)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), 1_000 * (1 + i as i64)))
            .collect();
        let rule = StragglerRule {
            threshold_pct: 10.0,
            min_excess_s: 0.0,
        };
        let analysis = analyze_kernels(vec![rank_with(0, &kernels)], rule);
        assert_eq!(analysis.kernels.len(), KERNELS_LISTED + 1);
        let folded = analysis.kernels.last().unwrap();
        assert_eq!(folded.name, "(5 other compute kernels)");
        assert_eq!(folded.calls, 5);
    }

    fn call(window: u32, start_ns: i64, dur_ns: i64) -> CollectiveCall {
        CollectiveCall {
            window,
            kind: "all_reduce".into(),
            group: Some("0".into()),
            bytes: Some(8),
            start_ns,
            dur_ns,
            steady: true,
        }
    }

    const RULE: StragglerRule = StragglerRule {
        threshold_pct: 10.0,
        min_excess_s: 0.0,
    };

    #[test]
    fn a_late_rank_is_blamed_for_the_others_wait() {
        let mut ranks: Vec<RankKernels> = (0..3).map(|r| rank_with(r, &[])).collect();
        // Ranks 0 and 1 arrive at 0 and wait for rank 2, which arrives at
        // 900 µs; all leave at 1 ms.
        ranks[0].collectives = vec![call(1, 0, 1_000_000)];
        ranks[1].collectives = vec![call(1, 0, 1_000_000)];
        ranks[2].collectives = vec![call(1, 900_000, 100_000)];
        let stats = analyze_kernels(ranks, RULE).collectives;
        assert_eq!(stats.len(), 3);
        let waits: Vec<Option<f64>> = stats.iter().map(|s| s.wait_s).collect();
        assert_eq!(waits, vec![Some(900e-6), Some(900e-6), Some(0.0)]);
        assert_eq!(stats[2].last_to_arrive, Some(1));
        assert!((stats[2].wait_imposed_s.unwrap() - 1800e-6).abs() < 1e-12);
        assert!((stats[2].delay_imposed_s.unwrap() - 900e-6).abs() < 1e-12);
        assert_eq!(stats[0].own_s, Some(100e-6), "the collective's own time");
        assert_eq!((stats[0].bytes, stats[0].compared), (Some(8), 1));
    }

    #[test]
    fn launches_and_arrivals_within_jitter_name_no_late_rank() {
        // Asynchronous calls: 20 µs launches, one a little longer.
        let mut ranks: Vec<RankKernels> = (0..2).map(|r| rank_with(r, &[])).collect();
        ranks[0].collectives = vec![call(1, 0, 20_000)];
        ranks[1].collectives = vec![call(1, 0, 80_000)];
        let stats = analyze_kernels(ranks, RULE).collectives;
        assert_eq!(
            (stats[0].wait_s, stats[0].last_to_arrive),
            (Some(0.0), Some(0))
        );
        // Synchronous, arriving 30 µs apart: together, within jitter.
        let mut ranks: Vec<RankKernels> = (0..2).map(|r| rank_with(r, &[])).collect();
        ranks[0].collectives = vec![call(1, 0, 1_000_000)];
        ranks[1].collectives = vec![call(1, 30_000, 970_000)];
        let stats = analyze_kernels(ranks, RULE).collectives;
        assert_eq!(stats[1].last_to_arrive, Some(0));
    }

    #[test]
    fn calls_are_matched_within_their_window() {
        // Rank 1 lost a call of window 1: window 2's calls still pair up
        // (rank 1 late by 500 µs), not shifted by one.
        let mut ranks: Vec<RankKernels> = (0..2).map(|r| rank_with(r, &[])).collect();
        ranks[0].collectives = vec![
            call(1, 0, 100_000),
            call(1, 1_000_000, 100_000),
            call(2, 5_000_000, 1_000_000),
        ];
        ranks[1].collectives = vec![call(1, 0, 100_000), call(2, 5_500_000, 500_000)];
        let stats = analyze_kernels(ranks, RULE).collectives;
        assert_eq!((stats[0].calls, stats[0].compared), (3, 2));
        assert_eq!(stats[0].wait_s, Some(500e-6));
        assert_eq!(stats[1].last_to_arrive, Some(1));
    }

    #[test]
    fn one_ranks_calls_compare_nothing_and_say_so() {
        let mut ranks = vec![rank_with(0, &[])];
        ranks[0].collectives = vec![call(1, 0, 100)];
        let stats = analyze_kernels(ranks, RULE).collectives;
        assert_eq!(
            (stats[0].compared, stats[0].wait_s, stats[0].last_to_arrive),
            (0, None, None)
        );
        assert_eq!(stats[0].wait_imposed_s, None);
    }

    #[test]
    fn hostile_times_and_sizes_saturate_instead_of_overflowing() {
        let mut ranks: Vec<RankKernels> = (0..2).map(|r| rank_with(r, &[])).collect();
        let huge = |start_ns| CollectiveCall {
            bytes: Some(u64::MAX / 2 + 1),
            ..call(1, start_ns, i64::MAX)
        };
        ranks[0].collectives = vec![huge(i64::MIN), huge(i64::MIN)];
        ranks[1].collectives = vec![
            CollectiveCall {
                dur_ns: i64::MIN,
                ..huge(i64::MAX)
            };
            2
        ];
        let stats = analyze_kernels(ranks, RULE).collectives;
        assert_eq!(stats[0].bytes, Some(u64::MAX));
        assert!(stats[0].total_s > 1e10 && stats[0].wait_s.unwrap() > 1e10);
        assert_eq!(stats[1].last_to_arrive, Some(2));
    }
}
