//! What profiling cost each rank, from what its agent measured of itself
//! (the `metrics` rows of the overhead section) and counted (stage rows,
//! drops, refusals).

use rankscope_common::table::{MetricsView, Overhead, Table, OVERHEAD_SECTION};
use rankscope_common::Payload;

use crate::model::RankOverhead;

/// The rank's overhead; `None` for a payload whose agent measured none.
pub fn rank_overhead(payload: &Payload) -> Option<RankOverhead> {
    let metrics = payload.view::<MetricsView>().ok()??;
    let mut stage_ns_per_call = None;
    let mut sampler_cpu_ms = None;
    let mut flushes_ms = 0.0;
    let mut measured = false;
    for i in 0..metrics.len {
        let value = metrics.value[i];
        if metrics.section.get(i) != OVERHEAD_SECTION || !value.is_finite() || value < 0.0 {
            continue;
        }
        measured = true;
        match metrics.name.get(i) {
            name if name == Overhead::StageNsPerCall.name() => stage_ns_per_call = Some(value),
            name if name == Overhead::SamplerCpuMs.name() => sampler_cpu_ms = Some(value),
            name if name == Overhead::FlushMs.name() => flushes_ms += value,
            _ => {}
        }
    }
    if !measured {
        return None;
    }
    let header = &payload.header;
    let dropped: u64 = header
        .dropped
        .iter()
        .filter(|d| d.table == Table::Stages.name())
        .map(|d| d.rows)
        .sum();
    let stage_calls =
        payload.rows(Table::Stages) as u64 + dropped + header.overflow.stages_too_deep;
    let stages_s = stage_ns_per_call.map(|ns| stage_calls as f64 * ns / 1e9);
    let sampler_cpu_s = sampler_cpu_ms.map(|ms| ms / 1e3);
    let flushes_s = flushes_ms / 1e3;
    let total_s = stages_s.unwrap_or(0.0) + sampler_cpu_s.unwrap_or(0.0) + flushes_s;
    let session_s = header.flushed_until_ns.unwrap_or(header.clock.duration_ns) as f64 / 1e9;
    Some(RankOverhead {
        stage_calls,
        stage_ns_per_call,
        stages_s,
        sampler_cpu_s,
        flushes_s,
        total_s,
        share_pct: if session_s > 0.0 {
            total_s / session_s * 100.0
        } else {
            0.0
        },
    })
}
