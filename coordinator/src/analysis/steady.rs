//! A rank's steady state. Of each stage call, its own work: the time it
//! spent in collective calls and in the profiler's own spans (stages named
//! [`PROFILER_STAGE_PREFIX`]) taken out. And the calls and the gaps between
//! top-level calls far outside the rank's steady time — warm-up, one-off
//! stalls, steps the profiler perturbed — found, so that ranks are compared
//! on their steady work and the one-off time is told apart, as events.
//!
//! Everything here reads one rank's tables alone: a rank is digested on its
//! own, and what the ranks' calls have in common (the least time of a
//! collective across ranks, which is no rank's wait) is added when the
//! calls are merged ([`super::calls`]).

use std::collections::BTreeMap;

use arrow_array::Array;
use rankscope_common::table::{StagesView, PROFILER_STAGE_PREFIX};
use serde::{Deserialize, Serialize};

use super::stats::median_of;

/// Words of a stage name that name a collective: where a rank records no
/// collective call within it, such a stage's time counts as one.
pub const COLLECTIVE_WORDS: &[&str] = &[
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "all_to_all",
    "alltoall",
    "broadcast",
    "barrier",
];

/// Whether a stage's `name` names a collective ([`COLLECTIVE_WORDS`]),
/// in any case.
pub fn names_a_collective(name: &str) -> bool {
    COLLECTIVE_WORDS.iter().any(|word| {
        name.as_bytes()
            .windows(word.len())
            .any(|part| part.eq_ignore_ascii_case(word.as_bytes()))
    })
}

/// Fewest calls of a name (or gaps) whose spread is judged: with fewer, no
/// call is told apart.
const MIN_JUDGED: usize = 4;
/// A one-off call's work is past the rank's median of the name by this
/// many robust spreads (1.4826 × the median absolute deviation)...
const SPREADS: f64 = 4.0;
/// ... and by this share of the median...
const SHARE_OF_MEDIAN: f64 = 0.5;
/// ... and by this much, nanoseconds (a millisecond).
const MIN_EXCESS_NS: f64 = 1e6;
/// More calls than this share past the rule (and more than
/// [`MOST_ONE_OFFS`]) are the rank's ordinary rhythm, not one-offs: then
/// only the first call, warm-up, is told apart.
const MOST_ONE_OFF_SHARE: f64 = 0.2;
/// One-off calls a rank's calls of a name may hold, whatever their number.
const MOST_ONE_OFFS: usize = 3;
/// One-off events kept per rank, the costliest.
pub const RANK_EVENTS: usize = 32;
/// An event costing less than this is not kept, seconds.
const MIN_EVENT_S: f64 = 1e-3;

/// What made a stretch of a rank's time one-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OneOffKind {
    /// The first call of a stage on the rank, far slower than the rest.
    Warmup,
    /// A later call, or a gap between top-level calls, far outside the
    /// rank's steady time.
    Stall,
    /// A step the profiler's own spans ran in or just before.
    Profiler,
}

impl OneOffKind {
    /// The kind's name in report.json.
    pub fn as_str(self) -> &'static str {
        match self {
            OneOffKind::Warmup => "warmup",
            OneOffKind::Stall => "stall",
            OneOffKind::Profiler => "profiler",
        }
    }
}

/// One one-off stretch of one rank: a top-level call (a step) holding
/// calls far outside the rank's steady time, or the gap before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankEvent {
    /// Its kind.
    pub kind: OneOffKind,
    /// The innermost stage told apart, or the profiler's span, where one
    /// is; `None` for a gap between top-level calls.
    pub stage: Option<String>,
    /// The top-level stage the stretch ran in or before.
    pub step_stage: String,
    /// That stage's call on the rank, from 0: the step.
    pub step: u64,
    /// When the stretch began, nanoseconds on the rank's session clock.
    pub start_ns: u64,
    /// The time it took past the rank's steady time, seconds.
    pub cost_s: f64,
    /// Of that, the profiler's own spans, seconds.
    pub profiler_s: f64,
}

/// The spans of a rank's time that are no stage's own work (its collective
/// calls, or the profiler's spans): their union, sorted by start, with
/// running sums (calls that overlap, on two threads say, count once).
#[derive(Debug, Default)]
pub struct Spans {
    /// Starts, ascending, nanoseconds.
    start: Vec<u64>,
    /// Ends, by start.
    end: Vec<u64>,
    /// `sum[i]`: the lengths of the first `i` spans summed.
    sum: Vec<u64>,
}

