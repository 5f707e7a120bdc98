//! Stragglers: ranks slower than the median of the other ranks in a stage, and, call by
//! call, which rank the others waited for.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::stats::{lower_spread, median, median_without, normal_quantile};
use super::times::{StageAcross, StageTimes};
use crate::model::{
    GpuSummary, LockstepRank, LockstepStage, RankSummary, Straggler, StragglerGroup,
};

/// A host whose mean CPU use reaches this share of all cores is saturated, %.
pub const HOST_CPU_SATURATED_PCT: f64 = 90.0;

/// When a rank counts as a straggler in a stage: past both margins over
/// the median of the other ranks, and, with eight ranks or more, an
/// outlier against the stage's ordinary spread across ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StragglerRule {
    /// Its total must exceed the other ranks' median by more than this, percent...
    pub threshold_pct: f64,
    /// ... and by more than this many seconds.
    pub min_excess_s: f64,
}

/// The chance that ordinary spread alone makes some rank of a stage a
/// straggler, whatever the number of ranks: the score a rank must pass
/// grows with the ranks compared (1 % shared among n ranks: 3.0 spreads
/// at 8 ranks, 4.3 at 1,024, 4.9 at 16,384, for normally spread totals).
pub const FALSE_ALARM: f64 = 0.01;

/// Fewest ranks whose spread is judged (a spread of a handful of ranks says
/// little): with fewer, the margins alone decide.
const MIN_RANKS_FOR_SPREAD: usize = 8;

/// A rank past a [`StragglerRule`]: its total and the other ranks' median.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowRank {
    /// The rank.
    pub rank: u32,
    /// Its total, seconds.
    pub total: f64,
    /// The median of the other ranks' totals, seconds.
    pub median: f64,
    /// The ordinary spread of the ranks' totals, seconds: of those within
    /// the threshold over the median of all (ranks past it, even half the
    /// job, do not widen it), the spread of the lower half (1.4826 × the
    /// median of how far they lie below their median, which the truncation
    /// above leaves nearly whole); `None` with fewer than eight ranks.
    pub spread: Option<f64>,
    /// `total − median` in spreads; `None` without a spread, or a spread
    /// of 0 (every other rank the same).
    pub score: Option<f64>,
}

impl StragglerRule {
    /// The score a rank must pass among `ranks` ranks.
    pub fn score_needed(ranks: usize) -> f64 {
        normal_quantile(1.0 - FALSE_ALARM / ranks.max(1) as f64)
    }

    /// The ranks of `totals` (rank, seconds) past the rule: slower than
    /// the median of the others by both margins, and by more than
    /// [`StragglerRule::score_needed`] spreads. Needs two ranks.
    pub fn slow_ranks(&self, mut totals: Vec<(u32, f64)>) -> Vec<SlowRank> {
        totals.sort_by(|a, b| a.1.total_cmp(&b.1));
        let sorted: Vec<f64> = totals.iter().map(|&(_, t)| t).collect();
        let threshold = 1.0 + self.threshold_pct / 100.0;
        let spread = (sorted.len() >= MIN_RANKS_FOR_SPREAD)
            .then(|| {
                let ceiling = median(&sorted)? * threshold;
                let ordinary = &sorted[..sorted.partition_point(|&t| t <= ceiling)];
                lower_spread(ordinary)
            })
            .flatten();
        let needed = Self::score_needed(sorted.len());
        let mut slow = Vec::new();
        for (position, &(rank, total)) in totals.iter().enumerate() {
            let Some(median) = median_without(&sorted, position).filter(|&m| m > 0.0) else {
                continue;
            };
            let score = spread.filter(|&s| s > 0.0).map(|s| (total - median) / s);
            if total > median * threshold
                && total - median > self.min_excess_s
                && score.is_none_or(|score| score > needed)
            {
                slow.push(SlowRank {
                    rank,
                    total,
                    median,
                    spread,
                    score,
                });
            }
        }
        slow
    }
}

