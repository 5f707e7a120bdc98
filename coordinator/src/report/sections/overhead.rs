//! Profiler overhead: what profiling cost each rank (its stage calls, the
//! sampler's CPU, the flushes, the final payload's encoding, its own spans)
//! and what it could not keep.

use std::collections::BTreeMap;

use super::{Part, Section};
use crate::model::{RankOverhead, Report};
use crate::report::html::table::{Cell, Table, PER_RANK_ROWS};
use crate::report::summary::lines::write_wrapped;

pub(super) const SECTION: Section = Section {
    id: "overhead",
    link: "Overhead",
    title: "Profiler overhead",
    fields: &[
        "ranks.overhead",
        "ranks.sampler",
        "ranks.overflow",
        "session.dropped_rows",
    ],
    summary: write_overhead,
    values: super::no_values,
    parts: &[
        Part::Html(
            r#"<p class="hint">What profiling cost each rank — its stage calls, the sampler's CPU, the flushes and the final payload's encoding — and what it could not keep.</p>"#,
        ),
        Part::Table("overhead-table", table),
    ],
};

/// What profiling cost the ranks that measured it, all together.
fn write_overhead(out: &mut String, report: &Report) -> std::fmt::Result {
    let measured: Vec<(&RankOverhead, f64)> = report
        .ranks
        .iter()
        .filter_map(|r| Some((r.overhead.as_ref()?, r.duration_s)))
        .collect();
    if measured.is_empty() {
        return Ok(());
    }
    let sum = |f: &dyn Fn(&RankOverhead) -> f64| measured.iter().map(|(o, _)| f(o)).sum::<f64>();
    let total = sum(&|o| o.total_s);
    let session: f64 = measured.iter().map(|(_, d)| d).sum();
    let share = match session > 0.0 {
        true => format!(" ({:.3}%)", total / session * 100.0),
        false => String::new(),
    };
    let measured_ms = |of: fn(&RankOverhead) -> Option<f64>| match measured
        .iter()
        .any(|(o, _)| of(o).is_some())
    {
        true => format!("{:.3} ms", sum(&|o| of(o).unwrap_or(0.0)) * 1e3),
        false => "not measured".into(),
    };
    let sampler = measured_ms(|o| o.sampler_cpu_s);
    let encode = measured_ms(|o| o.encode_s);
    write_wrapped(
        out,
        "",
        &format!(
            "Profiler overhead: {:.3} ms of {session:.3} s of rank time{share}: stages {:.3} ms \
             ({} calls), sampler CPU {sampler}, flushes {:.3} ms, final payload encoding \
             {encode}, the profiler's own spans on the ranks' critical path {:.3} ms",
            total * 1e3,
            sum(&|o| o.stages_s) * 1e3,
            measured.iter().map(|(o, _)| o.stage_calls).sum::<u64>(),
            sum(&|o| o.flushes_s) * 1e3,
            sum(&|o| o.profiler_s) * 1e3,
        ),
    )
}

/// What profiling cost each rank, and the rows it dropped.
fn table(report: &Report) -> Table<'_> {
    let mut dropped_by_rank: BTreeMap<u32, u64> = BTreeMap::new();
    for d in &report.session.dropped_rows {
        *dropped_by_rank.entry(d.rank).or_default() += d.rows;
    }
    let rows = report.ranks.iter().map(move |r| {
        let s = &r.sampler;
        let dropped = dropped_by_rank.get(&r.rank).copied().unwrap_or(0);
        let o = r.overhead.as_ref();
        vec![
            Cell::number(Some(f64::from(r.rank)), 0),
            Cell::number(o.map(|o| o.stage_calls as f64), 0),
            Cell::number(o.map(|o| o.stages_s * 1e3), 2),
            Cell::number(o.and_then(|o| o.sampler_cpu_s).map(|s| s * 1e3), 2),
            Cell::number(o.map(|o| o.flushes_s * 1e3), 2),
            Cell::number(o.and_then(|o| o.encode_s).map(|s| s * 1e3), 2),
            Cell::number(o.and_then(|o| o.share_pct), 3),
            Cell::number(Some(s.gpu_readings as f64), 0),
            Cell::number(Some(s.gpu_read_ns_mean as f64 / 1e3), 1),
            Cell::number(Some(s.gpu_read_ns_max as f64 / 1e3), 1),
            Cell::number(Some(s.host_readings as f64), 0),
            Cell::number(Some(s.host_read_ns_mean as f64 / 1e3), 1),
            Cell::number(Some(dropped as f64), 0),
            Cell::number(Some(r.overflow.names_folded as f64), 0),
            Cell::number(Some(r.overflow.stages_too_deep as f64), 0),
        ]
    });
    Table::new(
        &[
            ("Rank", true),
            ("Stage calls", true),
            ("Stages ms", true),
            ("Sampler CPU ms", true),
            ("Flushes ms", true),
            ("Encode ms", true),
            ("Profiling % of the rank's session", true),
            ("GPU readings", true),
            ("GPU reading mean µs", true),
            ("GPU reading max µs", true),
            ("Host readings", true),
            ("Host reading mean µs", true),
            ("Rows dropped", true),
            ("Names folded", true),
            ("Stages too deep", true),
        ],
        rows,
    )
    .limited(PER_RANK_ROWS)
}