impl Spans {
    /// The union of the spans `(start, end)`, any order; a span ending
    /// before it starts is empty.
    pub fn new(spans: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let spans = super::intervals::merge(
            spans
                .into_iter()
                .map(|(start, end)| (start, end.max(start))),
        );
        let mut sum = Vec::with_capacity(spans.len() + 1);
        sum.push(0u64);
        for &(start, end) in &spans {
            sum.push(sum[sum.len() - 1].saturating_add(end - start));
        }
        Spans {
            start: spans.iter().map(|s| s.0).collect(),
            end: spans.iter().map(|s| s.1).collect(),
            sum,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.start.is_empty()
    }

    /// The stage rows of `stages` named for a collective
    /// ([`COLLECTIVE_WORDS`]) that hold none of these spans and lie in no
    /// other such row, added to these: a job that records no collective
    /// call (a Rust rank without `record_collective`) still has its waits
    /// in a stage named for the collective taken apart from work. `None`
    /// where there is none such (these spans stand).
    pub fn with_named_stages(
        &self,
        stages: &StagesView<'_>,
        enclosing: &[Option<usize>],
    ) -> Option<Spans> {
        let dictionary = stages.name.dictionary();
        let named_key: Vec<bool> = (0..dictionary.len())
            .map(|key| names_a_collective(dictionary.value(key)))
            .collect();
        if !named_key.contains(&true) {
            return None;
        }
        let named = |i: usize| named_key[stages.name.key(i)];
        let ancestor_named = |mut i: usize| {
            // Bounded: a damaged table's loop of parents ends here.
            for _ in 0..stages.len {
                match enclosing[i] {
                    Some(p) if named(p) => return true,
                    Some(p) => i = p,
                    None => return false,
                }
            }
            false
        };
        let inferred: Vec<(u64, u64)> = (0..stages.len)
            .filter(|&i| named(i))
            .filter(|&i| self.within(stages.start_ns[i], stages.end_ns[i]) == 0)
            .filter(|&i| !ancestor_named(i))
            .map(|i| (stages.start_ns[i], stages.end_ns[i]))
            .collect();
        (!inferred.is_empty()).then(|| Spans::new(self.spans().chain(inferred)))
    }

    /// The spans, by start.
    pub fn spans(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.start.iter().copied().zip(self.end.iter().copied())
    }

    /// The start of the first span starting at `at` or later.
    pub fn first_start_from(&self, at: u64) -> Option<u64> {
        self.start
            .get(self.start.partition_point(|&s| s < at))
            .copied()
    }

    /// The time of the spans that start within `[from, to)`, each up to
    /// `to` at most, nanoseconds.
    pub fn within(&self, from: u64, to: u64) -> u64 {
        let first = self.start.partition_point(|&s| s < from);
        let past = self.start.partition_point(|&s| s < to);
        if first >= past {
            return 0;
        }
        // Disjoint: only the last can run past `to`.
        let over = self.end[past - 1].saturating_sub(to);
        (self.sum[past] - self.sum[first]).saturating_sub(over)
    }
}

/// Which of `work` (one rank's calls of one name, or its gaps, in order)
/// are far outside the others, and, where any is, the median of those that
/// are not. Past
/// the median by [`SPREADS`] robust spreads, by [`SHARE_OF_MEDIAN`] of it
/// and by [`MIN_EXCESS_NS`]. Those after the first are the rank's rhythm,
/// not one-offs, where they come at even intervals (three or more) or are
/// more than [`MOST_ONE_OFFS`] and [`MOST_ONE_OFF_SHARE`] of the calls:
/// then only the first call (warm-up) is told apart. Fewer than
/// [`MIN_JUDGED`] are not judged.
pub fn one_offs(work: &[f64]) -> (Vec<bool>, Option<f64>) {
    let none = (vec![false; work.len()], None);
    // Every call within half again the least and a millisecond of it: none
    // can be past the rule (the common case, told without a median).
    let (least, most) = work
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &w| (lo.min(w), hi.max(w)));
    if work.len() < MIN_JUDGED
        || most <= (1.0 + SHARE_OF_MEDIAN) * least
        || most <= least + MIN_EXCESS_NS
    {
        return none;
    }
    let mut scratch = work.to_vec();
    let Some(mid) = median_of(&mut scratch) else {
        return none;
    };
    if most <= (1.0 + SHARE_OF_MEDIAN) * mid || most <= mid + MIN_EXCESS_NS {
        return none;
    }
    // Where more than half of the calls are at least `reach` from the
    // median, so is the median deviation, and the bar is at `most` or past
    // it: no call is past the bar (told by counting, without the
    // deviations' median).
    let reach = (most - mid) / (SPREADS * 1.4826);
    let far = work.iter().filter(|&&w| (w - mid).abs() >= reach).count();
    if far >= work.len() - (work.len() - 1) / 2 {
        return none;
    }
    for value in &mut scratch {
        *value = (*value - mid).abs();
    }
    let spread = 1.4826 * median_of(&mut scratch).unwrap_or(0.0);
    let bar = mid
        + (SPREADS * spread)
            .max(SHARE_OF_MEDIAN * mid)
            .max(MIN_EXCESS_NS);
    let mut flagged: Vec<bool> = work.iter().map(|&w| w > bar).collect();
    let later: Vec<usize> = (1..work.len()).filter(|&i| flagged[i]).collect();
    let even = later.len() >= 3 && later.windows(3).all(|w| w[1] - w[0] == w[2] - w[1]);
    let many =
        later.len() > MOST_ONE_OFFS && later.len() as f64 > MOST_ONE_OFF_SHARE * work.len() as f64;
    if even || many {
        for &i in &later {
            flagged[i] = false;
        }
    }
    if !flagged.iter().any(|&f| f) {
        return none;
    }
    scratch.clear();
    scratch.extend(
        work.iter()
            .zip(&flagged)
            .filter(|(_, &f)| !f)
            .map(|(&w, _)| w),
    );
    let steady = median_of(&mut scratch).unwrap_or(mid);
    (flagged, Some(steady))
}

