//! One rank's time, split once: read from its stage table as it is
//! digested, on its own. Its session (or window) from the start to the
//! first step is set-up, from the last step's end to the end teardown; the
//! profiler's own spans are the profiler's wherever they are; each step's
//! time is its time in collective calls, else steady work, by stage (the
//! one-off excess of a warm-up or a stall taken out of the stage it is in);
//! a gap between steps is a stall past the rank's steady gaps, the
//! stage's that holds both steps, else untracked. What of the collective
//! time is transfer and what is waiting needs the other ranks: each step's
//! collective time travels on, to be set beside theirs ([`super::steps`]).

use serde::{Deserialize, Serialize};

use arrow_array::StringArray;
use rankscope_common::table::StagesView;

use super::super::stats::median_of;
use super::super::steady::{RowTimes, Spans, StepCause, StepOneOff};
use super::steps::StepTime;

/// Stages a rank's work is listed by, the most work first, per list; the
/// rest is one entry named [`OTHER_STAGES`].
pub const WORK_STAGES: usize = 6;
/// The entry that holds the work of the stages past [`WORK_STAGES`].
pub const OTHER_STAGES: &str = "(other stages)";
/// The longest span an account of a digest read from elsewhere may
/// cover, seconds (a century).
const MOST_WALL_S: f64 = 3.2e9;
/// Runs of steps with collective time kept one by one; past them, the
/// last run reaches the last step.
const COLLECTIVE_RUNS: usize = 64;

/// One rank's account, its collective time not yet split into transfer
/// and wait. Seconds; the categories add up to `wall_s`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankAccount {
    /// The span accounted for: the rank's session, or its window.
    pub wall_s: f64,
    /// From the start to the first step.
    pub setup_s: f64,
    /// Warm-up calls' excess over the rank's steady calls.
    pub warmup_s: f64,
    /// The profiler's own spans, and what the steps it perturbed lost.
    pub profiler_s: f64,
    /// One-off stalls: calls and gaps far outside the steady ones.
    pub stall_s: f64,
    /// Steady work in the steps (their time in collective calls taken out).
    pub work_s: f64,
    /// The steps' time in collective calls.
    pub collective_s: f64,
    /// Between steps, in no stage.
    pub untracked_s: f64,
    /// From the last step's end to the end.
    pub teardown_s: f64,
    /// `work_s` by top-level stage, the most first ([`WORK_STAGES`]).
    pub work_top: Vec<(String, f64)>,
    /// `work_s` by innermost stage, the most first ([`WORK_STAGES`]).
    pub work_innermost: Vec<(String, f64)>,
    /// When the first step began, nanoseconds after the span's start.
    pub first_step_ns: Option<u64>,
    /// Per step stage name, the runs `first..past` (indices among that
    /// name's calls) of steps that spent time in collective calls.
    pub collective_steps: Vec<(String, Vec<(u32, u32)>)>,
    /// Per step stage name, each step's collective time: taken into the
    /// job's steps side by side ([`super::steps::StepsAcross`]), not
    /// carried further.
    #[serde(skip)]
    pub steps: Vec<(String, Vec<StepTime>)>,
}

/// What of a rank's stage table its account reads.
pub struct AccountRows<'r, 's> {
    /// The table.
    pub stages: &'r StagesView<'s>,
    /// Each row's enclosing row.
    pub enclosing: &'r [Option<usize>],
    /// Each row's stages directly inside, their durations summed, ns.
    pub nested_ns: &'r [u64],
    /// Each row's time in collective calls and the profiler's spans, and
    /// the rank's steps.
    pub rows: &'r RowTimes,
    /// Each step's one-off time.
    pub one_offs: &'r [StepOneOff],
    /// Each row's stage name as one key per name (a dictionary can hold a
    /// name under several keys), below `names`.
    pub name_key: &'r dyn Fn(usize) -> usize,
    /// How many keys there are.
    pub names: usize,
    /// The rank's collective calls, on the table's clock.
    pub collectives: &'r Spans,
    /// The spans of its time its one-offs perturbed (a collective call
    /// starting in one is no steady arrival).
    pub perturbed: &'r [(u64, u64)],
}

/// The span a rank's account covers, on its session clock, ns.
#[derive(Debug, Clone, Copy)]
pub struct Covered {
    /// Where it starts: 0 for a session, the window's start for a window.
    pub from_ns: u64,
    /// How long it is.
    pub wall_ns: u64,
}

