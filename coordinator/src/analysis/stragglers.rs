//! Stragglers: ranks slower than the median of the other ranks in a stage, and, call by
//! call, which rank the others waited for.

use std::collections::BTreeMap;

use super::stats::median_without;
use super::times::{CallSeconds, StageTimes};
use crate::model::{GpuSummary, LockstepRank, LockstepStage, RankSummary, Straggler};

/// A host whose mean CPU use reaches this share of all cores is saturated, %.
pub const HOST_CPU_SATURATED_PCT: f64 = 90.0;

/// When a rank counts as a straggler in a stage.
#[derive(Debug, Clone, Copy)]
pub struct StragglerRule {
    /// Its total must exceed the other ranks' median by more than this, percent...
    pub threshold_pct: f64,
    /// ... and by more than this many seconds.
    pub min_excess_s: f64,
}

/// A rank past a [`StragglerRule`]: its total and the other ranks' median.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowRank {
    /// The rank.
    pub rank: u32,
    /// Its total, seconds.
    pub total: f64,
    /// The median of the other ranks' totals, seconds.
    pub median: f64,
}

impl StragglerRule {
    /// The ranks of `totals` (rank, seconds) past the rule: slower than
    /// the median of the others by both margins. Needs two ranks.
    pub fn slow_ranks(&self, mut totals: Vec<(u32, f64)>) -> Vec<SlowRank> {
        totals.sort_by(|a, b| a.1.total_cmp(&b.1));
        let sorted: Vec<f64> = totals.iter().map(|&(_, t)| t).collect();
        let mut slow = Vec::new();
        for (position, &(rank, total)) in totals.iter().enumerate() {
            let Some(median) = median_without(&sorted, position).filter(|&m| m > 0.0) else {
                continue;
            };
            if total > median * (1.0 + self.threshold_pct / 100.0)
                && total - median > self.min_excess_s
            {
                slow.push(SlowRank {
                    rank,
                    total,
                    median,
                });
            }
        }
        slow
    }
}

/// Ranks whose total in a stage exceeds the other ranks' median by the rule's
/// margins, slowest first. Needs at least two ranks in the stage.
pub fn stragglers(
    times: &StageTimes,
    lockstep: &[LockstepStage],
    rule: StragglerRule,
) -> Vec<Straggler> {
    // Each stage's lockstep entry, found once (not a search per straggler).
    let lockstep_of: std::collections::HashMap<&str, &LockstepStage> =
        lockstep.iter().map(|l| (l.stage.as_str(), l)).collect();
    let mut found = Vec::new();
    for (stage, by_rank) in &times.by_name {
        if by_rank.len() < 2 {
            continue;
        }
        for slow in rule.slow_ranks(StageTimes::totals(by_rank)) {
            let wait_s = lockstep_of
                .get(stage.as_str())
                .and_then(|l| l.ranks.iter().find(|r| r.rank == slow.rank))
                .map_or(0.0, |r| r.wait_imposed_s);
            found.push(Straggler {
                rank: slow.rank,
                stage: stage.clone(),
                slowdown: slow.total / slow.median,
                excess_s: slow.total - slow.median,
                wait_s,
                evidence: Vec::new(),
            });
        }
    }
    found.sort_by(|a, b| b.excess_s.total_cmp(&a.excess_s));
    found
}

/// Whether `gpu` is `rank`'s own: sampled by that rank alone. A GPU that
/// several ranks sample (`gpu_devices: all`) belongs to none of them.
pub fn owns(rank: u32, gpu: &GpuSummary) -> bool {
    gpu.sampled_by == [rank]
}

/// Fills each straggler's evidence: the bottlenecks of its own GPUs, of the
/// GPUs it shares with other ranks, and its host's CPU when saturated.
pub fn attribute(stragglers: &mut [Straggler], gpus: &[GpuSummary], ranks: &[RankSummary]) {
    for straggler in stragglers {
        let gpu_evidence = gpus
            .iter()
            .filter(|g| g.sampled_by.contains(&straggler.rank))
            .flat_map(|g| {
                let whose = if owns(straggler.rank, g) {
                    format!("its GPU {}", g.index)
                } else {
                    format!(
                        "GPU {} on its host (sampled by ranks {})",
                        g.index,
                        rankscope_common::text::rank_ranges(&g.sampled_by)
                    )
                };
                g.bottlenecks
                    .iter()
                    .map(move |b| format!("{whose} ({}): {}", b.kind.as_str(), b.evidence))
            });
        let host_evidence = ranks
            .iter()
            .find(|r| r.rank == straggler.rank)
            .and_then(|r| r.host_telemetry.as_ref()?.cpu_avg_pct)
            .filter(|&cpu| cpu >= HOST_CPU_SATURATED_PCT)
            .map(|cpu| format!("its host's CPUs were {cpu:.0}% busy on average"));
        straggler.evidence = gpu_evidence.chain(host_evidence).collect();
    }
}