/// Per row of a rank's stage table: what of its time is no work of its
/// own, and where it sits among the top-level calls.
#[derive(Debug)]
pub struct RowTimes {
    /// Time in collective calls within it, ns; empty where the rank has
    /// none ([`RowTimes::collective_ns`] reads it).
    collective_ns: Vec<u64>,
    /// Of that, the time in none of the stages directly inside it, ns;
    /// empty as `collective_ns`.
    self_collective_ns: Vec<u64>,
    /// Time in the profiler's own spans within it, ns; empty where the rank
    /// has none.
    profiler_ns: Vec<u64>,
    /// Whether it is one of the profiler's own spans.
    pub is_profiler: Vec<bool>,
    /// The profiler's own spans, by start.
    pub profiler_rows: Vec<usize>,
    /// The step it runs in (itself, for a step): see `steps`; `None` for
    /// a row outside every step (a stage around the loop of steps).
    pub step_of: Vec<Option<usize>>,
    /// Per row: whether it is a step the profiler perturbed (one holding
    /// profiler spans of a millisecond or more, or following them); false
    /// for other rows.
    pub perturbed: Vec<bool>,
    /// The rank's steps, in start order: the outermost calls of its busiest
    /// thread, or, where they are too few to judge (a stage around the whole
    /// loop), the calls one level in, and so on.
    pub steps: Vec<usize>,
    /// Per step: the gap before it (from the end of the one before; the
    /// first's from the session's start), ns, and the profiler's time
    /// within it.
    pub gaps: Vec<(u64, u64)>,
}

impl RowTimes {
    /// Row `i`'s time in collective calls, ns.
    pub fn collective_ns(&self, i: usize) -> u64 {
        self.collective_ns.get(i).copied().unwrap_or(0)
    }

    /// Row `i`'s time in collective calls in none of the stages directly
    /// inside it, ns.
    pub fn self_collective_ns(&self, i: usize) -> u64 {
        self.self_collective_ns.get(i).copied().unwrap_or(0)
    }

    /// Row `i`'s time in the profiler's own spans, ns.
    pub fn profiler_ns(&self, i: usize) -> u64 {
        self.profiler_ns.get(i).copied().unwrap_or(0)
    }