/// Seconds of nanoseconds.
fn s(ns: f64) -> f64 {
    ns / 1e9
}

/// Every step's work by row (ns), while it is split: one run of
/// `(row, ns)` per step, the runs one after another.
struct Works {
    buckets: Vec<(usize, f64)>,
    /// Where each step's run ends.
    ends: Vec<usize>,
}

impl Works {
    /// Step `k`'s run.
    fn step(&mut self, k: usize) -> &mut [(usize, f64)] {
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        &mut self.buckets[start..self.ends[k]]
    }
}

/// The work of one step's run, ns.
fn total(run: &[(usize, f64)]) -> f64 {
    run.iter().map(|b| b.1).sum()
}

/// Takes up to `amount` ns out of one step's run, from row `first`'s work
/// first, then the largest; returns what it took.
fn take(run: &mut [(usize, f64)], amount: f64, first: usize) -> f64 {
    let mut left = amount.max(0.0);
    if let Some(b) = run.iter_mut().find(|b| b.0 == first) {
        let t = b.1.min(left);
        b.1 -= t;
        left -= t;
    }
    while left > 0.0 {
        let Some(b) = run
            .iter_mut()
            .filter(|b| b.1 > 0.0)
            .max_by(|a, b| a.1.total_cmp(&b.1))
        else {
            break;
        };
        let t = b.1.min(left);
        b.1 -= t;
        left -= t;
    }
    amount.max(0.0) - left
}

/// A rank's work by stage name (ns), by the name's key.
struct ByName<'d> {
    /// By top-level stage.
    top: Vec<f64>,
    /// By innermost stage.
    innermost: Vec<f64>,
    /// The keys' names.
    dictionary: &'d StringArray,
}

/// Running sums of a rank's categories, ns.
#[derive(Default)]
struct Sums {
    setup: f64,
    warmup: f64,
    profiler: f64,
    stall: f64,
    collective: f64,
    untracked: f64,
    teardown: f64,
}