/// For each stage run by two or more ranks: for call k (the k-th call on
/// every rank, as in a lockstep tensor-parallel job), the slowest rank and
/// the wait it imposed, Σ over the other ranks of (max − own).
pub fn lockstep(times: &StageTimes) -> Vec<LockstepStage> {
    let mut out = Vec::new();
    for (stage, by_rank) in &times.by_name {
        if by_rank.len() < 2 {
            continue;
        }
        let calls = by_rank.values().map(Vec::len).min().unwrap_or(0);
        let mut per_rank: BTreeMap<u32, LockstepRank> = by_rank
            .keys()
            .map(|&rank| {
                let entry = LockstepRank {
                    rank,
                    slowest_calls: 0,
                    wait_imposed_s: 0.0,
                };
                (rank, entry)
            })
            .collect();
        let by_rank: Vec<(u32, &[CallSeconds])> = by_rank
            .iter()
            .map(|(&rank, calls)| (rank, &calls[..]))
            .collect();
        for k in 0..calls {
            let call = |calls: &[CallSeconds]| f64::from(calls[k]);
            let (slowest, max) = by_rank
                .iter()
                .map(|&(rank, calls)| (rank, call(calls)))
                .fold((u32::MAX, f64::NEG_INFINITY), |best, (rank, t)| {
                    if t > best.1 {
                        (rank, t)
                    } else {
                        best
                    }
                });
            let wait: f64 = by_rank.iter().map(|(_, calls)| max - call(calls)).sum();
            if let Some(entry) = per_rank.get_mut(&slowest) {
                entry.slowest_calls += 1;
                entry.wait_imposed_s += wait;
            }
        }
        out.push(LockstepStage {
            stage: stage.clone(),
            calls: calls as u64,
            ranks: per_rank.into_values().collect(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How close a result from single-precision call times
    /// ([`CallSeconds`]) is to the exact one.
    const CLOSE: f64 = 1e-6;

    fn decode_times() -> StageTimes {
        // Two calls per rank. Call 0: rank 2 slowest at 1.4 s, others 1.0 →
        // wait 0.4 · 3 = 1.2. Call 1: rank 0 slowest at 1.1 s, others 1.0
        // except rank 2 at 1.05 → wait 0.1 + 0.1 + 0.05 = 0.25.
        let mut by_rank = BTreeMap::new();
        by_rank.insert(0, vec![1.0, 1.1]);
        by_rank.insert(1, vec![1.0, 1.0]);
        by_rank.insert(2, vec![1.4, 1.05]);
        by_rank.insert(3, vec![1.0, 1.0]);
        let mut by_name = BTreeMap::new();
        by_name.insert("decode".to_string(), by_rank);
        StageTimes {
            by_name,
            ..StageTimes::default()
        }
    }

    #[test]
    fn lockstep_wait_by_hand() {
        let l = lockstep(&decode_times());
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].calls, 2);
        let rank2 = &l[0].ranks[2];
        assert_eq!(rank2.slowest_calls, 1);
        assert!((rank2.wait_imposed_s - 1.2).abs() < CLOSE);
        let rank0 = &l[0].ranks[0];
        assert_eq!(rank0.slowest_calls, 1);
        assert!((rank0.wait_imposed_s - 0.25).abs() < CLOSE);
    }

    #[test]
    fn the_slow_rank_is_named_and_the_margins_hold() {
        // Totals 2.1, 2.0, 2.45, 2.0. Rank 2 against the others' median
        // (2.1, 2.0, 2.0 → 2.0): 1.225. Rank 0 against 2.0, 2.45, 2.0 →
        // 2.0: 5 % over, under the 10 % threshold.
        let times = decode_times();
        let l = lockstep(&times);
        let rule = StragglerRule {
            threshold_pct: 10.0,
            min_excess_s: 0.01,
        };
        let found = stragglers(&times, &l, rule);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].rank, found[0].stage.as_str()), (2, "decode"));
        assert!((found[0].slowdown - 2.45 / 2.0).abs() < CLOSE);
        assert!((found[0].excess_s - 0.45).abs() < CLOSE);
        assert!((found[0].wait_s - 1.2).abs() < CLOSE);

        let strict_floor = StragglerRule {
            threshold_pct: 10.0,
            min_excess_s: 0.5,
        };
        assert!(stragglers(&times, &l, strict_floor).is_empty());
    }

    #[test]
    fn of_two_ranks_each_is_compared_with_the_other() {
        // A planted 40 % slowdown reads 1.4x, not 1.4 / 1.2 against the
        // mean of both.
        let mut by_rank = BTreeMap::new();
        by_rank.insert(0, vec![1.0]);
        by_rank.insert(1, vec![1.4]);
        let times = StageTimes {
            by_name: BTreeMap::from([("decode".to_string(), by_rank)]),
            ..StageTimes::default()
        };
        let rule = StragglerRule {
            threshold_pct: 10.0,
            min_excess_s: 0.01,
        };
        let found = stragglers(&times, &lockstep(&times), rule);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rank, 1);
        assert!((found[0].slowdown - 1.4).abs() < CLOSE);
        assert!((found[0].excess_s - 0.4).abs() < CLOSE);
    }
}