    /// The rows of `stages` (each row's enclosing row `enclosing`), with
    /// the rank's collective calls `collectives` on the same clock.
    pub fn new(stages: &StagesView<'_>, enclosing: &[Option<usize>], collectives: &Spans) -> Self {
        let n = stages.len;
        let dictionary = stages.name.dictionary();
        let profiler_key: Vec<bool> = (0..dictionary.len())
            .map(|key| dictionary.value(key).starts_with(PROFILER_STAGE_PREFIX))
            .collect();
        let is_profiler: Vec<bool> = (0..n).map(|i| profiler_key[stages.name.key(i)]).collect();
        let mut profiler_rows: Vec<usize> = (0..n).filter(|&i| is_profiler[i]).collect();
        profiler_rows.sort_by_key(|&i| stages.start_ns[i]);
        let profiler = Spans::new(
            profiler_rows
                .iter()
                .map(|&i| (stages.start_ns[i], stages.end_ns[i])),
        );
        let within = |spans: &Spans, i: usize| {
            if spans.is_empty() {
                0
            } else {
                spans.within(stages.start_ns[i], stages.end_ns[i].max(stages.start_ns[i]))
            }
        };
        // Most ranks record neither: nothing to keep, nothing to look up.
        let time_in = |spans: &Spans| match spans.is_empty() {
            true => Vec::new(),
            false => (0..n).map(|i| within(spans, i)).collect::<Vec<u64>>(),
        };
        let collective_ns = time_in(collectives);
        let profiler_ns = time_in(&profiler);
        let mut self_collective_ns = collective_ns.clone();
        if !collectives.is_empty() {
            for (i, parent) in enclosing.iter().enumerate() {
                if let Some(p) = *parent {
                    self_collective_ns[p] = self_collective_ns[p].saturating_sub(collective_ns[i]);
                }
            }
        }
        let read = |times: &[u64], i: usize| times.get(i).copied().unwrap_or(0);
        let steps = steps(stages, enclosing, &is_profiler);
        let step_of = steps_of(enclosing, &steps);
        let mut gaps = Vec::with_capacity(steps.len());
        let mut perturbed = vec![false; n];
        let mut previous_end: Option<u64> = None;
        for &row in &steps {
            let start = stages.start_ns[row];
            // The first step's gap runs from the session's start: the
            // profiler's spans there (set-up) perturb no step.
            let first = previous_end.is_none();
            let end = previous_end.unwrap_or(0);
            let gap = start.saturating_sub(end);
            let gap = (
                gap,
                if gap > 0 {
                    profiler.within(end, start)
                } else {
                    0
                },
            );
            perturbed[row] = !first && (read(&profiler_ns, row) + gap.1) as f64 >= MIN_EXCESS_NS;
            gaps.push(gap);
            previous_end =
                Some(previous_end.map_or(stages.end_ns[row], |e: u64| e.max(stages.end_ns[row])));
        }
        RowTimes {
            collective_ns,
            self_collective_ns,
            profiler_ns,
            is_profiler,
            profiler_rows,
            step_of,
            perturbed,
            steps,
            gaps,
        }
    }
}

/// Each row's nearest enclosing row among `steps` (itself, for a step);
/// `None` outside every step, and for a row in a loop of parents (a
/// damaged table).
fn steps_of(enclosing: &[Option<usize>], steps: &[usize]) -> Vec<Option<usize>> {
    let n = enclosing.len();
    let mut is_step = vec![false; n];
    for &s in steps {
        is_step[s] = true;
    }
    // Each row's step, as it is found: a row, NONE, or not yet UNKNOWN.
    const UNKNOWN: usize = usize::MAX;
    const NONE: usize = usize::MAX - 1;
    let mut known = vec![UNKNOWN; n];
    let mut path = Vec::new();
    for i in 0..n {
        path.clear();
        let mut j = i;
        let found = loop {
            if known[j] != UNKNOWN {
                break known[j];
            }
            if is_step[j] {
                break j;
            }
            match enclosing[j] {
                Some(p) if p < n && path.len() < n => {
                    path.push(j);
                    j = p;
                }
                _ => break NONE,
            }
        };
        known[j] = found;
        for &k in &path {
            known[k] = found;
        }
    }
    known
        .into_iter()
        .map(|step| (step != NONE).then_some(step))
        .collect()
}