impl RankAccount {
    /// The account of one rank's stage table over `covered`; the first
    /// `warmup_calls` steps are warm-up (their excess over the steady
    /// steps' median work is).
    pub fn new(input: AccountRows<'_, '_>, covered: Covered, warmup_calls: u32) -> Self {
        let AccountRows {
            stages,
            enclosing,
            nested_ns,
            rows,
            one_offs,
            name_key,
            names,
            collectives,
            perturbed,
        } = input;
        let steps = &rows.steps;
        let profiler = Spans::new(
            rows.profiler_rows
                .iter()
                .map(|&i| (stages.start_ns[i], stages.end_ns[i])),
        );
        // Everything is counted within the span covered (a row past it, or
        // before it, counts for the part inside it only); a payload that
        // does not give its span's length reaches its last step's end.
        let from = covered.from_ns;
        let last_row_end = steps.iter().map(|&r| stages.end_ns[r]).max();
        let end = match covered.wall_ns {
            0 => last_row_end.unwrap_or(from).max(from),
            wall_ns => from.saturating_add(wall_ns),
        };
        let last_end = last_row_end.unwrap_or(from).clamp(from, end);
        let wall = (end - from) as f64;
        let mut sums = Sums::default();
        // Work by stage name, by key.
        let mut work = ByName {
            top: vec![0.0; names],
            innermost: vec![0.0; names],
            dictionary: stages.name.dictionary(),
        };
        let Some(&first) = steps.first() else {
            sums.profiler = profiler.within(from, end) as f64;
            sums.untracked = wall - sums.profiler;
            return RankAccount::of_sums(wall, sums, work, None, Vec::new());
        };
        let first_start = stages.start_ns[first].clamp(from, last_end);
        let profiler_in = |a: u64, b: u64| profiler.within(a, b) as f64;
        sums.profiler += profiler_in(from, first_start) + profiler_in(last_end, end);
        sums.setup = (first_start - from) as f64 - profiler_in(from, first_start);
        sums.teardown = (end - last_end) as f64 - profiler_in(last_end, end);

        let outermost = |mut i: usize| {
            // Bounded: a damaged table's loop of parents ends here.
            for _ in 0..stages.len {
                match enclosing[i] {
                    Some(p) => i = p,
                    None => break,
                }
            }
            i
        };
        let mut works = step_works(stages, enclosing, nested_ns, rows);
        let mut by_step: Vec<f64> = Vec::with_capacity(steps.len());
        // Per step stage name (by key), its steps' collective times.
        let mut of_name: Vec<(usize, Vec<StepTime>)> = Vec::new();
        // Where the steps accounted for so far end: a step's time before
        // it (a step that overlaps the one before, or began before a
        // window opened) is not counted again.
        let mut covered_until = from;
        for (k, &row) in steps.iter().enumerate() {
            let (start, end_k) = (stages.start_ns[row], stages.end_ns[row]);
            let duration = end_k.saturating_sub(start) as f64;
            // The gap before it: from where the steps counted so far end to
            // its start, within the span.
            let gap = if k > 0 {
                start.clamp(covered_until, end) - covered_until
            } else {
                0
            };
            let counted = end_k.min(end).saturating_sub(start.max(covered_until)) as f64;
            covered_until = covered_until.max(end_k.min(end));
            // The share of the step's time accounted for here.
            let share = if duration > 0.0 {
                counted / duration
            } else {
                0.0
            };
            let in_profiler = (rows.profiler_ns(row) as f64).min(duration) * share;
            let collective =
                ((rows.collective_ns(row) as f64).min(duration) * share).min(counted - in_profiler);
            let work_ns = counted - in_profiler - collective;
            let run = works.step(k);
            if share < 1.0 {
                run.iter_mut().for_each(|b| b.1 *= share);
            }
            // What rows' self work does not account for (rounding, a
            // stage inside a profiler's span) is the step's own.
            let diff = work_ns - total(run);
            match run.iter_mut().find(|b| b.0 == row) {
                Some(own) if diff >= 0.0 => own.1 += diff,
                _ => {
                    take(run, -diff, row);
                }
            }
            sums.collective += collective;
            let one_off = one_offs.get(k).copied().unwrap_or_default();
            let gap_profiler = if k > 0 { rows.gaps[k].1.min(gap) } else { 0 };
            let gap_excess = one_off.gap_excess_ns.min((gap - gap_profiler) as f64);
            let call_excess = match one_off.call {
                Some((deepest, excess, _)) => take(run, excess, deepest),
                None => 0.0,
            };
            by_step.push(total(run));
            sums.profiler += in_profiler + gap_profiler as f64;
            match one_off.cause {
                StepCause::Profiler => sums.profiler += call_excess + gap_excess,
                StepCause::ProfilerStart => {
                    sums.profiler += gap_excess;
                    sums.add_call(one_off, call_excess);
                }
                StepCause::Own => {
                    sums.stall += gap_excess;
                    sums.add_call(one_off, call_excess);
                }
            }
            if k > 0 {
                let rest = (gap as f64 - gap_profiler as f64 - gap_excess).max(0.0);
                match enclosing[row].filter(|&p| enclosing[steps[k - 1]] == Some(p)) {
                    Some(parent) => {
                        work.innermost[name_key(parent)] += rest;
                        work.top[name_key(outermost(parent))] += rest;
                    }
                    None => sums.untracked += rest,
                }
            }
            // The step's arrival at its first collective call is steady
            // unless a one-off perturbed it (as the collectives' matching
            // judges a call), or it is a warm-up step, or the first (the
            // ranks meet there as their set-ups end).
            let arrival = collectives.first_start_from(start).filter(|&at| at < end_k);
            let perturbed_arrival = arrival
                .is_some_and(|at| perturbed.iter().any(|&(from, to)| (from..to).contains(&at)));
            let times = match of_name.iter_mut().find(|(key, _)| *key == name_key(row)) {
                Some((_, times)) => times,
                None => {
                    of_name.push((name_key(row), Vec::new()));
                    &mut of_name.last_mut().expect("pushed").1
                }
            };
            times.push(StepTime {
                collective_s: s(collective) as f32,
                one_off: perturbed_arrival || k == 0 || (k as u64) < u64::from(warmup_calls),
            });
        }
        // The first `warmup_calls` steps: their work past the steady
        // steps' median.
        let warm = (warmup_calls as usize).min(steps.len());
        if let Some(typical) = median_of(&mut by_step[warm..]) {
            for (k, &row) in steps.iter().enumerate().take(warm) {
                let run = works.step(k);
                let excess = total(run) - typical;
                sums.warmup += take(run, excess, row);
            }
        }
        for (k, &row) in steps.iter().enumerate() {
            let top_key = name_key(outermost(row));
            for &(row, ns) in works.step(k).iter() {
                work.innermost[name_key(row)] += ns;
                work.top[top_key] += ns;
            }
        }
        let dictionary = stages.name.dictionary();
        let named: Vec<(String, Vec<StepTime>)> = of_name
            .into_iter()
            .map(|(key, times)| (dictionary.value(key).to_string(), times))
            .collect();
        let runs = named
            .iter()
            .map(|(name, times)| (name.clone(), collective_runs(times)))
            .filter(|(_, runs)| !runs.is_empty())
            .collect();
        let mut account = RankAccount::of_sums(wall, sums, work, Some(first_start - from), runs);
        account.steps = named;
        account
    }

