//! The ranks' steps side by side: for the k-th step of every rank (the
//! k-th on each, as in a lockstep job), the least time any rank spent in
//! collective calls in it (the collectives' own time, their transfer: what
//! a rank spent there past it, it waited), which rank that was (the last to
//! arrive: it waited least), the next least (how much sooner the next rank
//! arrived), the sum over the ranks, and whether the step was one-off on
//! any rank. Merging is exact and its size is set by the steps, not the
//! ranks, so a node leader merges its ranks and rank 0 the nodes, as the
//! stage calls are merged (the analysis's `calls`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::super::steady::one_offs;

/// One step of one rank, as the account of the ranks' steps reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTime {
    /// Its time in collective calls, seconds.
    pub collective_s: f32,
    /// Whether it was one-off on the rank (a warm-up, a stall, the
    /// profiler's): its arrivals are not steady.
    pub one_off: bool,
}

/// A rank arriving less than this before the last one (seconds) arrives
/// with it: jitter, not a late arrival (as the collectives' matching
/// judges it).
pub const ARRIVED_TOGETHER_S: f64 = 50e-6;

/// The k-th step of the ranks merged so far.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepAcross {
    /// The least time a rank that spent any in collective calls spent
    /// there, seconds; infinite where none did.
    least_s: f32,
    /// That rank (on a tie, the lowest).
    least_rank: u32,
    /// The next least, seconds; infinite where one rank or none spent any.
    next_s: f32,
    /// The time of every rank in collective calls, summed, seconds.
    sum_s: f64,
    /// How many ranks spent time in collective calls in it.
    ranks: u32,
    /// Whether it was one-off on any rank.
    one_off: bool,
}

impl Default for StepAcross {
    fn default() -> Self {
        StepAcross {
            least_s: f32::INFINITY,
            least_rank: u32::MAX,
            next_s: f32::INFINITY,
            sum_s: 0.0,
            ranks: 0,
            one_off: false,
        }
    }
}

impl StepAcross {
    /// Adds the same step of other ranks.
    fn merge(&mut self, other: &StepAcross) {
        let mine = (self.least_s, self.least_rank);
        let theirs = (other.least_s, other.least_rank);
        let before = |a: (f32, u32), b: (f32, u32)| a.0 < b.0 || (a.0 == b.0 && a.1 < b.1);
        if before(theirs, mine) {
            self.next_s = mine.0.min(other.next_s);
            (self.least_s, self.least_rank) = theirs;
        } else {
            self.next_s = self.next_s.min(theirs.0);
        }
        self.sum_s += other.sum_s;
        self.ranks += other.ranks;
        self.one_off |= other.one_off;
    }

    /// The step of one rank.
    fn one(rank: u32, step: StepTime) -> Self {
        let spent = step.collective_s > 0.0;
        StepAcross {
            least_s: if spent {
                step.collective_s
            } else {
                f32::INFINITY
            },
            least_rank: if spent { rank } else { u32::MAX },
            next_s: f32::INFINITY,
            sum_s: if spent {
                f64::from(step.collective_s)
            } else {
                0.0
            },
            ranks: u32::from(spent),
            one_off: step.one_off,
        }
    }

    /// The collectives' own time in the step, seconds (0 where no rank
    /// spent any).
    pub fn transfer_s(&self) -> f64 {
        if self.ranks > 0 {
            f64::from(self.least_s)
        } else {
            0.0
        }
    }

    /// The ranks' wait in the step, rank-seconds: each rank's time in
    /// collective calls past the least.
    pub fn wait_s(&self) -> f64 {
        (self.sum_s - f64::from(self.ranks) * self.transfer_s()).max(0.0)
    }
}

/// The steps of one stage name of the ranks merged so far, by their index
/// among that name's calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sequence {
    steps: Vec<StepAcross>,
}

impl Sequence {
    /// Adds the steps of `rank`, in order.
    pub fn add(&mut self, rank: u32, steps: &[StepTime]) {
        if self.steps.len() < steps.len() {
            self.steps.resize(steps.len(), StepAcross::default());
        }
        for (mine, &step) in self.steps.iter_mut().zip(steps) {
            mine.merge(&StepAcross::one(rank, step));
        }
    }