/// The rank's steps: of the thread that spent the most time in its
/// outermost calls (the profiler's spans left out), those calls in start
/// order; where they are fewer than [`MIN_JUDGED`], the calls directly
/// inside them, and so on, as long as there are any.
fn steps(stages: &StagesView<'_>, enclosing: &[Option<usize>], is_profiler: &[bool]) -> Vec<usize> {
    let mut by_thread: BTreeMap<u32, (u64, Vec<usize>)> = BTreeMap::new();
    for i in 0..stages.len {
        if enclosing[i].is_none() && !is_profiler[i] {
            let entry = by_thread.entry(stages.thread[i]).or_default();
            entry.0 = entry
                .0
                .saturating_add(stages.end_ns[i].saturating_sub(stages.start_ns[i]));
            entry.1.push(i);
        }
    }
    let Some((_, (_, mut level))) = by_thread
        .into_iter()
        .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.0.cmp(&a.0)))
    else {
        return Vec::new();
    };
    let mut inside = vec![false; stages.len];
    // Bounded by the deepest nesting (a loop of parents: by the rows).
    for _ in 0..stages.len {
        if level.len() >= MIN_JUDGED {
            break;
        }
        inside.iter_mut().for_each(|f| *f = false);
        for &row in &level {
            inside[row] = true;
        }
        let next: Vec<usize> = (0..stages.len)
            .filter(|&i| !is_profiler[i] && enclosing[i].is_some_and(|p| inside[p]))
            .collect();
        if next.is_empty() {
            break;
        }
        level = next;
    }
    level.sort_by_key(|&i| stages.start_ns[i]);
    level
}

/// The one-off calls of one rank, found name by name, and the events
/// they make. Few calls are one-off: they are kept as a list.
#[derive(Debug, Default)]
pub struct OneOffs {
    /// The one-off calls' rows and their work past the steady work of
    /// their name, ns; by row once [`OneOffs::found`] is called.
    excess_ns: Vec<(usize, f64)>,
    /// The rows of each name's first call (past warm-up), by row once
    /// [`OneOffs::found`] is called.
    first: Vec<usize>,
}

impl OneOffs {
    /// Notes row `row` one-off, its work `excess_ns` past its name's steady
    /// work.
    pub fn note(&mut self, row: usize, excess_ns: f64) {
        self.excess_ns.push((row, excess_ns));
    }

    /// Notes row `row` the first call of its name.
    pub fn note_first(&mut self, row: usize) {
        self.first.push(row);
    }

    /// Puts what was noted in row order, to be looked up.
    pub fn found(&mut self) {
        self.excess_ns.sort_unstable_by_key(|&(row, _)| row);
        self.first.sort_unstable();
    }

    /// Row `row`'s excess, where it is one-off.
    fn excess_of(&self, row: usize) -> Option<f64> {
        let at = self
            .excess_ns
            .binary_search_by_key(&row, |&(r, _)| r)
            .ok()?;
        Some(self.excess_ns[at].1)
    }

    /// Per row, the excess of the one-off calls inside it that lie in no
    /// other one-off call, ns: for a row that is not one-off itself, what
    /// of its time is one-off (a stage around the loop of steps holds its
    /// steps' stalls).
    /// Empty where no call is one-off.
    pub fn excess_inside(&self, enclosing: &[Option<usize>]) -> Vec<f64> {
        let n = enclosing.len();
        let mut inside = Vec::new();
        let ancestors = |i: usize| {
            // Bounded: a damaged table's loop of parents ends here.
            std::iter::successors(enclosing[i], |&p| enclosing.get(p).copied().flatten()).take(n)
        };
        for &(i, excess) in &self.excess_ns {
            if excess <= 0.0 || ancestors(i).any(|p| self.excess_of(p).is_some()) {
                continue;
            }
            inside.resize(n, 0.0);
            for p in ancestors(i) {
                inside[p] += excess;
            }
        }
        inside
    }

