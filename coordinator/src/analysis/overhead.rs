//! What profiling cost each rank, from what its agent measured of itself
//! (the `metrics` rows of the overhead section) and counted (stage rows,
//! drops, refusals).

use rankscope_common::table::{MetricsView, Overhead, Table, OVERHEAD_SECTION};
use rankscope_common::Payload;

use crate::model::RankOverhead;

/// The rank's overhead, with `profiler_s` seconds in the profiler's own
/// spans (its stage table's `rankscope:` stages); `None` for a payload whose agent measured none, or
/// did not finish its session (the cost of a stage is written at the end),
/// or whose numbers add up to nothing finite.
pub fn rank_overhead(payload: &Payload, profiler_s: f64) -> Option<RankOverhead> {
    let metrics = payload.view::<MetricsView>().ok()??;
    let mut stage_ns_per_call = None;
    let mut sampler_cpu_ms = None;
    let mut flushes_ms = None;
    for i in 0..metrics.len {
        let value = metrics.value[i];
        if metrics.section.get(i) != OVERHEAD_SECTION || !value.is_finite() || value < 0.0 {
            continue;
        }
        let name = metrics.name.get(i);
        let slot = match Overhead::ALL.iter().find(|o| o.name() == name) {
            Some(Overhead::StageNsPerCall) => &mut stage_ns_per_call,
            Some(Overhead::SamplerCpuMs) => &mut sampler_cpu_ms,
            Some(Overhead::FlushMs) => &mut flushes_ms,
            None => continue,
        };
        *slot = Some(value);
    }
    let stage_ns_per_call = stage_ns_per_call?;
    let header = &payload.header;
    let dropped = header
        .dropped
        .iter()
        .filter(|d| d.table == Table::Stages.name())
        .fold(0u64, |sum, d| sum.saturating_add(d.rows));
    let stage_calls = (payload.rows(Table::Stages) as u64)
        .saturating_add(dropped)
        .saturating_add(header.overflow.stages_too_deep);
    let stages_s = stage_calls as f64 * stage_ns_per_call / 1e9;
    let sampler_cpu_s = sampler_cpu_ms.map(|ms| ms / 1e3);
    let flushes_s = flushes_ms.unwrap_or(0.0) / 1e3;
    let encode_s = header.encode_ns.map(|ns| ns as f64 / 1e9);
    let total_s =
        stages_s + sampler_cpu_s.unwrap_or(0.0) + flushes_s + encode_s.unwrap_or(0.0) + profiler_s;
    if !total_s.is_finite() {
        return None;
    }
    let session_s = header.flushed_until_ns.unwrap_or(header.clock.duration_ns) as f64 / 1e9;
    Some(RankOverhead {
        stage_calls,
        stage_ns_per_call,
        stages_s,
        sampler_cpu_s,
        flushes_s,
        encode_s,
        profiler_s,
        total_s,
        share_pct: (session_s > 0.0).then(|| total_s / session_s * 100.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::table::{MetricRow, MetricsBuilder};
    use rankscope_common::PayloadHeader;
    use std::collections::BTreeMap;

    /// A payload of a 2 s session whose metrics are `rows` (name, value).
    fn payload(rows: &[(&str, &str, f64)]) -> Payload {
        let mut metrics = MetricsBuilder::default();
        for &(section, name, value) in rows {
            metrics.append(&MetricRow {
                ts_ns: 0,
                section: section.into(),
                name: name.into(),
                value,
            });
        }
        let mut header = PayloadHeader::new("job", "s", 0, 1);
        header.clock.duration_ns = 2_000_000_000;
        header.overflow.stages_too_deep = 3;
        header.add_dropped("stages", 7);
        let mut tables = BTreeMap::new();
        tables.insert(Table::Metrics, metrics.finish().unwrap());
        Payload { header, tables }
    }

    #[test]
    fn the_rows_add_up_with_the_calls_counted() {
        let mut measured = payload(&[
            (OVERHEAD_SECTION, "stage_ns_per_call", 100.0),
            (OVERHEAD_SECTION, "sampler_cpu_ms", 4.0),
            (OVERHEAD_SECTION, "flush_ms", 6.0),
            ("custom", "stage_ns_per_call", 1e9),
        ]);
        measured.header.encode_ns = Some(3_000_000);
        let overhead = rank_overhead(&measured, 0.0).unwrap();
        assert_eq!(overhead.stage_calls, 10, "7 dropped, 3 refused, no rows");
        assert_eq!(overhead.stages_s, 10.0 * 100.0 / 1e9);
        assert_eq!(overhead.sampler_cpu_s, Some(0.004));
        assert_eq!(overhead.flushes_s, 0.006);
        assert_eq!(overhead.encode_s, Some(0.003));
        assert!((overhead.total_s - (1e-6 + 0.013)).abs() < 1e-12);
        assert!((overhead.share_pct.unwrap() - overhead.total_s / 2.0 * 100.0).abs() < 1e-12);
    }

    #[test]
    fn unfinished_or_unbelievable_rows_give_no_overhead() {
        // A rank that never finished wrote no stage cost.
        assert!(rank_overhead(&payload(&[(OVERHEAD_SECTION, "flush_ms", 6.0)]), 0.0).is_none());
        assert!(rank_overhead(&payload(&[("custom", "m", 1.0)]), 0.0).is_none());
        // Hostile values: each finite, the sum not.
        let huge = payload(&[
            (OVERHEAD_SECTION, "stage_ns_per_call", 1e308),
            (OVERHEAD_SECTION, "flush_ms", 1e308),
            (OVERHEAD_SECTION, "sampler_cpu_ms", 1e308),
        ]);
        assert!(rank_overhead(&huge, 0.0).is_none());
        // Negative and non-finite rows are left out.
        let odd = payload(&[
            (OVERHEAD_SECTION, "stage_ns_per_call", 50.0),
            (OVERHEAD_SECTION, "sampler_cpu_ms", f64::NAN),
            (OVERHEAD_SECTION, "flush_ms", -1.0),
        ]);
        let overhead = rank_overhead(&odd, 0.0).unwrap();
        assert_eq!((overhead.sampler_cpu_s, overhead.flushes_s), (None, 0.0));
        assert_eq!(overhead.encode_s, None, "no encode time in the header");
    }
}
