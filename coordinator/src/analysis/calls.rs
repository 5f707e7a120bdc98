//! One stage's calls across ranks, merged call by call: for the k-th call
//! (the k-th on every rank, as in a lockstep tensor-parallel job) the
//! slowest ranks and the sum over every rank, of each rank's steady work
//! in the call ([`super::steady`]), and the least time any rank spent in
//! collective calls within it (the collectives' own time: what a rank
//! spent there past it, it waited). Merging is exact and its
//! size is set by the calls, not the ranks, so a node leader can merge its
//! ranks and rank 0 the nodes with the same result as one merge of all.

use serde::{Deserialize, Serialize};

/// A call's duration in seconds, as the analysis keeps every call of every
/// rank: the largest thing aggregation holds, halved by single precision
/// (a relative error of at most 6e-8: 0.2 ms in an hour-long call).
/// Sums of them are taken in `f64`.
pub type CallSeconds = f32;

/// The slowest ranks kept per call: one more than the GPUs of a large
/// node, so that the delay a whole slow node of up to 8 ranks imposes is
/// exact (see [`CallAcross::group_delay`]).
pub const CALL_TOP: usize = 9;

/// The k-th call of one stage on the ranks merged so far.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CallAcross {
    /// The slowest ranks' `(seconds, rank)`, slowest first (on a tie the
    /// lowest rank first); the first `len` are set.
    top: [(CallSeconds, u32); CALL_TOP],
    /// How many of `top` are set.
    len: u8,
    /// The sum over every rank, seconds.
    sum_s: f64,
    /// How many ranks made this call.
    ranks: u32,
    /// The least time a rank spent in collective calls within the call,
    /// seconds; infinite where no rank that made it recorded any (which
    /// says nothing of the others' waits).
    least_collective: CallSeconds,
}

