//! Stage durations regrouped from the ranks' stage tables: per stage name,
//! per rank, every call in start order, the self time (nested stages
//! excluded) and the enclosing stage. The stage and straggler analyses both
//! read this.

use std::collections::{BTreeMap, HashMap};

use arrow_array::{Array, StringArray};
use serde::{Deserialize, Serialize};

use rankscope_common::table::{MetricsView, StagesView, STAGE_GPU_SECTION};

use super::account::rank::{AccountRows, Covered};
use super::account::RankAccount;
use super::calls::{self, CallAcross, CallSeconds};
use super::sketch::CallQuantiles;
use super::stats::median_of;
use super::steady::{one_offs, OneOffs, RankEvent, RowTimes, Spans};

/// A stage that ran inside no other: start and end (ns on the rank's
/// clock) and its name.
pub type OuterStage<'a> = (u64, u64, &'a str);

/// Every stage's calls across the ranks merged so far, by name: what the
/// stage, straggler and lockstep analyses read. Its size is set by the
/// stages and their calls, plus a few numbers per rank and stage; two
/// merged are what one merge of all their ranks would be
/// ([`StageTimes::merge`]).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct StageTimes {
    /// name → the stage across ranks.
    pub by_name: BTreeMap<String, StageAcross>,
    /// name → enclosing name (`None`: the top) → calls.
    pub(super) parent_counts: BTreeMap<String, BTreeMap<Option<String>, u64>>,
    /// name → rank → GPU time in seconds, for the ranks that measured it.
    pub gpu_by_name: BTreeMap<String, BTreeMap<u32, f64>>,
}

/// One stage across the ranks that ran it.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct StageAcross {
    /// rank → its calls' count, total and self time.
    pub ranks: BTreeMap<u32, RankCalls>,
    /// Per call index, the slowest ranks and the sum over ranks.
    pub by_call: Vec<CallAcross>,
    /// Every call's duration, for the percentiles.
    pub quantiles: CallQuantiles,
}

/// One rank's calls of one stage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankCalls {
    /// Calls past warm-up.
    pub calls: u64,
    /// Their summed duration, seconds.
    pub total_s: f64,
    /// Their summed self time (nested stages excluded), seconds.
    pub self_s: f64,
    /// Where their work is not their whole time (collective calls or the
    /// profiler's spans in them, one-off calls), what it is; `None` for
    /// the common case, kept small in memory and on the wire.
    pub steady: Option<Box<SteadyCalls>>,
}

/// What of a rank's calls of one stage is steady work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SteadyCalls {
    /// Their summed time in collective calls, seconds.
    pub collective_s: f64,
    /// Their summed steady work: each call's duration less its time in
    /// collective calls and in the profiler's spans, a one-off call's
    /// (see the analysis's `steady`) counted at the rank's steady work of
    /// the stage, seconds. The collectives' own time is added across
    /// ranks ([`StageAcross::work_by_rank`]).
    pub steady_s: f64,
    /// The same of their self time, seconds.
    pub self_steady_s: f64,
    /// Calls told apart as one-off (counted at their steady work).
    pub one_offs: u64,
}

impl RankCalls {
    /// Their summed time in collective calls, seconds.
    pub fn collective_s(&self) -> f64 {
        self.steady.as_ref().map_or(0.0, |s| s.collective_s)
    }

    /// Their summed steady work, seconds ([`SteadyCalls::steady_s`]).
    pub fn steady_s(&self) -> f64 {
        self.steady.as_ref().map_or(self.total_s, |s| s.steady_s)
    }

    /// Their summed steady self work, seconds.
    pub fn self_steady_s(&self) -> f64 {
        self.steady
            .as_ref()
            .map_or(self.self_s, |s| s.self_steady_s)
    }

    /// Calls told apart as one-off.
    pub fn one_offs(&self) -> u64 {
        self.steady.as_ref().map_or(0, |s| s.one_offs)
    }
}

/// One rank's time in one stage, its waits taken out: what ranks are
/// compared on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankWork {
    /// The rank.
    pub rank: u32,
    /// Its steady work, the collectives' own time included, seconds.
    pub work_s: f64,
    /// Its wait in collective calls (its time in them past the least
    /// any rank spent in the same calls), seconds; `None` where no rank of
    /// the stage recorded a collective call in it.
    pub wait_s: Option<f64>,
    /// Its steady self work (the collectives in nested stages theirs),
    /// seconds.
    pub self_work_s: f64,
}

impl StageAcross {
    /// Whether the stage's parts fit together as adding and merging leave
    /// them, else what does not: ranks that `holds` accepts, each with a
    /// call at least and finite times; per call index as many ranks as
    /// made that many calls, each call whole ([`CallAcross::is_whole`]);
    /// the distribution of every call ([`CallQuantiles::is_whole`]).
    pub fn is_whole(&self, holds: impl Fn(u32) -> bool) -> Result<(), String> {
        let finite = |s: f64| s.is_finite() && s >= 0.0;
        if let Some((rank, _)) = self.ranks.iter().find(|(&rank, c)| {
            !holds(rank)
                || c.calls == 0
                || c.one_offs() > c.calls
                || ![
                    c.total_s,
                    c.self_s,
                    c.collective_s(),
                    c.steady_s(),
                    c.self_steady_s(),
                ]
                .into_iter()
                .all(finite)
        }) {
            return Err(format!("its rank {rank}"));
        }
        let mut calls: Vec<u64> = self.ranks.values().map(|c| c.calls).collect();
        calls.sort_unstable();
        if calls.last().copied().unwrap_or(0) != self.by_call.len() as u64 {
            return Err("its calls by index".into());
        }
        // The stage's ranks, in order: a few comparisons per slowest rank
        // of each call (a map's lookups were a fifth of rank 0's merge).
        let ranks: Vec<u32> = self.ranks.keys().copied().collect();
        let of_stage = |rank: u32| ranks.binary_search(&rank).is_ok();
        for (k, call) in self.by_call.iter().enumerate() {
            let made = calls.len() - calls.partition_point(|&c| c <= k as u64);
            if call.ranks() as usize != made || !call.is_whole(of_stage) {
                return Err(format!("its call {k}"));
            }
        }
        let total = calls.iter().fold(0u64, |sum, &c| sum.saturating_add(c));
        if !self.quantiles.is_whole(total) {
            return Err("its calls' distribution".into());
        }
        Ok(())
    }