    /// Each of the rank's steps (`rows.steps`, in order) with its one-off
    /// time: its one-off calls (the deepest, the largest excess) and the
    /// gap before it past the rank's steady gaps, and what made them
    /// one-off. `traced_from`: where the rank's torch.profiler windows
    /// begin (their first GPU activity, on the session clock); on a rank
    /// that recorded no span of the profiler's own (an agent before those
    /// spans), a one-off gap at most [`PROFILER_START_STEPS`] steps before
    /// a window begins is the profiler's start (CUPTI's start, at the
    /// schedule's warm-up), not a stall.
    pub fn steps(
        &self,
        stages: &StagesView<'_>,
        rows: &RowTimes,
        traced_from: &[u64],
    ) -> Vec<StepOneOff> {
        // Per top-level row: its deepest one-off row (the most excess on a
        // tie), the largest excess, whether the deepest is its name's first
        // call, and the deepest's excess.
        let mut within: BTreeMap<usize, (usize, f64, bool, f64)> = BTreeMap::new();
        for &(i, excess) in &self.excess_ns {
            if rows.is_profiler[i] {
                continue;
            }
            let Some(step) = rows.step_of[i] else {
                continue;
            };
            let first = self.first.binary_search(&i).is_ok();
            let entry = within.entry(step).or_insert((i, f64::MIN, first, f64::MIN));
            let depth = stages.depth[i];
            let deepest = stages.depth[entry.0];
            // The deepest (the most excess on a tie) names the stage, and
            // says whether the step's one-off time is warm-up: its first
            // call, not another stage's first call beside a stall.
            if depth > deepest || (depth == deepest && excess > entry.3) {
                (entry.0, entry.2, entry.3) = (i, first, excess);
            }
            entry.1 = entry.1.max(excess);
        }
        // The gaps after the first call, the profiler's time taken out.
        let (gap_flags, gap_steady) = one_offs(
            &rows
                .gaps
                .iter()
                .skip(1)
                .map(|&(gap, profiler)| gap.saturating_sub(profiler) as f64)
                .collect::<Vec<_>>(),
        );
        let no_spans = rows.profiler_rows.is_empty();
        let steps = &rows.steps;
        steps
            .iter()
            .enumerate()
            .map(|(k, &row)| {
                let (gap, gap_profiler) = rows.gaps[k];
                let gap_excess_ns = match gap_flags.get(k.wrapping_sub(1)) {
                    Some(true) if k > 0 => (gap.saturating_sub(gap_profiler) as f64
                        - gap_steady.unwrap_or(0.0))
                    .max(0.0),
                    _ => 0.0,
                };
                let starts_window = || {
                    let last = steps[(k + PROFILER_START_STEPS).min(steps.len() - 1)];
                    let (from, to) = (stages.start_ns[row], stages.end_ns[last]);
                    traced_from.iter().any(|&t| (from..to).contains(&t))
                };
                let cause = if rows.perturbed[row] {
                    StepCause::Profiler
                } else if no_spans && gap_excess_ns > 0.0 && starts_window() {
                    StepCause::ProfilerStart
                } else {
                    StepCause::Own
                };
                StepOneOff {
                    call: within
                        .get(&row)
                        .map(|&(deepest, excess, first, _)| (deepest, excess.max(0.0), first)),
                    gap_excess_ns,
                    profiler_ns: (gap_profiler + rows.profiler_ns(row)) as f64,
                    cause,
                }
            })
            .collect()
    }