/// Ranks whose total in a stage exceeds the other ranks' median by the rule's
/// margins, the costliest in job time first. Needs at least two ranks in
/// the stage.
pub fn stragglers(
    times: &StageTimes,
    lockstep: &[LockstepStage],
    rule: StragglerRule,
) -> Vec<Straggler> {
    // Each stage's lockstep entry, found once (not a search per straggler).
    let lockstep_of: std::collections::HashMap<&str, &LockstepStage> =
        lockstep.iter().map(|l| (l.stage.as_str(), l)).collect();
    let mut found = Vec::new();
    for (stage, across) in &times.by_name {
        if across.ranks.len() < 2 {
            continue;
        }
        let work = across.work_by_rank();
        let mut self_work: Vec<f64> = work.iter().map(|w| w.self_work_s).collect();
        self_work.sort_by(f64::total_cmp);
        let totals = work.iter().map(|w| (w.rank, w.work_s)).collect();
        for slow in rule.slow_ranks(totals) {
            let own_self = work
                .iter()
                .find(|w| w.rank == slow.rank)
                .map_or(0.0, |w| w.self_work_s);
            let at = self_work.partition_point(|&s| s < own_self);
            let self_excess_s = median_without(&self_work, at).map_or(0.0, |m| own_self - m);
            let imposed = lockstep_of
                .get(stage.as_str())
                .and_then(|l| l.ranks.iter().find(|r| r.rank == slow.rank));
            let wait_s = imposed.map_or(0.0, |r| r.wait_imposed_s);
            let job_time_s = imposed.map_or(0.0, |r| r.delay_imposed_s);
            found.push(Straggler {
                rank: slow.rank,
                stage: stage.clone(),
                slowdown: slow.total / slow.median,
                excess_s: slow.total - slow.median,
                self_excess_s,
                wait_s,
                job_time_s,
                score: slow.score,
                spread_s: slow.spread,
                evidence: Vec::new(),
            });
        }
    }
    // The findings that cost the job the most wall-clock time first.
    found.sort_by(|a, b| {
        b.job_time_s
            .total_cmp(&a.job_time_s)
            .then(b.excess_s.total_cmp(&a.excess_s))
    });
    found
}

/// Stragglers that share something, each group with the wall-clock time
/// its ranks cost the job together (each rank's own `job_time_s` leaves
/// out what another rank as slow would have cost anyway: a node whose
/// ranks are equally slow costs nothing rank by rank): where the job mixes
/// GPU models, two or more of one stage on several hosts whose GPU model is
/// a minority's, of whose ranks they are at least half (these first: a
/// straggler is told with the first group it is in); and two or more of
/// one stage on one host.
pub fn groups(
    stragglers: &[Straggler],
    ranks: &[RankSummary],
    times: &StageTimes,
) -> Vec<StragglerGroup> {
    let host_of: HashMap<u32, &str> = ranks.iter().map(|r| (r.rank, r.host.as_str())).collect();
    let model_of: HashMap<u32, &str> = ranks
        .iter()
        .filter_map(|r| Some((r.rank, r.gpus.first()?.name.as_str())))
        .collect();
    let mut on_model: BTreeMap<&str, usize> = BTreeMap::new();
    for model in model_of.values() {
        *on_model.entry(model).or_default() += 1;
    }
    let mut by_host: BTreeMap<(&str, &str), Vec<(u32, f64)>> = BTreeMap::new();
    let mut by_model: BTreeMap<(&str, &str), Vec<(u32, f64)>> = BTreeMap::new();
    for s in stragglers {
        if let Some(&host) = host_of.get(&s.rank) {
            by_host
                .entry((&s.stage, host))
                .or_default()
                .push((s.rank, s.excess_s));
        }
        if let Some(&model) = model_of.get(&s.rank) {
            by_model
                .entry((&s.stage, model))
                .or_default()
                .push((s.rank, s.excess_s));
        }
    }
    let by_host = as_slow(by_host);
    let by_model = as_slow(by_model);
    let group = |stage: &str, host: Option<&str>, gpu_model: Option<&str>, mut ranks: Vec<u32>| {
        ranks.sort_unstable();
        let job_time_s = times
            .by_name
            .get(stage)
            .map_or(0.0, |stage| group_delay(stage, &ranks));
        StragglerGroup {
            stage: stage.to_string(),
            host: host.map(str::to_string),
            gpu_model: gpu_model.map(str::to_string),
            ranks,
            job_time_s,
        }
    };
    // A GPU model's group first: it says why its ranks are slow, wherever
    // they run (a straggler is told with the first group it is in).
    let mut found = Vec::new();
    if on_model.len() > 1 {
        let model_groups = by_model.into_iter().filter(|((_, model), members)| {
            let hosts: BTreeSet<&str> = members
                .iter()
                .filter_map(|r| host_of.get(r))
                .copied()
                .collect();
            let on_it = on_model[model];
            members.len() >= 2
                && hosts.len() >= 2
                && 2 * members.len() >= on_it
                && 2 * on_it < model_of.len()
        });
        found.extend(
            model_groups.map(|((stage, model), ranks)| group(stage, None, Some(model), ranks)),
        );
    }
    found.extend(
        by_host
            .into_iter()
            .filter(|(_, group)| group.len() >= 2)
            .map(|((stage, host), ranks)| group(stage, Some(host), None, ranks)),
    );
    found
}