    /// Each rank's total, seconds, by rank.
    pub fn totals(&self) -> Vec<(u32, f64)> {
        self.ranks.iter().map(|(&r, c)| (r, c.total_s)).collect()
    }

    /// Each rank's work and wait, by rank: its steady work and the
    /// collectives' own time in the calls it made (the least any rank
    /// spent in collective calls within each), and its time in collective
    /// calls past that.
    pub fn work_by_rank(&self) -> Vec<RankWork> {
        // own[k]: the collectives' own time in the first k calls.
        let mut own = Vec::with_capacity(self.by_call.len() + 1);
        own.push(0.0f64);
        for call in &self.by_call {
            own.push(own[own.len() - 1] + f64::from(call.least_collective()));
        }
        let measured = self.ranks.values().any(|c| c.collective_s() > 0.0);
        self.ranks
            .iter()
            .map(|(&rank, c)| {
                let k = usize::try_from(c.calls).map_or(own.len() - 1, |k| k.min(own.len() - 1));
                RankWork {
                    rank,
                    work_s: c.steady_s() + own[k],
                    wait_s: measured.then(|| (c.collective_s() - own[k]).max(0.0)),
                    self_work_s: c.self_steady_s(),
                }
            })
            .collect()
    }

    /// How many calls every rank made (the calls compared call by call).
    pub fn calls_on_every_rank(&self) -> usize {
        let ranks = self.ranks.len() as u32;
        self.by_call.partition_point(|call| call.ranks() >= ranks)
    }

    /// Adds the calls of `rank`.
    pub fn add(&mut self, rank: u32, calls: NameCalls<'_>) {
        if calls.collective.is_empty() && calls.work.is_empty() {
            // The common case: each call's work is its duration, and no
            // collective call was recorded in them.
            let plain = calls.durations.iter().map(|&d| (d, CallSeconds::INFINITY));
            calls::add_rank(&mut self.by_call, rank, plain);
        } else {
            calls::add_rank(&mut self.by_call, rank, calls.per_call());
        }
        self.quantiles.add(calls.durations);
        self.ranks.insert(rank, calls.totals);
    }

    /// Adds the ranks of `other` (none of them already here).
    pub fn merge(&mut self, other: StageAcross) {
        self.ranks.extend(other.ranks);
        calls::merge(&mut self.by_call, &other.by_call);
        self.quantiles.merge(other.quantiles);
    }
}

/// One rank's calls of one stage name, past warm-up, in start order, as
/// [`StageAcross::add`] takes them.
#[derive(Debug)]
pub struct NameCalls<'c> {
    /// Each call's duration, seconds.
    durations: &'c [CallSeconds],
    /// The calls that spent time in collective calls: (index, seconds);
    /// empty where the rank recorded none in these calls.
    collective: &'c [(u32, CallSeconds)],
    /// The calls whose steady work is not their duration less their time
    /// in collective calls: (index, seconds).
    work: &'c [(u32, CallSeconds)],
    /// The calls summed.
    totals: RankCalls,
}

impl<'c> NameCalls<'c> {
    /// Calls of these durations, with nothing nested, no collective call
    /// and none one-off.
    #[cfg(test)]
    pub fn plain(durations: &'c [CallSeconds]) -> Self {
        let total_s = StageTimes::total(durations);
        NameCalls {
            totals: RankCalls {
                calls: durations.len() as u64,
                total_s,
                self_s: total_s,
                steady: None,
            },
            durations,
            collective: &[],
            work: &[],
        }
    }

    /// Each call's steady work and time in collective calls (infinite
    /// where the rank recorded no collective call in these calls, which
    /// says nothing of the least time in them).
    fn per_call(&self) -> impl Iterator<Item = (CallSeconds, CallSeconds)> + '_ {
        let recorded = !self.collective.is_empty();
        let mut collective = self.collective.iter().peekable();
        let mut work = self.work.iter().peekable();
        self.durations.iter().enumerate().map(move |(k, &d)| {
            let listed = |call: &&(u32, CallSeconds)| call.0 as usize == k;
            let c = collective.next_if(listed).map_or(0.0, |call| call.1);
            let w = work
                .next_if(listed)
                .map_or_else(|| derived_work(d, c), |call| call.1);
            (w, if recorded { c } else { CallSeconds::INFINITY })
        })
    }
}

/// A call's steady work where nothing else is known of it: its duration
/// `d` less its time in collective calls `c`, seconds.
fn derived_work(d: CallSeconds, c: CallSeconds) -> CallSeconds {
    (d - c).max(0.0)
}

