//! Stages across ranks: count, spread of per-rank totals, per-call
//! percentiles, imbalance and share of the session.

use super::stats::{imbalance_pct, spread};
use super::times::StageTimes;
use crate::model::StageStats;

/// One [`StageStats`] per stage name, the largest average total first.
/// `session_total_s` is the session length summed over the reporting ranks:
/// a stage's share is its self time summed over the ranks that ran it over
/// that, so a stage one rank of four runs all session long has 25 %.
pub fn stage_stats(times: &StageTimes, session_total_s: f64) -> Vec<StageStats> {
    let mut stats: Vec<StageStats> = times
        .by_name
        .iter()
        .filter_map(|(name, stage)| {
            let totals = stage.totals();
            let total_s = spread(&totals)?;
            let self_totals: Vec<(u32, f64)> =
                stage.ranks.iter().map(|(&r, c)| (r, c.self_s)).collect();
            let self_s = spread(&self_totals).unwrap_or(total_s);
            let gpu_s = times.gpu_by_name.get(name).and_then(|ranks| {
                spread(
                    &ranks
                        .iter()
                        .map(|(&rank, &s)| (rank, s))
                        .collect::<Vec<_>>(),
                )
            });
            let work = stage.work_by_rank();
            let work_s = spread(&work.iter().map(|w| (w.rank, w.work_s)).collect::<Vec<_>>());
            let waits: Vec<(u32, f64)> = work
                .iter()
                .filter_map(|w| Some((w.rank, w.wait_s?)))
                .collect();
            let mut sorted_work: Vec<f64> = work.iter().map(|w| w.work_s).collect();
            sorted_work.sort_by(f64::total_cmp);
            Some(StageStats {
                name: name.clone(),
                parent: times.parent(name).map(str::to_string),
                count: stage.quantiles.count(),
                ranks: stage.ranks.len() as u32,
                total_s,
                self_s,
                gpu_s,
                per_call_ms: stage.quantiles.percentiles_ms()?,
                wait_s: spread(&waits),
                work_s,
                one_off_calls: stage.ranks.values().map(|c| c.one_offs()).sum(),
                imbalance_pct: imbalance_pct(&sorted_work),
                share_pct: if session_total_s > 0.0 {
                    self_totals.iter().map(|&(_, s)| s).sum::<f64>() / session_total_s * 100.0
                } else {
                    0.0
                },
            })
        })
        .collect();
    stats.sort_by(|a, b| {
        b.total_s
            .avg
            .total_cmp(&a.total_s.avg)
            .then(a.name.cmp(&b.name))
    });
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::calls::CallSeconds;

    /// A stage name and, per rank, its call durations.
    type StageCalls<'a> = (&'a str, &'a [(u32, &'a [CallSeconds])]);

    /// Stages with nothing nested: self time is all of their time.
    fn times(stages: &[StageCalls<'_>]) -> StageTimes {
        StageTimes::from_calls(
            stages
                .iter()
                .map(|(name, ranks)| {
                    let by_rank = ranks
                        .iter()
                        .map(|(r, calls)| (*r, calls.to_vec()))
                        .collect();
                    (name.to_string(), by_rank)
                })
                .collect(),
        )
    }

    #[test]
    fn statistics_by_hand() {
        // decode: rank totals 1.0, 1.0, 1.0, 2.0 → avg 1.25, max 2.0 on rank 3,
        // imbalance 2.0 against the others' median 1.0: 100 %,
        // std sqrt((3·0.0625 + 0.5625)/4) = sqrt(0.1875).
        // Sessions of 5 s on 4 ranks: share 5 / 20 = 25 %.
        let t = times(&[
            (
                "decode",
                &[
                    (0, &[0.5, 0.5]),
                    (1, &[1.0]),
                    (2, &[0.25, 0.75]),
                    (3, &[2.0]),
                ],
            ),
            ("encode", &[(0, &[0.1]), (1, &[0.1])]),
        ]);
        let stats = stage_stats(&t, 20.0);
        assert_eq!(stats[0].name, "decode", "largest total first");
        let decode = &stats[0];
        assert_eq!(decode.count, 6);
        assert_eq!(decode.ranks, 4);
        assert_eq!(decode.total_s.avg, 1.25);
        assert_eq!((decode.total_s.max, decode.total_s.max_rank), (2.0, 3));
        assert_eq!((decode.total_s.min, decode.total_s.min_rank), (1.0, 0));
        assert!((decode.total_s.std - 0.1875f64.sqrt()).abs() < 1e-12);
        assert!((decode.imbalance_pct - 100.0).abs() < 1e-9);
        assert!((decode.share_pct - 25.0).abs() < 1e-9);
        // Calls in ms, sorted: 250 500 500 750 1000 2000 → p50 at 2.5 → 625.
        assert!((decode.per_call_ms.p50 - 625.0).abs() < 1e-9);
        assert_eq!(decode.per_call_ms.max, 2000.0);
        assert_eq!(stats[1].imbalance_pct, 0.0);
    }
}