    /// Adds the steps of other ranks (none of them already here).
    pub fn merge(&mut self, other: &Sequence) {
        if self.steps.len() < other.steps.len() {
            self.steps.resize(other.steps.len(), StepAcross::default());
        }
        for (mine, theirs) in self.steps.iter_mut().zip(&other.steps) {
            mine.merge(theirs);
        }
    }

    /// Whether the steps fit together as adding and merging leave them,
    /// else which does not: finite sums of at most `held` ranks, a least
    /// rank `holds` accepts where some rank spent time, the least no more
    /// than the next (finite where two ranks or more spent time), the sum
    /// no less than every rank at the least.
    pub fn is_whole(&self, holds: &impl Fn(u32) -> bool, held: usize) -> Result<(), String> {
        for (k, step) in self.steps.iter().enumerate() {
            let least = f64::from(step.least_s);
            let whole = step.sum_s.is_finite()
                && step.sum_s >= 0.0
                && step.least_s >= 0.0
                && step.least_s <= step.next_s
                && step.ranks as usize <= held
                && match step.ranks {
                    0 => step.least_s.is_infinite() && step.sum_s == 0.0,
                    1 => step.least_s.is_finite() && holds(step.least_rank),
                    n => {
                        step.next_s.is_finite()
                            && holds(step.least_rank)
                            && step.sum_s >= f64::from(n) * least * (1.0 - 1e-6)
                    }
                };
            if !whole {
                return Err(format!("its step {k}"));
            }
        }
        Ok(())
    }

    /// The collectives' own time summed over the steps before each: entry
    /// `k` covers steps `0..k` (one more entry than steps).
    pub fn transfer_before(&self) -> Vec<f64> {
        let mut sums = Vec::with_capacity(self.steps.len() + 1);
        sums.push(0.0);
        for step in &self.steps {
            sums.push(sums[sums.len() - 1] + step.transfer_s());
        }
        sums
    }

    /// The steps whose collectives' own time is far past the steady
    /// steps' (judged as a rank's calls are for one-offs: a communicator's
    /// set-up in the first call, a stall of the transport): `(step, its
    /// excess over the steady transfer in seconds, whether it is the first
    /// step with collective time: a warm-up)`.
    pub fn transfer_one_offs(&self) -> Vec<(u32, f64, bool)> {
        let with_time: Vec<(usize, f64)> = self
            .steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.ranks > 0)
            .map(|(k, s)| (k, s.transfer_s() * 1e9))
            .collect();
        let values: Vec<f64> = with_time.iter().map(|&(_, ns)| ns).collect();
        let (flags, steady) = one_offs(&values);
        let Some(steady) = steady else {
            return Vec::new();
        };
        with_time
            .iter()
            .zip(flags)
            .enumerate()
            .filter(|(_, (_, flagged))| *flagged)
            .map(|(i, (&(k, ns), _))| (k as u32, (ns - steady).max(0.0) / 1e9, i == 0))
            .collect()
    }

    /// Per rank, the rank-seconds the other ranks waited for it in
    /// collective calls: each step's wait is the last arrival's doing.
    pub fn waited_for(&self) -> BTreeMap<u32, f64> {
        let mut by_rank = BTreeMap::new();
        for step in self.steps.iter().filter(|s| s.ranks > 1) {
            *by_rank.entry(step.least_rank).or_insert(0.0) += step.wait_s();
        }
        by_rank
    }

    /// Per rank, over the steps steady on every rank where it arrived last
    /// at the collectives (past [`ARRIVED_TOGETHER_S`]): how much later the
    /// steps' collectives ended for it (its arrival less the next-latest
    /// one, summed: what the job would save if it arrived with the
    /// others), and in how many steps.
    pub fn delays(&self) -> BTreeMap<u32, Delay> {
        let mut by_rank: BTreeMap<u32, Delay> = BTreeMap::new();
        for step in self.steps.iter().filter(|s| s.ranks > 1 && !s.one_off) {
            let delay = f64::from(step.next_s) - f64::from(step.least_s);
            if delay >= ARRIVED_TOGETHER_S {
                let entry = by_rank.entry(step.least_rank).or_default();
                entry.seconds += delay;
                entry.steps += 1;
            }
        }
        by_rank
    }
}