    /// The events of one rank from its steps' one-off time (`steps`, of
    /// [`OneOffs::steps`]): per step, its one-off calls and the gap before
    /// it together, the costliest [`RANK_EVENTS`]; and the spans of the
    /// rank's time the one-offs perturbed, from each one's start to the
    /// first of the rank's `collectives` to start after it (the rank
    /// arrives there late, or early): collective calls starting within
    /// them are no steady arrival. A one-off costing less than
    /// [`PERTURBING_SHARE`] of a steady step perturbs nothing.
    pub fn events(
        &self,
        stages: &StagesView<'_>,
        rows: &RowTimes,
        collectives: &Spans,
        steps: &[StepOneOff],
    ) -> (Vec<RankEvent>, Vec<(u64, u64)>) {
        let name = |i: usize| stages.name.get(i);
        let mut step_ns: Vec<f64> = rows
            .steps
            .iter()
            .map(|&r| stages.end_ns[r].saturating_sub(stages.start_ns[r]) as f64)
            .collect();
        let perturbing_ns = PERTURBING_SHARE * median_of(&mut step_ns).unwrap_or(0.0);
        // Per top-level row, the span of its one-offs that perturb.
        let mut spans: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
        for &(i, excess) in &self.excess_ns {
            let Some(step) = rows.step_of[i].filter(|_| !rows.is_profiler[i]) else {
                continue;
            };
            if excess >= perturbing_ns {
                let (start, end) = (stages.start_ns[i], stages.end_ns[i]);
                let span = spans.entry(step).or_insert((start, end));
                *span = (span.0.min(start), span.1.max(end));
            }
        }
        let next_arrival = |at: u64| collectives.first_start_from(at).map_or(at, |s| s + 1);
        let mut step_of: BTreeMap<&str, u64> = BTreeMap::new();
        let mut events = Vec::new();
        let mut perturbed = Vec::new();
        for ((k, &row), one_off) in rows.steps.iter().enumerate().zip(steps) {
            let step_stage = name(row);
            let step = {
                let count = step_of.entry(step_stage).or_default();
                *count += 1;
                *count - 1
            };
            let (row_start, row_end) = (stages.start_ns[row], stages.end_ns[row]);
            let gap_start = row_start.saturating_sub(rows.gaps[k].0);
            let event = |kind, stage, cost_ns: f64, profiler_ns: f64, start_ns| RankEvent {
                kind,
                stage,
                step_stage: step_stage.to_string(),
                step,
                start_ns,
                cost_s: cost_ns / 1e9,
                profiler_s: profiler_ns / 1e9,
            };
            let profiler_ns = one_off.profiler_ns;
            let gap_excess = one_off.gap_excess_ns;
            if one_off.cause == StepCause::Profiler {
                // The profiler's step: its spans, and what the step lost.
                let excess = one_off.call.map_or(0.0, |c| c.1) + gap_excess;
                events.push(event(
                    OneOffKind::Profiler,
                    profiler_span_name(stages, rows, gap_start, row_end),
                    excess + profiler_ns,
                    profiler_ns,
                    gap_start,
                ));
                perturbed.push((gap_start, row_end));
                continue;
            }
            if profiler_ns > 0.0 {
                // Before the first step (or too short to perturb one): the
                // step's work is its own, but the ranks come to its first
                // collective as their set-up ends.
                if profiler_ns >= MIN_EXCESS_NS {
                    perturbed.push((gap_start, next_arrival(row_start)));
                }
                events.push(event(
                    OneOffKind::Profiler,
                    profiler_span_name(stages, rows, gap_start, row_end),
                    profiler_ns,
                    profiler_ns,
                    gap_start,
                ));
            }
            if gap_excess > 0.0 {
                let (kind, stage, profiler) = match one_off.cause {
                    StepCause::ProfilerStart => (
                        OneOffKind::Profiler,
                        Some(INFERRED_PROFILER_START.to_string()),
                        gap_excess,
                    ),
                    _ => (OneOffKind::Stall, None, 0.0),
                };
                events.push(event(kind, stage, gap_excess, profiler, gap_start));
                if gap_excess >= perturbing_ns {
                    perturbed.push((gap_start, next_arrival(row_start)));
                }
            }
            if let Some((deepest, excess, first)) = one_off.call {
                let kind = if first {
                    OneOffKind::Warmup
                } else {
                    OneOffKind::Stall
                };
                let stage = Some(name(deepest).to_string());
                events.push(event(kind, stage, excess, 0.0, row_start));
                if let Some(&(start, end)) = spans.get(&row) {
                    perturbed.push((start, next_arrival(end)));
                }
            }
        }
        events.retain(|e| e.cost_s >= MIN_EVENT_S);
        events.sort_by(|a, b| b.cost_s.total_cmp(&a.cost_s));
        events.truncate(RANK_EVENTS);
        (events, perturbed)
    }
}

/// Steps before a torch.profiler window's first traced step within which
/// a one-off gap, on a rank with no span of the profiler's own, is the
/// profiler's start: its schedule's warm-up step (usually one), and the
/// step the window's first activity may fall just after.
pub const PROFILER_START_STEPS: usize = 2;

/// What an event names as its stage where a gap is the profiler's start
/// inferred ([`StepCause::ProfilerStart`]).
pub const INFERRED_PROFILER_START: &str = "rankscope:profiler start (inferred)";

/// What made a step's one-off time one-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepCause {
    /// The rank's own: a warm-up or a stall.
    #[default]
    Own,
    /// The profiler's own spans ran in the step or the gap before it (a
    /// millisecond or more): all its one-off time is the profiler's.
    Profiler,
    /// A one-off gap just before a torch.profiler window, on a rank that
    /// recorded no span of the profiler's own: the gap's excess is the
    /// profiler's start; the step's calls are judged as the rank's own.
    ProfilerStart,
}