/// Every stage name's calls of one rank, name after name, in columns: one
/// allocation each per rank, not one per name, as a rank's calls are held
/// until the run is chosen.
#[derive(Debug, Default)]
struct CallColumns {
    /// Each call's duration, seconds.
    durations: Vec<CallSeconds>,
    /// [`NameCalls::collective`], name after name.
    collective: Vec<(u32, CallSeconds)>,
    /// [`NameCalls::work`], name after name.
    work: Vec<(u32, CallSeconds)>,
    /// The steady figures of the names whose work is not their whole time.
    steady: Vec<SteadyCalls>,
}

/// Where each column of one stage name's calls ends in a [`CallColumns`]
/// (it starts where the previous name's ends).
#[derive(Debug, Clone, Copy, Default)]
struct ColumnEnds {
    durations: u32,
    collective: u32,
    work: u32,
}

impl CallColumns {
    /// Where each column ends now.
    fn ends(&self) -> ColumnEnds {
        let at = |len: usize| len as u32;
        ColumnEnds {
            durations: at(self.durations.len()),
            collective: at(self.collective.len()),
            work: at(self.work.len()),
        }
    }

    /// The calls between `from` and `to`, of `totals`.
    fn calls(&self, from: ColumnEnds, to: ColumnEnds, totals: RankCalls) -> NameCalls<'_> {
        let range = |a: u32, b: u32| a as usize..b as usize;
        NameCalls {
            durations: &self.durations[range(from.durations, to.durations)],
            collective: &self.collective[range(from.collective, to.collective)],
            work: &self.work[range(from.work, to.work)],
            totals,
        }
    }

    fn shrink_to_fit(&mut self) {
        self.durations.shrink_to_fit();
        self.collective.shrink_to_fit();
        self.work.shrink_to_fit();
        self.steady.shrink_to_fit();
    }
}

/// One stage name's calls in a [`RankStages`]: where its columns end, and
/// their totals.
#[derive(Debug)]
struct NameCallsAt {
    /// The name's position in the rank's names.
    name: u32,
    /// Where its calls end in the rank's [`CallColumns`].
    ends: ColumnEnds,
    /// Its steady figures' position in [`CallColumns::steady`], where its
    /// work is not its whole time.
    steady: Option<u32>,
    /// [`RankCalls::calls`].
    calls: u64,
    /// [`RankCalls::total_s`].
    total_s: f64,
    /// [`RankCalls::self_s`].
    self_s: f64,
}

/// What [`StageTimes`] keeps of one rank's stage table: per stage name its
/// calls, and where its calls ran; and the rank's one-off events.
#[derive(Debug, Default)]
pub struct RankStages {
    /// The stage names the rank's calls and their enclosing stages have,
    /// each once; the fields below refer to them by position.
    names: Vec<String>,
    /// Per stage name: where its calls are in `columns`.
    calls: Vec<NameCallsAt>,
    /// Every name's calls.
    columns: CallColumns,
    /// (name, enclosing name or `None` for the top, calls).
    parents: Vec<(u32, Option<u32>, u64)>,
    /// Per stage name: GPU time in seconds summed over the calls the rank
    /// timed on the GPU (metrics of section [`STAGE_GPU_SECTION`]).
    gpu_s: BTreeMap<String, f64>,
}

/// What a rank's stage table says of its steady state, beside its stage
/// calls: its one-off events, the spans of its time they perturbed, and the
/// profiler's own time.
#[derive(Debug, Default)]
pub struct RankSteadiness {
    /// Its one-off events, the costliest first.
    pub events: Vec<RankEvent>,
    /// The spans of the rank's time its one-offs perturbed, on its session
    /// clock, ns: collective calls starting in them are no steady arrival.
    pub perturbed: Vec<(u64, u64)>,
    /// Time in the profiler's own spans, seconds.
    pub profiler_s: f64,
    /// Its time, split once.
    pub account: RankAccount,
}

/// What a rank's stage table is read with, beside the table.
#[derive(Debug, Clone, Copy)]
pub struct Reading<'a> {
    /// The first calls of each stage name left out as warm-up.
    pub warmup_calls: u32,
    /// The rank's collective calls, on the table's clock.
    pub collectives: &'a Spans,
    /// The span its account covers.
    pub covered: Covered,
    /// Where its torch.profiler windows begin, on the table's clock.
    pub traced_from: &'a [u64],
}

impl<'a> Reading<'a> {
    /// A table read with `warmup_calls` and `collectives` alone: its
    /// account covers the table's own span, no window is traced.
    pub fn of_table(warmup_calls: u32, collectives: &'a Spans) -> Self {
        Reading {
            warmup_calls,
            collectives,
            covered: Covered {
                from_ns: 0,
                wall_ns: 0,
            },
            traced_from: &[],
        }
    }
}