/// The most stage names a digest's steps side by side may hold (a rank's
/// steps are the outermost calls of one thread: few names).
pub const MOST_STEP_NAMES: usize = 1_024;

/// Every step of the ranks merged so far, by its stage's name and its
/// index among that name's calls on each rank: the k-th `step` of one
/// rank meets the k-th `step` of another, whatever else (an `eval`, a
/// checkpoint) a rank ran between its steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepsAcross {
    by_name: BTreeMap<String, Sequence>,
}

impl StepsAcross {
    /// Adds the steps of `rank`: per stage name, its calls in order.
    pub fn add(&mut self, rank: u32, steps: &[(String, Vec<StepTime>)]) {
        for (name, times) in steps {
            match self.by_name.get_mut(name) {
                Some(sequence) => sequence.add(rank, times),
                None => {
                    let mut sequence = Sequence::default();
                    sequence.add(rank, times);
                    self.by_name.insert(name.clone(), sequence);
                }
            }
        }
    }

    /// Adds the steps of other ranks (none of them already here).
    pub fn merge(&mut self, other: &StepsAcross) {
        for (name, theirs) in &other.by_name {
            match self.by_name.get_mut(name) {
                Some(mine) => mine.merge(theirs),
                None => {
                    self.by_name.insert(name.clone(), theirs.clone());
                }
            }
        }
    }

    /// Whether the steps fit together ([`Sequence::is_whole`] for each
    /// name, at most [`MOST_STEP_NAMES`] names), else which does not.
    pub fn is_whole(&self, holds: impl Fn(u32) -> bool, held: usize) -> Result<(), String> {
        if self.by_name.len() > MOST_STEP_NAMES {
            return Err("its steps' names".into());
        }
        for (name, sequence) in &self.by_name {
            sequence
                .is_whole(&holds, held)
                .map_err(|step| format!("{step} of {}", rankscope_common::text::cell(name, 60)))?;
        }
        Ok(())
    }

    /// Each name's steps.
    pub fn sequences(&self) -> impl Iterator<Item = (&str, &Sequence)> {
        self.by_name.iter().map(|(name, s)| (name.as_str(), s))
    }

    /// [`Sequence::waited_for`], over every name.
    pub fn waited_for(&self) -> BTreeMap<u32, f64> {
        let mut by_rank = BTreeMap::new();
        for sequence in self.by_name.values() {
            for (rank, s) in sequence.waited_for() {
                *by_rank.entry(rank).or_insert(0.0) += s;
            }
        }
        by_rank
    }

    /// [`Sequence::delays`], over every name.
    pub fn delays(&self) -> BTreeMap<u32, Delay> {
        let mut by_rank: BTreeMap<u32, Delay> = BTreeMap::new();
        for sequence in self.by_name.values() {
            for (rank, d) in sequence.delays() {
                let entry = by_rank.entry(rank).or_default();
                entry.seconds += d.seconds;
                entry.steps += d.steps;
            }
        }
        by_rank
    }
}