/// One step's one-off time on one rank ([`OneOffs::steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepOneOff {
    /// Its one-off calls, where it holds any: the deepest row (the most
    /// excess on a tie), the largest excess (ns, 0 or more: the step's
    /// one-off work), and whether one is its name's first call (warm-up).
    pub call: Option<(usize, f64, bool)>,
    /// The gap before it past the rank's steady gaps, its profiler's time
    /// taken out first, ns.
    pub gap_excess_ns: f64,
    /// The profiler's spans in the gap before it and in it, ns.
    pub profiler_ns: f64,
    /// What made its one-off time one-off.
    pub cause: StepCause,
}

/// A one-off of a rank's event perturbs its collective arrivals where it
/// costs this share of a steady step or more.
const PERTURBING_SHARE: f64 = 0.1;

/// The name of the first of the profiler's spans that starts within
/// `from..to` (a step and the gap before it).
fn profiler_span_name(
    stages: &StagesView<'_>,
    rows: &RowTimes,
    from: u64,
    to: u64,
) -> Option<String> {
    let spans = &rows.profiler_rows;
    let first = spans.partition_point(|&i| stages.start_ns[i] < from);
    spans
        .get(first)
        .filter(|&&i| stages.start_ns[i] < to)
        .map(|&i| stages.name.get(i).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_within_count_what_starts_inside_up_to_the_end() {
        let spans = Spans::new([(10, 20), (30, 50), (0, 5)]);
        assert_eq!(spans.within(0, 100), 5 + 10 + 20);
        assert_eq!(spans.within(10, 40), 10 + 10, "the second cut at 40");
        assert_eq!(spans.within(11, 40), 10, "the first starts before");
        assert_eq!(spans.within(60, 70), 0);
        assert_eq!(Spans::new([]).within(0, 10), 0);
        // Overlapping calls (two threads) count once; hostile lengths
        // saturate.
        let overlapping = Spans::new([(0, 100), (10, 20)]);
        assert_eq!(overlapping.within(0, 100), 100);
        let huge = Spans::new([(0, u64::MAX), (5, u64::MAX), (u64::MAX - 1, u64::MAX)]);
        assert_eq!(huge.within(0, 1_000), 1_000);
        assert_eq!(huge.within(0, u64::MAX), u64::MAX);
    }

    #[test]
    fn a_warm_up_and_a_stall_are_told_apart_and_a_rhythm_is_not() {
        let mut work = vec![10e6; 20];
        work[0] = 80e6;
        work[7] = 45e6;
        let (flags, steady) = one_offs(&work);
        assert_eq!(steady, Some(10e6));
        let found: Vec<usize> = (0..20).filter(|&i| flags[i]).collect();
        assert_eq!(found, [0, 7]);
        // Every fourth call heavier: the rank's rhythm; only the first
        // (warm-up) stays told apart.
        let rhythm: Vec<f64> = (0..20)
            .map(|i| if i % 4 == 0 { 40e6 } else { 10e6 })
            .collect();
        let (flags, _) = one_offs(&rhythm);
        assert_eq!(flags.iter().filter(|&&f| f).count(), 1);
        assert!(flags[0]);
        // Three stalls at uneven steps of twelve, beside warm-up: one-offs.
        let mut short = vec![10e6; 12];
        for i in [0, 3, 4, 9] {
            short[i] = 50e6;
        }
        let (flags, _) = one_offs(&short);
        assert_eq!(
            (0..12).filter(|&i| flags[i]).collect::<Vec<_>>(),
            [0, 3, 4, 9]
        );
        // A rank slow throughout is its steady state.
        let (flags, steady) = one_offs(&[30e6; 10]);
        assert!(flags.iter().all(|&f| !f));
        assert_eq!(steady, None, "no call stands in for another");
        // Ordinary noise is not: 10 % either way.
        let noisy: Vec<f64> = (0..40)
            .map(|i| 10e6 * (1.0 + 0.1 * ((i * 7 % 5) as f64 - 2.0) / 2.0))
            .collect();
        assert!(one_offs(&noisy).0.iter().all(|&f| !f));
    }

    #[test]
    fn each_row_finds_its_step_and_a_loop_of_parents_ends() {
        // 0 holds 1, which holds 2; 3 and 4 name each other.
        let enclosing = [None, Some(0), Some(1), Some(4), Some(3)];
        assert_eq!(
            steps_of(&enclosing, &[1]),
            [None, Some(1), Some(1), None, None]
        );
        assert_eq!(
            steps_of(&enclosing, &[0]),
            [Some(0), Some(0), Some(0), None, None]
        );
    }
}