/// Of each set of stragglers, those about as slow as its slowest (their
/// excess at least [`AS_SLOW`] of its): a rank far less slow beside it is
/// a straggler of its own, not one of a group with a shared cause.
fn as_slow<K: Ord>(sets: BTreeMap<K, Vec<(u32, f64)>>) -> BTreeMap<K, Vec<u32>> {
    sets.into_iter()
        .map(|(key, members)| {
            let most = members.iter().map(|m| m.1).fold(0.0, f64::max);
            let alike = members
                .into_iter()
                .filter(|&(_, excess)| excess >= AS_SLOW * most)
                .map(|(rank, _)| rank)
                .collect();
            (key, alike)
        })
        .collect()
}

/// The share of the slowest straggler's excess a straggler must have to
/// be told in a group with it.
const AS_SLOW: f64 = 0.5;

/// Σ over the calls every rank made of how much later the call ended
/// because of the ranks of `group` (sorted): the slowest time less the
/// slowest of the other ranks', where a rank of the group is the slowest
/// (see [`super::calls::CallAcross::group_delay`] for its bound).
fn group_delay(stage: &StageAcross, group: &[u32]) -> f64 {
    stage.by_call[..stage.calls_on_every_rank()]
        .iter()
        .filter_map(|call| call.group_delay(group))
        .sum()
}

/// Whether `gpu` is `rank`'s own: sampled by that rank alone. A GPU that
/// several ranks sample (`gpu_devices: all`) belongs to none of them.
pub fn owns(rank: u32, gpu: &GpuSummary) -> bool {
    gpu.sampled_by == [rank]
}