impl RankStages {
    /// Groups one rank's stage table as `reading` says (the first
    /// `warmup_calls` calls of each stage name left out, the rank's
    /// collective calls beside); also returns the stages that ran inside
    /// no other in the table (warm-up calls included), in table order, and
    /// the rank's steady state and account.
    pub fn new<'a>(
        stages: &StagesView<'a>,
        reading: Reading<'_>,
    ) -> (Self, Vec<OuterStage<'a>>, RankSteadiness) {
        let warmup_calls = reading.warmup_calls;
        let collectives = reading.collectives;
        let enclosing = enclosing_rows(stages);
        let nested_ns = nested_ns(stages, &enclosing);
        let named = collectives.with_named_stages(stages, &enclosing);
        let collectives = named.as_ref().unwrap_or(collectives);
        let rows = RowTimes::new(stages, &enclosing, collectives);
        let dictionary = stages.name.dictionary();
        let canonical = canonical_keys(dictionary);
        let name_key = |i: usize| canonical[stages.name.key(i)];
        let (mut by_name, group_ends) = group_by_key(stages.len, canonical.len(), name_key);
        let mut names = Names::new(dictionary);
        let mut judged = Vec::new();
        let mut parents = Vec::new();
        let mut placed = Vec::new();
        let mut one_offs = OneOffs::default();
        let times = CallTimes {
            stages,
            nested_ns: &nested_ns,
            rows: &rows,
        };
        let mut work = Vec::new();
        let mut group_start = 0;
        for (key, &group_end) in group_ends.iter().enumerate() {
            let group = &mut by_name[group_start..group_end];
            let warm = (warmup_calls as usize).min(group.len());
            let at = group_start + warm;
            group_start = group_end;
            let kept = past_warmup(stages, group, warmup_calls);
            if kept.is_empty() || rows.is_profiler[kept[0]] {
                continue;
            }
            if warmup_calls == 0 {
                one_offs.note_first(kept[0]);
            }
            let name = names.of(key);
            // Where the calls past warm-up ran: the enclosing row's name
            // key + 1, 0 for the top; counted.
            placed.clear();
            placed.extend(
                kept.iter()
                    .map(|&i| enclosing[i].map_or(0, |p| name_key(p) + 1)),
            );
            placed.sort_unstable();
            for run in placed.chunk_by(|a, b| a == b) {
                let parent = run[0].checked_sub(1).map(|key| names.of(key));
                parents.push((name, parent, run.len() as u64));
            }
            judged.push((
                name,
                judge_calls(&times, kept, at, &mut work, &mut one_offs),
            ));
        }
        one_offs.found();
        // A call's one-off calls inside it, where it is none itself (a
        // stage around the loop of steps), leave its steady work too.
        let inside = one_offs.excess_inside(&enclosing);
        let mut columns = CallColumns::default();
        let mut calls: Vec<NameCallsAt> = judged
            .into_iter()
            .map(|(name, judged)| judged.calls(name, &times, &by_name, &inside, &mut columns))
            .collect();
        calls.shrink_to_fit();
        columns.shrink_to_fit();
        parents.shrink_to_fit();
        let steps = one_offs.steps(stages, &rows, reading.traced_from);
        let (events, perturbed) = one_offs.events(stages, &rows, collectives, &steps);
        let account = RankAccount::new(
            AccountRows {
                stages,
                enclosing: &enclosing,
                nested_ns: &nested_ns,
                rows: &rows,
                one_offs: &steps,
                name_key: &name_key,
                names: canonical.len(),
                collectives,
                perturbed: &perturbed,
            },
            reading.covered,
            warmup_calls,
        );
        let steadiness = RankSteadiness {
            events,
            perturbed,
            profiler_s: profiler_time(stages, &rows, &enclosing),
            account,
        };
        let rank_stages = RankStages {
            names: names.names,
            calls,
            columns,
            parents,
            gpu_s: BTreeMap::new(),
        };
        (rank_stages, outermost(stages, &enclosing), steadiness)
    }

    /// Adds the GPU times of stage calls among `metrics`.
    pub fn add_gpu_times(&mut self, metrics: &MetricsView<'_>) {
        for i in 0..metrics.len {
            let ms = metrics.value[i];
            if metrics.section.get(i) == STAGE_GPU_SECTION && ms.is_finite() && ms >= 0.0 {
                *self
                    .gpu_s
                    .entry(metrics.name.get(i).to_string())
                    .or_default() += ms / 1e3;
            }
        }
    }
}

/// The time in the profiler's own spans (those inside another counted
/// within it), seconds.
fn profiler_time(stages: &StagesView<'_>, rows: &RowTimes, enclosing: &[Option<usize>]) -> f64 {
    (0..stages.len)
        .filter(|&i| rows.is_profiler[i] && !enclosing[i].is_some_and(|p| rows.is_profiler[p]))
        .map(|i| duration_ns(stages, i))
        .fold(0u64, u64::saturating_add) as f64
        / 1e9
}

/// Row `i`'s duration in nanoseconds.
fn duration_ns(stages: &StagesView<'_>, i: usize) -> u64 {
    stages.end_ns[i].saturating_sub(stages.start_ns[i])
}

/// Per row: the summed durations of the rows directly inside it.
fn nested_ns(stages: &StagesView<'_>, enclosing: &[Option<usize>]) -> Vec<u64> {
    let mut nested_ns = vec![0u64; stages.len];
    for (i, parent) in enclosing.iter().enumerate() {
        if let Some(p) = *parent {
            nested_ns[p] = nested_ns[p].saturating_add(duration_ns(stages, i));
        }
    }
    nested_ns
}

/// One key per name: a dictionary can hold a name under several keys
/// (batches concatenated without merging their dictionaries), so each key
/// stands for the first key of its text.
fn canonical_keys(dictionary: &StringArray) -> Vec<usize> {
    let mut first_key: HashMap<&str, usize> = HashMap::new();
    (0..dictionary.len())
        .map(|key| *first_key.entry(dictionary.value(key)).or_insert(key))
        .collect()
}

/// The stage names of a rank, each dictionary key given its position in
/// `names` the first time it is needed.
struct Names<'d> {
    /// The stage table's name dictionary.
    dictionary: &'d StringArray,
    /// The names given a position, in that order.
    names: Vec<String>,
    /// Each dictionary key's position in `names`, once it has one.
    position: Vec<Option<u32>>,
}