    /// The account of `sums` and the work by stage (ns), over `wall` ns:
    /// what the parts leave of the wall (stages of other threads across
    /// steps' gaps, steps that overlap) untracked, what they pass it taken
    /// out of the work.
    fn of_sums(
        wall: f64,
        sums: Sums,
        work: ByName<'_>,
        first_step_ns: Option<u64>,
        collective_steps: Vec<(String, Vec<(u32, u32)>)>,
    ) -> Self {
        let total: f64 = work.top.iter().sum();
        let parts = sums.setup
            + sums.warmup
            + sums.profiler
            + sums.stall
            + sums.collective
            + sums.untracked
            + sums.teardown
            + total;
        // Parts short of the wall (stages of other threads across the
        // steps' gaps) leave it untracked; parts past it (rounding) are
        // taken out of the work, and should the work not hold them (a
        // damaged table), every part is scaled to the wall.
        let (untracked, scale) = if parts <= wall {
            (sums.untracked + (wall - parts), 1.0)
        } else if parts - wall <= total {
            (sums.untracked, (total - (parts - wall)) / total)
        } else {
            let rest = parts - total;
            let shrink = if rest > 0.0 { wall / rest } else { 0.0 };
            return RankAccount::of_sums(
                wall,
                sums.scaled(shrink),
                ByName {
                    top: vec![0.0; work.top.len()],
                    innermost: vec![0.0; work.innermost.len()],
                    dictionary: work.dictionary,
                },
                first_step_ns,
                collective_steps,
            );
        };
        let listed = |by_key: &[f64]| {
            let mut all: Vec<(usize, f64)> = by_key
                .iter()
                .enumerate()
                .filter(|&(_, &ns)| ns > 0.0)
                .map(|(key, &ns)| (key, s(ns * scale)))
                .collect();
            let named = |key: usize| work.dictionary.value(key);
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(named(a.0).cmp(named(b.0))));
            let rest: f64 = all.iter().skip(WORK_STAGES - 1).map(|e| e.1).sum();
            let past = all.len() > WORK_STAGES;
            all.truncate(if past { WORK_STAGES - 1 } else { WORK_STAGES });
            let mut named: Vec<(String, f64)> = all
                .into_iter()
                .map(|(key, s)| (named(key).to_string(), s))
                .collect();
            if past {
                named.push((OTHER_STAGES.to_string(), rest));
            }
            named
        };
        let work_s = s(total * scale);
        RankAccount {
            wall_s: s(wall),
            setup_s: s(sums.setup),
            warmup_s: s(sums.warmup),
            profiler_s: s(sums.profiler),
            stall_s: s(sums.stall),
            work_s,
            collective_s: s(sums.collective),
            untracked_s: s(untracked),
            teardown_s: s(sums.teardown),
            work_top: listed(&work.top),
            work_innermost: listed(&work.innermost),
            first_step_ns,
            collective_steps,
            steps: Vec::new(),
        }
    }

    /// The categories summed, seconds: the wall, where the account is
    /// whole.
    pub fn sum_s(&self) -> f64 {
        self.setup_s
            + self.warmup_s
            + self.profiler_s
            + self.stall_s
            + self.work_s
            + self.collective_s
            + self.untracked_s
            + self.teardown_s
    }

    /// Whether the account's figures fit together, else which does not:
    /// every figure finite and not negative, the categories adding up to
    /// the wall (to a microsecond in an hour), the work by stage to the
    /// work, the runs of steps in order (a digest read from elsewhere is
    /// checked).
    pub fn is_whole(&self) -> Result<(), &'static str> {
        let figures = [
            self.wall_s,
            self.setup_s,
            self.warmup_s,
            self.profiler_s,
            self.stall_s,
            self.work_s,
            self.collective_s,
            self.untracked_s,
            self.teardown_s,
        ];
        // Each figure a part of a wall of at most a century: no sum of them
        // can overflow into a tolerance that takes anything.
        let most = self.wall_s.min(MOST_WALL_S) * (1.0 + 1e-9) + 1e-9;
        if !figures
            .iter()
            .all(|f| f.is_finite() && *f >= 0.0 && *f <= most)
        {
            return Err("time account");
        }
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 + 1e-9 * a.abs().max(b.abs());
        let listed = |list: &[(String, f64)]| {
            list.len() <= WORK_STAGES
                && list.iter().all(|e| e.1.is_finite() && e.1 >= 0.0)
                && (list.is_empty() || close(list.iter().map(|e| e.1).sum(), self.work_s))
        };
        let first_step = self
            .first_step_ns
            .is_none_or(|ns| ns as f64 <= self.wall_s * 1e9 + 1.0);
        let runs = self.collective_steps.len() <= super::steps::MOST_STEP_NAMES
            && self.collective_steps.iter().all(|(_, runs)| {
                runs.len() <= COLLECTIVE_RUNS
                    && runs.windows(2).all(|w| w[0].1 < w[1].0)
                    && runs.iter().all(|r| r.0 < r.1)
            });
        if !close(self.sum_s(), self.wall_s)
            || !listed(&self.work_top)
            || !listed(&self.work_innermost)
            || !runs
            || !first_step
        {
            return Err("time account");
        }
        Ok(())
    }
}