/// Fills each straggler's evidence: the bottlenecks of the GPUs it
/// samples and its host's CPU when saturated, where they are evidence of
/// its slowness against the other ranks: a GPU or a host counts only where
/// every rank on it is a straggler in the stage (one shared with a rank
/// that keeps up explains nothing of this rank's slowness).
pub fn attribute(stragglers: &mut [Straggler], gpus: &[GpuSummary], ranks: &[RankSummary]) {
    let mut on_host: HashMap<&str, Vec<u32>> = HashMap::new();
    for r in ranks {
        on_host.entry(r.host.as_str()).or_default().push(r.rank);
    }
    let found: Vec<Vec<String>> = {
        let slow: HashSet<(&str, u32)> = stragglers
            .iter()
            .map(|s| (s.stage.as_str(), s.rank))
            .collect();
        stragglers
            .iter()
            .map(|straggler| {
                let all_slow = |ranks: &[u32]| {
                    ranks
                        .iter()
                        .all(|&r| slow.contains(&(straggler.stage.as_str(), r)))
                };
                let gpu_evidence = gpus
                    .iter()
                    .filter(|g| g.sampled_by.contains(&straggler.rank) && all_slow(&g.sampled_by))
                    .flat_map(|g| {
                        let whose = if owns(straggler.rank, g) {
                            format!("its GPU {}", g.index)
                        } else {
                            format!(
                                "GPU {} on its host (sampled by ranks {}, all slow)",
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
                    .filter(|r| on_host.get(r.host.as_str()).is_some_and(|on| all_slow(on)))
                    .and_then(|r| r.host_telemetry.as_ref()?.cpu_avg_pct)
                    .filter(|&cpu| cpu >= HOST_CPU_SATURATED_PCT)
                    .map(|cpu| format!("its host's CPUs were {cpu:.0}% busy on average"));
                gpu_evidence.chain(host_evidence).collect()
            })
            .collect()
    };
    for (straggler, evidence) in stragglers.iter_mut().zip(found) {
        straggler.evidence = evidence;
    }
}

/// The GPUs several ranks sample, each with those ranks: ranks that share
/// a GPU compete for it, and its readings cannot tell them apart.
pub fn shared_gpus(gpus: &[GpuSummary]) -> Vec<&GpuSummary> {
    gpus.iter().filter(|g| g.sampled_by.len() > 1).collect()
}

/// For each stage run by two or more ranks: for call k (the k-th call on
/// every rank, as in a lockstep tensor-parallel job), the slowest rank, the
/// wait it imposed, Σ over the other ranks of (max − own), and the delay,
/// max − the next slowest (how much later the call ended because of it).
pub fn lockstep(times: &StageTimes) -> Vec<LockstepStage> {
    let mut out = Vec::new();
    for (stage, across) in &times.by_name {
        if across.ranks.len() < 2 {
            continue;
        }
        let calls = across.calls_on_every_rank();
        let mut per_rank: BTreeMap<u32, LockstepRank> = across
            .ranks
            .keys()
            .map(|&rank| {
                let entry = LockstepRank {
                    rank,
                    slowest_calls: 0,
                    wait_imposed_s: 0.0,
                    delay_imposed_s: 0.0,
                };
                (rank, entry)
            })
            .collect();
        for call in &across.by_call[..calls] {
            // The slowest rank and its time, and the next slowest time
            // (every rank of the stage, two or more, made the call).
            let [(max, slowest), (second, _), ..] = *call.slowest() else {
                continue;
            };
            if let Some(entry) = per_rank.get_mut(&slowest) {
                entry.slowest_calls += 1;
                entry.wait_imposed_s += call.wait_s();
                entry.delay_imposed_s += f64::from(max) - f64::from(second);
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
    use crate::analysis::calls::CallSeconds;

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
        StageTimes::from_calls(by_name)
    }

    #[test]
    fn lockstep_wait_by_hand() {
        let l = lockstep(&decode_times());
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].calls, 2);
        let rank2 = &l[0].ranks[2];
        assert_eq!(rank2.slowest_calls, 1);
        assert!((rank2.wait_imposed_s - 1.2).abs() < CLOSE);
        // Call 0 ended 0.4 s later for it (1.4 against the next, 1.0).
        assert!((rank2.delay_imposed_s - 0.4).abs() < CLOSE);
        let rank0 = &l[0].ranks[0];
        assert_eq!(rank0.slowest_calls, 1);
        assert!((rank0.wait_imposed_s - 0.25).abs() < CLOSE);
        // Call 1: 1.1 against rank 2's 1.05.
        assert!((rank0.delay_imposed_s - 0.05).abs() < CLOSE);
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
        let times = StageTimes::from_calls(BTreeMap::from([("decode".to_string(), by_rank)]));
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

    /// A generated job of `ranks` ranks with known ground truth: three
    /// stages of 1, 4 and 20 calls; each rank 2 % faster or slower than
    /// the rest on the whole and each call 3 % (both normal); each
    /// `planted` rank 40 % slower in `vae_decode`, and rank 5 (when
    /// `bursty`) 3 times slower in 2 of the 20 `denoise` calls.
    fn generated(ranks: u32, planted: &[u32], bursty: bool, seed: u64) -> StageTimes {
        StageTimes::from_calls(generated_calls(ranks, planted, bursty, seed))
    }

    /// The calls of [`generated`]: name → rank → call durations.
    fn generated_calls(
        ranks: u32,
        planted: &[u32],
        bursty: bool,
        seed: u64,
    ) -> BTreeMap<String, BTreeMap<u32, Vec<CallSeconds>>> {
        let mut state = seed | 1;
        let mut uniform = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut normal = move || {
            let (u, v) = (uniform().max(1e-300), uniform());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        };
        let stages = [
            ("text_encode", 1, 0.5),
            ("vae_decode", 4, 1.0),
            ("denoise", 20, 0.2),
        ];
        let mut by_name: BTreeMap<String, BTreeMap<u32, Vec<CallSeconds>>> = BTreeMap::new();
        for rank in 0..ranks {
            let rank_factor = 1.0 + 0.02 * normal();
            for (stage, calls, seconds) in stages {
                let times = (0..calls)
                    .map(|call| {
                        let mut t = seconds * rank_factor * (1.0 + 0.03 * normal());
                        if stage == "vae_decode" && planted.contains(&rank) {
                            t *= 1.4;
                        }
                        if bursty && rank == 5 && stage == "denoise" && call < 2 {
                            t *= 3.0;
                        }
                        t as CallSeconds
                    })
                    .collect();
                by_name.entry(stage.into()).or_default().insert(rank, times);
            }
        }
        by_name
    }

    /// A whole node planted slow (8 ranks, 40 % in `vae_decode`) among
    /// 1,024: each of its ranks is found, nothing else but chance's one at
    /// most, and they are one group about the node.
    #[test]
    fn a_slow_node_is_found_whole_and_told_as_one() {
        let rule = StragglerRule {
            threshold_pct: 10.0,
            min_excess_s: 0.01,
        };
        let node: Vec<u32> = (64..72).collect();
        for seed in 1..=3 {
            let times = generated(1_024, &node, false, seed * 7_919);
            let found = stragglers(&times, &lockstep(&times), rule);
            for &rank in &node {
                assert!(
                    found
                        .iter()
                        .any(|s| s.rank == rank && s.stage == "vae_decode"),
                    "seed {seed}: rank {rank} missed: {found:?}"
                );
            }
            let others = found.iter().filter(|s| !node.contains(&s.rank)).count();
            assert!(others <= 1, "seed {seed}: {found:?}");
            let ranks: Vec<RankSummary> = (0..1_024)
                .map(|rank| RankSummary {
                    rank,
                    host: format!("node-{:04}", rank / 8),
                    ..RankSummary::default()
                })
                .collect();
            let told: Vec<_> = groups(&found, &ranks, &times)
                .into_iter()
                .filter(|g| g.stage == "vae_decode")
                .map(|g| (g.host, g.ranks))
                .collect();
            assert_eq!(told, [(Some("node-0008".to_string()), node.clone())]);
        }
    }

    /// Every planted straggler is found at 64, 1,024 and 4,096 ranks, and
    /// at most one finding per job is not planted, where the margins alone
    /// (10 % over the median) fire on more than ten ranks whose slowness is
    /// ordinary spread; a balanced job of 4,096 ranks has none.
    #[test]
    fn planted_stragglers_are_found_and_ordinary_spread_is_not() {
        let rule = StragglerRule {
            threshold_pct: 10.0,
            min_excess_s: 0.01,
        };
        for (ranks, planted) in [
            (64, vec![3]),
            (1_024, vec![3, 700]),
            (4_096, vec![3, 4_000]),
        ] {
            for seed in 1..=3 {
                let times = generated(ranks, &planted, true, seed * 7_919);
                let found = stragglers(&times, &lockstep(&times), rule);
                let hit = |rank: u32, stage: &str| {
                    found.iter().any(|s| s.rank == rank && s.stage == stage)
                };
                for &rank in &planted {
                    assert!(hit(rank, "vae_decode"), "{ranks} ranks: rank {rank} missed");
                }
                assert!(hit(5, "denoise"), "{ranks} ranks: the bursty rank missed");
                let unplanted = found
                    .iter()
                    .filter(|s| !(planted.contains(&s.rank) || s.rank == 5))
                    .count();
                assert!(unplanted <= 1, "{ranks} ranks, seed {seed}: {found:?}");
                let needed = StragglerRule::score_needed(ranks as usize);
                assert!(found.iter().all(|s| s.score.unwrap() > needed));
                assert!(found.iter().all(|s| s.spread_s.unwrap() > 0.0));
                assert!(
                    found.windows(2).all(|w| w[0].job_time_s >= w[1].job_time_s),
                    "ordered by the job time they cost"
                );
                // One planted rank, slowest in each of its 4 calls of 1 s,
                // delays the job by about a third of a second a call (1.4 s
                // against the next slowest rank's ~1.07). Two as slow share
                // it: neither alone makes the job later (what job_time_s
                // counts).
                if let [only] = planted.as_slice() {
                    let cost = found.iter().find(|s| s.rank == *only).unwrap().job_time_s;
                    assert!((1.0..2.0).contains(&cost), "{cost} {found:?}");
                }
            }
        }
        let balanced = generated(4_096, &[], false, 42);
        assert_eq!(stragglers(&balanced, &lockstep(&balanced), rule), vec![]);
        // What the margins alone would have said of the same job.
        let margins_only = balanced
            .by_name
            .values()
            .flat_map(|stage| {
                let totals = stage.totals();
                let mut sorted: Vec<f64> = totals.iter().map(|t| t.1).collect();
                sorted.sort_by(f64::total_cmp);
                let median = sorted[sorted.len() / 2];
                totals.into_iter().filter(move |t| t.1 > median * 1.1)
            })
            .count();
        assert!(margins_only > 10, "{margins_only}");
    }

    /// Half the job slow (a throttled node of 8 among 16 ranks): the
    /// spread is judged on the ordinary ranks, so all eight are found.
    #[test]
    fn half_the_ranks_slow_are_all_found() {
        let mut calls = generated_calls(16, &[], false, 5);
        for rank in 8..16 {
            for by_rank in calls.values_mut() {
                for t in by_rank.get_mut(&rank).unwrap() {
                    *t *= 2.0;
                }
            }
        }
        let slow = StageTimes::from_calls(calls);
        let rule = StragglerRule {
            threshold_pct: 10.0,
            min_excess_s: 0.01,
        };
        let found = stragglers(&slow, &lockstep(&slow), rule);
        for rank in 8..16 {
            for stage in ["text_encode", "vae_decode", "denoise"] {
                assert!(
                    found.iter().any(|s| s.rank == rank && s.stage == stage),
                    "rank {rank} in {stage}: {found:?}"
                );
            }
        }
        assert!(found.iter().all(|s| s.rank >= 8));
    }
}