impl<'d> Names<'d> {
    /// No names yet, of `dictionary`.
    fn new(dictionary: &'d StringArray) -> Self {
        Names {
            dictionary,
            names: Vec::new(),
            position: vec![None; dictionary.len()],
        }
    }

    /// The position of dictionary key `key`'s name, given one if it has none.
    fn of(&mut self, key: usize) -> u32 {
        *self.position[key].get_or_insert_with(|| {
            self.names.push(self.dictionary.value(key).to_string());
            (self.names.len() - 1) as u32
        })
    }
}

/// The rows of one stage name past its first `warmup_calls`, in start
/// order (rows are written as stages end, which is start order unless a
/// stage ran inside another of its name).
fn past_warmup<'g>(
    stages: &StagesView<'_>,
    group: &'g mut [usize],
    warmup_calls: u32,
) -> &'g [usize] {
    if !group.is_sorted_by_key(|&i| stages.start_ns[i]) {
        group.sort_by_key(|&i| stages.start_ns[i]);
    }
    group.get(warmup_calls as usize..).unwrap_or_default()
}

/// What of a rank's stage rows is work, read from its table and its
/// [`RowTimes`], row by row (nothing per call is kept apart).
struct CallTimes<'r, 's> {
    stages: &'r StagesView<'s>,
    nested_ns: &'r [u64],
    rows: &'r RowTimes,
}

impl CallTimes<'_, '_> {
    /// Row `i`'s duration, ns.
    fn duration(&self, i: usize) -> u64 {
        duration_ns(self.stages, i)
    }

    /// Row `i`'s self time (the stages directly inside left out), ns.
    fn self_ns(&self, i: usize) -> u64 {
        self.duration(i).saturating_sub(self.nested_ns[i])
    }

    /// Row `i`'s work: its duration less its time in collective calls and
    /// the profiler's spans, ns.
    fn work(&self, i: usize) -> f64 {
        self.duration(i)
            .saturating_sub(self.rows.collective_ns(i))
            .saturating_sub(self.rows.profiler_ns(i)) as f64
    }

    /// Row `i`'s self work: its self time less the collective calls in no
    /// stage inside it, ns.
    fn self_work(&self, i: usize) -> f64 {
        self.self_ns(i)
            .saturating_sub(self.rows.self_collective_ns(i)) as f64
    }
}

/// One name's calls past warm-up, judged: which are one-off, and the
/// steady work of the others.
struct Judged {
    /// Where the calls' rows are in the rank's rows grouped by name.
    kept: std::ops::Range<usize>,
    /// Whether each call is one-off; empty where none is.
    one_off: Vec<bool>,
    /// The median work and self work of the steady calls, ns, where some
    /// call is one-off (they stand in for it) and some is not.
    steady: Option<(f64, f64)>,
}

/// Judges the calls `kept` (of one name, in start order; at `at` in the
/// rank's rows grouped by name), noting the one-off ones' excess in
/// `found`; `work` is room for their work.
fn judge_calls(
    times: &CallTimes,
    kept: &[usize],
    at: usize,
    work: &mut Vec<f64>,
    found: &mut OneOffs,
) -> Judged {
    let rows = times.rows;
    work.clear();
    work.extend(kept.iter().map(|&i| times.work(i)));
    let (mut one_off, _) = one_offs(work);
    let mut any = false;
    for (flag, &i) in one_off.iter_mut().zip(kept) {
        *flag |= rows.step_of[i].is_some_and(|step| rows.perturbed[step]);
        any |= *flag;
    }
    let kept_at = at..at + kept.len();
    if !any {
        return Judged {
            kept: kept_at,
            one_off: Vec::new(),
            steady: None,
        };
    }
    // The steady calls' medians.
    let steady_of = |of: &dyn Fn(usize) -> f64| {
        let mut steady: Vec<f64> = kept
            .iter()
            .zip(&one_off)
            .filter(|(_, &f)| !f)
            .map(|(&i, _)| of(i))
            .collect();
        median_of(&mut steady)
    };
    let steady = steady_of(&|i| times.work(i)).zip(steady_of(&|i| times.self_work(i)));
    if let Some((typical, _)) = steady {
        for (k, &i) in kept.iter().enumerate() {
            if one_off[k] {
                found.note(i, work[k] - typical);
            }
        }
    }
    Judged {
        kept: kept_at,
        one_off,
        steady,
    }
}