/// What a late rank cost the job across steps ([`StepsAcross::delays`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Delay {
    /// How much later the steps' collectives ended for it, seconds.
    pub seconds: f64,
    /// In how many steps it arrived last.
    pub steps: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(times: &[f32]) -> Vec<StepTime> {
        times
            .iter()
            .map(|&collective_s| StepTime {
                collective_s,
                one_off: false,
            })
            .collect()
    }

    #[test]
    fn the_least_is_the_transfer_and_the_last_to_arrive_imposes_the_wait() {
        // Rank 2 arrives last at both steps (waits 0.1 s), rank 0 next.
        let mut across = Sequence::default();
        across.add(0, &steps(&[0.3, 0.4]));
        across.add(1, &steps(&[0.5, 0.5]));
        across.add(2, &steps(&[0.1, 0.1]));
        assert_eq!(
            across.transfer_before(),
            [0.0, f64::from(0.1f32), f64::from(0.1f32) * 2.0]
        );
        let waited = across.waited_for();
        assert_eq!(waited.keys().copied().collect::<Vec<_>>(), [2]);
        assert!(
            (waited[&2] - (0.2 + 0.4 + 0.3 + 0.4)).abs() < 1e-6,
            "{waited:?}"
        );
        let delays = across.delays();
        assert_eq!(delays[&2].steps, 2);
        assert!(
            (delays[&2].seconds - (0.2 + 0.3)).abs() < 1e-6,
            "{delays:?}"
        );
    }

    #[test]
    fn merged_in_parts_is_merged_at_once_and_one_offs_are_not_compared() {
        let ranks: Vec<(u32, Vec<StepTime>)> = (0..6)
            .map(|r| {
                (
                    r,
                    steps(&[0.1 + r as f32 * 0.01, 0.2, 0.05 * (r + 1) as f32]),
                )
            })
            .collect();
        let mut whole = Sequence::default();
        for (rank, s) in &ranks {
            whole.add(*rank, s);
        }
        let (mut a, mut b) = (Sequence::default(), Sequence::default());
        for (rank, s) in &ranks[..2] {
            a.add(*rank, s);
        }
        for (rank, s) in &ranks[2..] {
            b.add(*rank, s);
        }
        b.merge(&a);
        assert_eq!(b.transfer_before(), whole.transfer_before());
        assert_eq!(b.delays(), whole.delays());
        assert!(b.is_whole(&|r| r < 6, 6).is_ok());
        assert!(
            b.is_whole(&|r| r != 0, 6).is_err(),
            "rank 0 is the least of a step"
        );
        assert!(b.is_whole(&|r| r < 6, 5).is_err(), "more ranks than held");
        // A forged next least, infinite where two ranks spent time.
        let mut forged = b.clone();
        forged.steps[1].next_s = f32::INFINITY;
        assert!(forged.is_whole(&|r| r < 6, 6).is_err());
        let mut short = b.clone();
        short.steps[1].sum_s = 0.0;
        assert!(
            short.is_whole(&|r| r < 6, 6).is_err(),
            "a sum below every rank's least"
        );
        // A step one-off on one rank compares no arrival.
        let mut stalled = whole.clone();
        stalled.add(
            9,
            &[StepTime {
                collective_s: 1.0,
                one_off: true,
            }],
        );
        assert!(
            stalled.delays().values().map(|d| d.steps).sum::<u64>()
                < whole.delays().values().map(|d| d.steps).sum::<u64>()
        );
        // A rank with no collective time in a step is not its least.
        let mut idle = Sequence::default();
        idle.add(0, &steps(&[0.0]));
        idle.add(1, &steps(&[0.2]));
        assert_eq!(idle.transfer_before(), [0.0, f64::from(0.2f32)]);
    }
}

#[cfg(test)]
mod by_name {
    use super::*;

    #[test]
    fn steps_meet_by_their_name_and_index_whatever_else_a_rank_ran_between() {
        let step = |collective_s: f32| StepTime {
            collective_s,
            one_off: false,
        };
        // Rank 0 ran an `eval` (no collective) between its steps 1 and 2:
        // its steps still meet the others' by index among `step` calls.
        let mut across = StepsAcross::default();
        across.add(
            0,
            &[
                ("step".into(), vec![step(0.3), step(0.3), step(0.3)]),
                ("eval".into(), vec![step(0.0)]),
            ],
        );
        across.add(1, &[("step".into(), vec![step(0.1), step(0.1), step(0.1)])]);
        let (name, steps) = across.sequences().find(|(n, _)| *n == "step").unwrap();
        assert_eq!(name, "step");
        assert_eq!(steps.transfer_before().len(), 4);
        assert!((steps.transfer_before()[3] - 3.0 * f64::from(0.1f32)).abs() < 1e-9);
        assert_eq!(across.delays()[&1].steps, 3);
        assert!(across.is_whole(|r| r < 2, 2).is_ok());
    }
}