/// Whether `a` comes before `b` among the slowest: slower, or as slow and
/// a lower rank.
fn before(a: (CallSeconds, u32), b: (CallSeconds, u32)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

impl CallAcross {
    /// The call of `rank`, its work `seconds` and `collective` seconds in
    /// collective calls.
    pub fn one(rank: u32, seconds: CallSeconds, collective: CallSeconds) -> Self {
        let mut top = [(0.0, 0); CALL_TOP];
        top[0] = (seconds, rank);
        CallAcross {
            top,
            len: 1,
            sum_s: f64::from(seconds),
            ranks: 1,
            least_collective: collective,
        }
    }

    /// Adds the same call of `rank`: its work `seconds`, `collective`
    /// seconds in collective calls.
    pub fn add(&mut self, rank: u32, seconds: CallSeconds, collective: CallSeconds) {
        self.sum_s += f64::from(seconds);
        self.ranks += 1;
        self.least_collective = self.least_collective.min(collective);
        let one = (seconds, rank);
        let len = usize::from(self.len);
        // Most ranks are not among the slowest: one comparison.
        if len == CALL_TOP && !before(one, self.top[CALL_TOP - 1]) {
            return;
        }
        let at = self.top[..len].partition_point(|&kept| before(kept, one));
        let end = len.min(CALL_TOP - 1);
        self.top.copy_within(at..end, at + 1);
        self.top[at] = one;
        self.len = (len + 1).min(CALL_TOP) as u8;
    }

    /// Adds the same call of other ranks.
    pub fn merge(&mut self, other: &CallAcross) {
        let (mine, theirs) = (self.slowest(), other.slowest());
        let mut top = [(0.0, 0); CALL_TOP];
        let (mut i, mut j, mut len) = (0, 0, 0);
        while len < CALL_TOP && (i < mine.len() || j < theirs.len()) {
            let take_mine = j == theirs.len() || (i < mine.len() && before(mine[i], theirs[j]));
            top[len] = if take_mine {
                i += 1;
                mine[i - 1]
            } else {
                j += 1;
                theirs[j - 1]
            };
            len += 1;
        }
        self.top = top;
        self.len = len as u8;
        self.sum_s += other.sum_s;
        self.ranks += other.ranks;
        self.least_collective = self.least_collective.min(other.least_collective);
    }

    /// The least time a rank spent in collective calls within the call,
    /// seconds: the collectives' own time, no rank's wait (0 where no rank
    /// recorded any).
    pub fn least_collective(&self) -> CallSeconds {
        if self.least_collective.is_finite() {
            self.least_collective
        } else {
            0.0
        }
    }

    /// The slowest ranks' `(seconds, rank)`, slowest first.
    pub fn slowest(&self) -> &[(CallSeconds, u32)] {
        &self.top[..usize::from(self.len)]
    }

    /// How many ranks made this call.
    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// Whether the call's parts fit together as adding and merging leave
    /// them: of at least one rank, as many slowest kept as there are ranks
    /// up to [`CALL_TOP`], slowest first, each a rank `of_stage` accepts
    /// and a time finite and not negative, and a finite sum.
    pub fn is_whole(&self, of_stage: impl Fn(u32) -> bool) -> bool {
        let len = usize::from(self.len);
        self.ranks >= 1
            && len == (self.ranks as usize).min(CALL_TOP)
            && self.slowest().windows(2).all(|w| before(w[0], w[1]))
            && self
                .slowest()
                .iter()
                .all(|&(t, rank)| t.is_finite() && t >= 0.0 && of_stage(rank))
            && self.sum_s.is_finite()
            && self.sum_s >= 0.0
            && self.least_collective >= 0.0
    }

    /// The wait the slowest rank imposed: Σ over the other ranks of
    /// (slowest − own).
    pub fn wait_s(&self) -> f64 {
        let max = f64::from(self.top[0].0);
        f64::from(self.ranks) * max - self.sum_s
    }

    /// How much later this call ended because of the ranks of `group`
    /// (sorted): the slowest time less the slowest of the other ranks',
    /// where a rank of the group is the slowest; `None` where no other
    /// rank made the call. Exact where fewer than [`CALL_TOP`] ranks of
    /// the group are among the slowest; past that the slowest kept stands
    /// for the other ranks' slowest, which is no slower (a lower bound).
    pub fn group_delay(&self, group: &[u32]) -> Option<f64> {
        let in_group = |rank: &u32| group.binary_search(rank).is_ok();
        let slowest = self.slowest();
        let &(max, rank) = slowest.first()?;
        if !in_group(&rank) {
            return Some(0.0);
        }
        let outside = match slowest.iter().find(|(_, r)| !in_group(r)) {
            Some(&(t, _)) => t,
            None if self.ranks as usize > slowest.len() => slowest[slowest.len() - 1].0,
            None => return None,
        };
        Some(f64::from(max) - f64::from(outside))
    }
}

/// Adds the calls of `rank` (in start order) to `calls`, one per index:
/// each call's work and its time in collective calls (infinite where the
/// rank recorded none in these calls, which leaves the least time in them
/// to the ranks that did).
pub fn add_rank(
    calls: &mut Vec<CallAcross>,
    rank: u32,
    per_call: impl IntoIterator<Item = (CallSeconds, CallSeconds)>,
) {
    for (k, (seconds, collective)) in per_call.into_iter().enumerate() {
        match calls.get_mut(k) {
            Some(call) => call.add(rank, seconds, collective),
            None => calls.push(CallAcross::one(rank, seconds, collective)),
        }
    }
}

/// Adds `other`'s calls to `calls`, index by index.
pub fn merge(calls: &mut Vec<CallAcross>, other: &[CallAcross]) {
    for (k, call) in other.iter().enumerate() {
        match calls.get_mut(k) {
            Some(mine) => mine.merge(call),
            None => calls.push(*call),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Call 0 of ranks 0..n, rank r taking `seconds(r)`, merged one by one.
    fn call_of(n: u32, seconds: impl Fn(u32) -> f32) -> CallAcross {
        let mut calls = Vec::new();
        for rank in 0..n {
            add_rank(&mut calls, rank, [(seconds(rank), f32::INFINITY)]);
        }
        calls[0]
    }

    #[test]
    fn the_slowest_ranks_are_kept_slowest_first_ties_to_the_lowest_rank() {
        let call = call_of(20, |r| if r % 3 == 0 { 2.0 } else { r as f32 / 10.0 });
        let ranks: Vec<u32> = call.slowest().iter().map(|&(_, r)| r).collect();
        assert_eq!(ranks, [0, 3, 6, 9, 12, 15, 18, 19, 17]);
        assert_eq!(call.ranks(), 20);
    }

    #[test]
    fn merging_in_any_grouping_is_the_same() {
        let seconds = |r: u32| ((r * 7919) % 101) as f32 / 100.0;
        let one_level = call_of(64, seconds);
        let mut two_level = Vec::new();
        for node in 0..8 {
            let mut calls = Vec::new();
            for rank in node * 8..node * 8 + 8 {
                add_rank(&mut calls, rank, [(seconds(rank), f32::INFINITY)]);
            }
            merge(&mut two_level, &calls);
        }
        assert_eq!(one_level.slowest(), two_level[0].slowest());
        assert_eq!(one_level.ranks(), two_level[0].ranks());
        assert!((one_level.wait_s() - two_level[0].wait_s()).abs() < 1e-9);
    }

    #[test]
    fn adding_one_rank_is_merging_its_call() {
        let seconds = |r: u32| ((r * 31) % 13) as f32 / 4.0;
        let mut added = CallAcross::one(0, seconds(0), 0.5);
        let mut merged = added;
        for rank in 1..40 {
            let collective = 0.1 + rank as f32 / 100.0;
            added.add(rank, seconds(rank), collective);
            merged.merge(&CallAcross::one(rank, seconds(rank), collective));
            assert_eq!(added, merged, "after rank {rank}");
        }
    }

    #[test]
    fn group_delay_against_the_slowest_outside_the_group() {
        // A node of 8 ranks (8..16) slow at 2.0 + rank/100, the others
        // at most 1.5.
        let call = call_of(32, |r| {
            if (8..16).contains(&r) {
                2.0 + r as f32 / 100.0
            } else {
                1.0 + r as f32 / 64.0
            }
        });
        let node: Vec<u32> = (8..16).collect();
        let outside_max = 1.0 + 31.0 / 64.0;
        let delay = call.group_delay(&node).unwrap();
        assert!((delay - (2.15 - outside_max)).abs() < 1e-6, "{delay}");
        // A group that is not the slowest imposed nothing.
        assert_eq!(call.group_delay(&[0, 1]), Some(0.0));
        // The whole job as one group: nothing to be later than.
        let all: Vec<u32> = (0..32).collect();
        assert_eq!(
            call.group_delay(&all),
            Some(f64::from(2.15f32) - f64::from(call.slowest()[8].0))
        );
        let two = call_of(2, |r| r as f32);
        assert_eq!(two.group_delay(&[0, 1]), None);
    }
}