impl Judged {
    /// The calls (rows `by_name[self.kept]`) of name `name` as
    /// [`StageTimes`] keeps them, added to `columns`: a one-off call at the
    /// steady work, every other less the one-off time inside it (`inside`,
    /// ns, by row).
    fn calls(
        self,
        name: u32,
        times: &CallTimes,
        by_name: &[usize],
        inside: &[f64],
        columns: &mut CallColumns,
    ) -> NameCallsAt {
        let kept = &by_name[self.kept];
        let rows = times.rows;
        let seconds = |ns: f64| ns / 1e9;
        let start = columns.durations.len();
        columns.durations.extend(
            kept.iter()
                .map(|&i| seconds(times.duration(i) as f64) as CallSeconds),
        );
        let durations = &columns.durations[start..];
        let total_s = StageTimes::total(durations);
        let self_s = kept
            .iter()
            .map(|&i| seconds(times.self_ns(i) as f64))
            .sum::<f64>()
            // Self time is summed from nanoseconds, the total from the
            // calls' single-precision seconds: never more than the total.
            .min(total_s);
        let plain = self.one_off.is_empty()
            && kept.iter().all(|&i| {
                rows.collective_ns(i) == 0
                    && rows.profiler_ns(i) == 0
                    && inside.get(i).is_none_or(|&e| e == 0.0)
            });
        let mut steady = None;
        if !plain {
            let mut sums = SteadyCalls::default();
            for (k, &i) in kept.iter().enumerate() {
                let one_off = self.one_off.get(k).copied().unwrap_or(false);
                let (work, self_work) = match (one_off, self.steady) {
                    (true, Some(typical)) => {
                        sums.one_offs += 1;
                        typical
                    }
                    _ => (
                        (times.work(i) - inside.get(i).copied().unwrap_or(0.0)).max(0.0),
                        times.self_work(i),
                    ),
                };
                let collective = seconds(rows.collective_ns(i) as f64);
                sums.collective_s += collective;
                sums.steady_s += seconds(work);
                sums.self_steady_s += seconds(self_work);
                let (d, c, w) = (
                    columns.durations[start + k],
                    collective as CallSeconds,
                    seconds(work) as CallSeconds,
                );
                if c > 0.0 {
                    columns.collective.push((k as u32, c));
                }
                // Single precision rounds the derived work: a microsecond
                // in a second is no difference.
                if (w - derived_work(d, c)).abs() > d * 1e-6 {
                    columns.work.push((k as u32, w));
                }
            }
            columns.steady.push(sums);
            steady = Some(columns.steady.len() as u32 - 1);
        }
        NameCallsAt {
            name,
            ends: columns.ends(),
            steady,
            calls: kept.len() as u64,
            total_s,
            self_s,
        }
    }
}

/// The stages that ran inside no other in the table, in table order.
fn outermost<'a>(stages: &StagesView<'a>, enclosing: &[Option<usize>]) -> Vec<OuterStage<'a>> {
    (0..stages.len)
        .filter(|&i| enclosing[i].is_none())
        .map(|i| (stages.start_ns[i], stages.end_ns[i], stages.name.get(i)))
        .collect()
}

/// The rows `0..rows` grouped by `key` (each below `keys`), keys ascending,
/// each group in row order (a counting sort); and where each key's group
/// ends.
fn group_by_key(
    rows: usize,
    keys: usize,
    key: impl Fn(usize) -> usize,
) -> (Vec<usize>, Vec<usize>) {
    let mut ends = vec![0usize; keys];
    for i in 0..rows {
        ends[key(i)] += 1;
    }
    let mut next = 0;
    for end in &mut ends {
        next += *end;
        *end = next;
    }
    // Filled from the back: each group's last row first.
    let mut grouped = vec![0usize; rows];
    let mut fill = ends.clone();
    for i in (0..rows).rev() {
        let at = &mut fill[key(i)];
        *at -= 1;
        grouped[*at] = i;
    }
    (grouped, ends)
}

/// Each row's enclosing row, where the table holds it (stage ids are
/// unique within a rank): a binary search over the rows sorted by id,
/// once per run of rows with the same parent (stages with nothing inside
/// them that run one after another in the same enclosing stage end one
/// after another, so their rows are adjacent).
fn enclosing_rows(stages: &StagesView<'_>) -> Vec<Option<usize>> {
    let mut by_id: Vec<(u64, usize)> = (0..stages.len).map(|i| (stages.stage_id[i], i)).collect();
    by_id.sort_unstable();
    let find = |parent: u64| {
        let at = by_id.binary_search_by_key(&parent, |&(id, _)| id).ok()?;
        Some(by_id[at].1)
    };
    let mut last: Option<(u64, Option<usize>)> = None;
    (0..stages.len)
        .map(|i| {
            let parent = stages.parent_id.get(i)?;
            match last {
                Some((id, row)) if id == parent => row,
                _ => {
                    let row = find(parent);
                    last = Some((parent, row));
                    row
                }
            }
        })
        .collect()
}

/// The value of `name` in `map`, made when missing: the name is copied
/// only then (once per stage name, not once per rank). Looked up again
/// after the insert, as the borrow checker asks.
fn entry_of<'m, V: Default>(map: &'m mut BTreeMap<String, V>, name: &str) -> &'m mut V {
    if !map.contains_key(name) {
        map.insert(name.to_string(), V::default());
    }
    map.get_mut(name).expect("inserted above")
}

impl StageTimes {
    /// Whether every stage's parts fit together ([`StageAcross::is_whole`])
    /// and hold only ranks `holds` accepts, else what does not.
    pub fn is_whole(&self, holds: impl Fn(u32) -> bool) -> Result<(), String> {
        for (name, stage) in &self.by_name {
            stage
                .is_whole(&holds)
                .map_err(|e| format!("stage {name:?}: {e}"))?;
        }
        for (name, ranks) in &self.gpu_by_name {
            if ranks
                .iter()
                .any(|(&rank, &s)| !holds(rank) || !s.is_finite() || s < 0.0)
            {
                return Err(format!("stage {name:?}: its GPU times"));
            }
        }
        Ok(())
    }

    /// Each rank's seconds in stages: its totals summed over the stages.
    pub fn busy_by_rank(&self) -> BTreeMap<u32, f64> {
        let mut busy: BTreeMap<u32, f64> = BTreeMap::new();
        for stage in self.by_name.values() {
            for (&rank, calls) in &stage.ranks {
                *busy.entry(rank).or_default() += calls.total_s;
            }
        }
        busy
    }