impl Sums {
    /// Every sum times `by`.
    fn scaled(self, by: f64) -> Self {
        Sums {
            setup: self.setup * by,
            warmup: self.warmup * by,
            profiler: self.profiler * by,
            stall: self.stall * by,
            collective: self.collective * by,
            untracked: self.untracked * by,
            teardown: self.teardown * by,
        }
    }

    /// A step's one-off calls' excess `excess` (ns), as its kind.
    fn add_call(&mut self, one_off: StepOneOff, excess: f64) {
        match one_off.call {
            Some((_, _, true)) => self.warmup += excess,
            _ => self.stall += excess,
        }
    }
}

/// Each step's work by row: the self work (self time less the collective
/// calls in no stage inside) of each row in it, the profiler's spans left
/// out; grouped by step, each step's own row among its rows.
fn step_works(
    stages: &StagesView<'_>,
    enclosing: &[Option<usize>],
    nested_ns: &[u64],
    rows: &RowTimes,
) -> Works {
    let steps = &rows.steps;
    let mut k_of = vec![usize::MAX; stages.len];
    for (k, &row) in steps.iter().enumerate() {
        k_of[row] = k;
    }
    // Each row's step (past the steps: none, `steps.len()`), once; then
    // the rows grouped by step (a counting sort).
    let past = steps.len();
    let of_row: Vec<u32> = (0..stages.len)
        .map(|i| {
            let k = rows.step_of[i].map_or(usize::MAX, |step| k_of[step]);
            let counted =
                !rows.is_profiler[i] && !enclosing[i].is_some_and(|p| rows.is_profiler[p]);
            (if counted && k != usize::MAX { k } else { past }) as u32
        })
        .collect();
    let mut ends = vec![0usize; past + 1];
    for &k in &of_row {
        ends[k as usize] += 1;
    }
    let mut next = 0;
    for end in &mut ends {
        next += *end;
        *end = next;
    }
    let counted = past.checked_sub(1).map_or(0, |last| ends[last]);
    let mut buckets = vec![(0usize, 0.0f64); counted];
    // Where each step's run is filled next: its start.
    let mut fill: Vec<usize> = std::iter::once(0).chain(ends.iter().copied()).collect();
    for (i, &k) in of_row.iter().enumerate() {
        let k = k as usize;
        if k == past {
            continue;
        }
        let duration = stages.end_ns[i].saturating_sub(stages.start_ns[i]);
        let own = duration
            .saturating_sub(nested_ns[i])
            .saturating_sub(rows.self_collective_ns(i));
        buckets[fill[k]] = (i, own as f64);
        fill[k] += 1;
    }
    ends.truncate(steps.len());
    Works { buckets, ends }
}