    /// Adds the stages of `rank`.
    pub fn add(&mut self, rank: u32, stages: RankStages) {
        let name = |at: u32| stages.names[at as usize].as_str();
        let columns = &stages.columns;
        let mut from = ColumnEnds::default();
        for at in stages.calls {
            let totals = RankCalls {
                calls: at.calls,
                total_s: at.total_s,
                self_s: at.self_s,
                steady: at.steady.map(|k| Box::new(columns.steady[k as usize])),
            };
            let calls = columns.calls(from, at.ends, totals);
            entry_of(&mut self.by_name, name(at.name)).add(rank, calls);
            from = at.ends;
        }
        for (name, gpu_s) in stages.gpu_s {
            self.gpu_by_name
                .entry(name)
                .or_default()
                .insert(rank, gpu_s);
        }
        for (at, parent, calls) in stages.parents.iter().copied() {
            *entry_of(&mut self.parent_counts, name(at))
                .entry(parent.map(|at| name(at).to_string()))
                .or_default() += calls;
        }
    }

    /// Adds the ranks of `other` (none of them already here).
    pub fn merge(&mut self, other: StageTimes) {
        for (name, stage) in other.by_name {
            match self.by_name.get_mut(&name) {
                Some(mine) => mine.merge(stage),
                None => {
                    self.by_name.insert(name, stage);
                }
            }
        }
        for (name, ranks) in other.gpu_by_name {
            self.gpu_by_name.entry(name).or_default().extend(ranks);
        }
        for (name, parents) in other.parent_counts {
            let mine = self.parent_counts.entry(name).or_default();
            for (parent, calls) in parents {
                let count = mine.entry(parent).or_default();
                *count = count.saturating_add(calls);
            }
        }
    }

    /// The stage times of calls given as name → rank → durations, none
    /// nested (self time is all of their time).
    #[cfg(test)]
    pub fn from_calls(calls: BTreeMap<String, BTreeMap<u32, Vec<CallSeconds>>>) -> Self {
        let mut times = StageTimes::default();
        for (name, by_rank) in calls {
            let stage = times.by_name.entry(name).or_default();
            for (rank, durations) in by_rank {
                stage.add(rank, NameCalls::plain(&durations));
            }
        }
        times
    }

    /// The name of the stage that `name`'s calls run inside most often;
    /// `None` for a stage most often run at the top (on a tie, the top).
    pub fn parent(&self, name: &str) -> Option<&str> {
        let (parent, _) = self
            .parent_counts
            .get(name)?
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
        // A stage inside a call of its own name has no other parent.
        parent.as_deref().filter(|p| *p != name)
    }