/// The runs of steps with collective time, `first..past`, at most
/// [`COLLECTIVE_RUNS`] (the last reaching the last step past them).
fn collective_runs(steps: &[StepTime]) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for (k, step) in steps.iter().enumerate() {
        if step.collective_s <= 0.0 {
            continue;
        }
        let k = k as u32;
        let full = runs.len() == COLLECTIVE_RUNS;
        match runs.last_mut() {
            Some(run) if run.1 == k || full => run.1 = k + 1,
            _ => runs.push((k, k + 1)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::super::super::digest::RankDigest;
    use super::super::super::times::tests::rank_with_stages;
    use crate::AnalysisConfig;
    use rankscope_common::window::{Trigger, WindowMeta};
    use rankscope_common::Payload;

    /// The account of `payload`, digested as rank 0 digests a rank.
    fn account(payload: &Payload) -> super::RankAccount {
        RankDigest::new(payload, &AnalysisConfig::default()).account
    }

    /// Six steps of 1 s, `step` holding `work` 0.2–0.9 s into each.
    fn steps() -> Vec<(u64, Option<u64>, &'static str, f64, f64)> {
        (0..6u64)
            .flat_map(|k| {
                let t = 1.0 + k as f64;
                [
                    (2 * k + 1, None, "step", t, t + 1.0),
                    (2 * k + 2, Some(2 * k + 1), "work", t + 0.2, t + 0.9),
                ]
            })
            .collect()
    }

    #[test]
    fn a_rank_splits_into_setup_work_by_stage_and_teardown() {
        let mut payload = rank_with_stages(0, &steps());
        payload.header.clock.duration_ns = 8_000_000_000;
        let a = account(&payload);
        assert_eq!(a.is_whole(), Ok(()));
        assert!((a.wall_s - 8.0).abs() < 1e-9);
        assert!((a.setup_s - 1.0).abs() < 1e-9 && (a.teardown_s - 1.0).abs() < 1e-9);
        assert!((a.work_s - 6.0).abs() < 1e-6, "{a:?}");
        let innermost: Vec<(&str, f64)> = a
            .work_innermost
            .iter()
            .map(|(n, s)| (n.as_str(), *s))
            .collect();
        assert_eq!(innermost[0].0, "work");
        assert!((innermost[0].1 - 6.0 * 0.7).abs() < 1e-6, "{innermost:?}");
        assert_eq!(a.work_top.len(), 1, "{:?}", a.work_top);
    }

    #[test]
    fn steps_that_overlap_or_run_past_the_span_are_counted_once_within_it() {
        // Each step overlaps the one before by half; a row ends before it
        // starts; another runs past the session's end.
        let mut rows: Vec<(u64, Option<u64>, &str, f64, f64)> = (0..6u64)
            .map(|k| {
                (
                    k + 1,
                    None,
                    "step",
                    1.0 + 0.5 * k as f64,
                    2.0 + 0.5 * k as f64,
                )
            })
            .collect();
        rows.push((20, None, "step", 60.0, 0.5));
        rows.push((21, None, "step", 4.6, 1e6));
        let mut payload = rank_with_stages(0, &rows);
        payload.header.clock.duration_ns = 5_000_000_000;
        let a = account(&payload);
        assert_eq!(a.is_whole(), Ok(()), "{a:?}");
        assert!((a.wall_s - 5.0).abs() < 1e-9, "{a:?}");
        // Steps cover 1.0–5.0: four seconds, counted once (the one past the
        // end far longer than the others is a stall, within the span).
        let steps = a.work_s + a.stall_s + a.untracked_s;
        assert!((steps - 4.0).abs() < 1e-6, "{a:?}");
        assert!(a.stall_s <= 0.5 + 1e-9, "{a:?}");
        assert!((a.setup_s - 1.0).abs() < 1e-6, "{a:?}");
    }

    #[test]
    fn a_window_counts_its_own_span_only() {
        // A window of 3 s from 2.5 s: steps 2 and 3 in full, half of the
        // one it opened in, none of those before.
        let mut payload = rank_with_stages(0, &steps());
        payload.header.clock.duration_ns = 8_000_000_000;
        payload.header.window = Some(WindowMeta {
            index: 1,
            trigger: Trigger::Command,
            planned_first_step: 1,
            planned_steps: 3,
            first_step: 1,
            steps: 3,
            started_ns: 2_500_000_000,
            duration_ns: 3_000_000_000,
            cancelled: None,
        });
        let a = account(&payload);
        assert_eq!(a.is_whole(), Ok(()), "{a:?}");
        assert!((a.wall_s - 3.0).abs() < 1e-9, "{a:?}");
        assert!((a.work_s - 3.0).abs() < 1e-6, "{a:?}");
        assert!(a.setup_s < 1e-9 && a.teardown_s < 1e-9, "{a:?}");
    }
}