    /// The sum of `calls`, seconds: four running sums, so that each
    /// addition need not wait for the one before.
    pub fn total(calls: &[CallSeconds]) -> f64 {
        let mut sums = [0.0f64; 4];
        let quads = calls.chunks_exact(4);
        let rest: f64 = quads.remainder().iter().map(|&s| f64::from(s)).sum();
        for quad in quads {
            for (sum, &s) in sums.iter_mut().zip(quad) {
                *sum += f64::from(s);
            }
        }
        sums.iter().sum::<f64>() + rest
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use rankscope_common::payload::PayloadHeader;
    use rankscope_common::table::{StageRow, StagesBuilder, Table};
    use rankscope_common::Payload;

    /// The stage times of `payloads`.
    fn times_of(payloads: &[Payload], warmup_calls: u32) -> StageTimes {
        let mut times = StageTimes::default();
        for payload in payloads {
            let view = payload.view::<StagesView>().unwrap().unwrap();
            times.add(
                payload.header.rank.rank,
                RankStages::new(&view, Reading::of_table(warmup_calls, &Spans::default())).0,
            );
        }
        times
    }

    /// The call durations of `name` where one rank ran it, in start order.
    fn only_rank_calls(times: &StageTimes, name: &str) -> Vec<CallSeconds> {
        let stage = &times.by_name[name];
        assert_eq!(stage.ranks.len(), 1);
        stage
            .by_call
            .iter()
            .map(|call| call.slowest()[0].0)
            .collect()
    }

    /// A rank whose stages are `(id, parent, name, start, end)` in seconds.
    pub(in crate::analysis) fn rank_with_stages(
        rank: u32,
        stages: &[(u64, Option<u64>, &str, f64, f64)],
    ) -> Payload {
        let mut builder = StagesBuilder::default();
        for &(stage_id, parent_id, name, start, end) in stages {
            builder.append(&StageRow {
                name: name.into(),
                thread: 0,
                thread_name: "main".into(),
                stage_id,
                parent_id,
                depth: u32::from(parent_id.is_some()),
                start_ns: (start * 1e9) as u64,
                end_ns: (end * 1e9) as u64,
                call_index: 0,
                metadata: None,
            });
        }
        let mut header = PayloadHeader::new("s", "n", rank, 1);
        header.clock.duration_ns = stages.iter().map(|s| (s.4 * 1e9) as u64).max().unwrap_or(0);
        let mut payload = Payload {
            header,
            tables: Default::default(),
        };
        payload
            .tables
            .insert(Table::Stages, builder.finish().unwrap());
        payload
    }

    #[test]
    fn self_time_leaves_out_the_stages_directly_inside() {
        // step 0–10 s holds denoise 1–6 (which holds attention 2–4) and
        // decode 6–9; a second attention at the top, 10–11.
        let payload = rank_with_stages(
            0,
            &[
                (1, None, "step", 0.0, 10.0),
                (2, Some(1), "denoise", 1.0, 6.0),
                (3, Some(2), "attention", 2.0, 4.0),
                (4, Some(1), "decode", 6.0, 9.0),
                (5, None, "attention", 10.0, 11.0),
                (6, Some(5), "attention", 10.2, 10.4),
            ],
        );
        let times = times_of(&[payload], 0);
        let self_s = |name: &str| times.by_name[name].ranks[&0].self_s;
        assert!((self_s("step") - 2.0).abs() < 1e-9, "10 − 5 − 3");
        assert!((self_s("denoise") - 3.0).abs() < 1e-9, "5 − 2");
        assert!((self_s("decode") - 3.0).abs() < 1e-9);
        assert!(
            (self_s("attention") - 3.0).abs() < 1e-9,
            "2 + (1 − 0.2) + 0.2"
        );
        assert_eq!(only_rank_calls(&times, "attention"), [2.0, 1.0, 0.2]);
        assert_eq!(times.parent("denoise"), Some("step"));
        assert_eq!(times.parent("decode"), Some("step"));
        // attention: inside denoise once, at the top once, inside itself
        // once: a tie between denoise and the top goes to the top.
        assert_eq!(times.parent("attention"), None);
        assert_eq!(times.parent("step"), None);
    }

    #[test]
    fn warm_up_calls_are_left_out_of_every_statistic() {
        // The first step compiles (5 s), the next two run (1 s each), with
        // a 0.5 s decode inside the second.
        let payload = rank_with_stages(
            0,
            &[
                (1, None, "step", 0.0, 5.0),
                (2, None, "step", 5.0, 6.0),
                (3, Some(2), "decode", 5.0, 5.5),
                (4, None, "step", 6.0, 7.0),
            ],
        );
        let times = times_of(std::slice::from_ref(&payload), 1);
        assert_eq!(only_rank_calls(&times, "step"), [1.0, 1.0]);
        assert!((times.by_name["step"].ranks[&0].self_s - 1.5).abs() < 1e-9);
        // decode's one call is its warm-up: nothing of it is left.
        assert!(!times.by_name.contains_key("decode"));
        assert_eq!(times.parent("decode"), None, "nor where it ran");
        let none = times_of(&[payload], 0);
        assert_eq!(only_rank_calls(&none, "step"), [5.0, 1.0, 1.0]);
    }

    #[test]
    fn rows_grouped_by_key_keep_their_order_within_each_key() {
        // Keys of rows 0..6; key 1 has no row.
        let keys = [2, 0, 2, 3, 0, 2];
        let (grouped, ends) = group_by_key(keys.len(), 4, |i| keys[i]);
        assert_eq!(grouped, [1, 4, 0, 2, 5, 3]);
        assert_eq!(ends, [2, 2, 5, 6]);
    }

    #[test]
    fn flushes_merged_into_one_table_count_every_call_of_a_name() {
        // Two flushes of four calls each, their dictionaries ordering the
        // names differently: the merged table can hold each name under two
        // keys (Arrow concatenates small dictionaries without merging them).
        let flush = |first_id: u64, t0: f64, names: [&'static str; 2]| {
            let rows: Vec<(u64, Option<u64>, &str, f64, f64)> = (0..4u64)
                .map(|k| {
                    let start = t0 + k as f64;
                    (
                        first_id + k,
                        None,
                        names[k as usize % 2],
                        start,
                        start + 0.5,
                    )
                })
                .collect();
            rank_with_stages(0, &rows)
        };
        let first = flush(1, 0.0, ["decode", "step"]);
        let second = flush(5, 4.0, ["step", "decode"]);
        let merged = Payload::concat([first, second], usize::MAX)
            .unwrap()
            .unwrap();
        let times = times_of(&[merged], 1);
        // Four calls of each name, the first one warm-up (once, not once per key).
        assert_eq!(times.by_name["decode"].ranks[&0].calls, 3);
        assert_eq!(times.by_name["step"].ranks[&0].calls, 3);
    }

    #[test]
    fn a_parent_missing_from_the_table_leaves_the_stage_at_the_top() {
        // The enclosing stage was still open at the flush: not in the table.
        let payload = rank_with_stages(0, &[(7, Some(99), "decode", 0.0, 1.0)]);
        let times = times_of(&[payload], 0);
        assert_eq!(times.parent("decode"), None);
        assert!((times.by_name["decode"].ranks[&0].self_s - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_one_off_on_a_rank_without_collectives_leaves_their_time_to_the_others() {
        // Rank 0 spends 0.1 s of each 1 s call of `attention` in an
        // all_gather; rank 1 records no collective, and its third call is
        // a one-off. No rank waited: the all_gather's own time is 0.1 s.
        let mut rank_0 = Vec::new();
        let mut rank_1 = Vec::new();
        for k in 0..8u64 {
            let start = k as f64 * 2.0;
            rank_0.push((2 * k + 1, None, "attention", start, start + 1.0));
            rank_0.push((
                2 * k + 2,
                Some(2 * k + 1),
                "all_gather",
                start + 0.9,
                start + 1.0,
            ));
            let long = if k == 2 { 1.0 } else { 0.0 };
            rank_1.push((k + 1, None, "attention", start, start + 1.0 + long));
        }
        let times = times_of(
            &[rank_with_stages(0, &rank_0), rank_with_stages(1, &rank_1)],
            0,
        );
        let attention = &times.by_name["attention"];
        assert_eq!(
            attention.ranks[&1].one_offs(),
            1,
            "{:?}",
            attention.ranks[&1]
        );
        let work = attention.work_by_rank();
        let wait_0 = work[0].wait_s.expect("rank 0 recorded its collective");
        assert!(wait_0.abs() < 1e-6, "rank 0 waited no time: {work:?}");
    }
}
