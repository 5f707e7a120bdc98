//! The page's tables of the stage, straggler, GPU and rank analyses, each
//! made from the report row by row (the kernel traces' tables are in
//! `kernels`).

use std::collections::BTreeMap;

use super::table::{Cell, Table, PER_RANK_ROWS};
use crate::model::{GpuSummary, Report};
use crate::report::stage_tree;

/// The stage table: nested stages under their parent, with GPU time where measured.
pub(super) fn stages(report: &Report) -> Table<'_> {
    // GPU time (the Python package's CUDA events) beside the host time,
    // where some rank measured it.
    let gpu_timed = report.stages.iter().any(|s| s.gpu_s.is_some());
    let rows = stage_tree(&report.stages)
        .into_iter()
        .map(move |(stage, depth)| {
            let mut row = vec![
                Cell {
                    depth,
                    ..Cell::text(stage.name.clone())
                },
                Cell::number(Some(stage.count as f64), 0),
                Cell::number(Some(f64::from(stage.ranks)), 0),
                Cell::number(Some(stage.total_s.avg), 3),
                Cell::at_rank(stage.total_s.min, stage.total_s.min_rank),
                Cell::at_rank(stage.total_s.max, stage.total_s.max_rank),
                Cell::number(Some(stage.self_s.avg), 3),
                Cell::number(stage.work_s.map(|w| w.avg), 3),
                Cell::number(stage.wait_s.map(|w| w.avg), 3),
                Cell::number(Some(stage.per_call_ms.p50), 2),
                Cell::number(Some(stage.per_call_ms.p95), 2),
                Cell::number(Some(stage.per_call_ms.p99), 2),
                Cell::number(Some(stage.imbalance_pct), 1),
                Cell::number(Some(stage.share_pct), 1),
            ];
            if gpu_timed {
                row.insert(7, Cell::number(stage.gpu_s.map(|g| g.avg), 3));
            }
            row
        });
    let mut heads = vec![
        ("Stage", false),
        ("Calls", true),
        ("Ranks", true),
        ("Total avg s", true),
        ("Min s", true),
        ("Max s", true),
        ("Self avg s", true),
        ("Work avg s", true),
        ("Wait avg s", true),
        ("p50 ms", true),
        ("p95 ms", true),
        ("p99 ms", true),
        ("Imbalance %", true),
        ("Share %", true),
    ];
    if gpu_timed {
        heads.insert(7, ("GPU avg s", true));
    }
    Table::new(&heads, rows)
}

/// The stragglers, each with its evidence.
pub(super) fn stragglers(report: &Report) -> Table<'_> {
    let rows = report.stragglers.iter().map(|s| {
        let evidence = if s.evidence.is_empty() {
            "none found".to_string()
        } else {
            s.evidence.join("; ")
        };
        vec![
            Cell::number(Some(f64::from(s.rank)), 0),
            Cell::text(s.stage.clone()),
            Cell {
                text: format!("{:.2}×", s.slowdown),
                sort: Some(s.slowdown),
                ..Cell::default()
            },
            Cell::number(Some(s.excess_s), 3),
            Cell::number(Some(s.self_excess_s), 3),
            Cell::number(Some(s.job_time_s), 3),
            Cell::number(Some(s.wait_s), 3),
            Cell::text(evidence),
        ]
    });
    Table::new(
        &[
            ("Rank", true),
            ("Stage", false),
            ("Slowdown", true),
            ("Excess work s", true),
            ("Of it, self s", true),
            ("Job time cost s", true),
            ("Others idle rank-s", true),
            ("Evidence", false),
        ],
        rows,
    )
}

/// The one-off events, the costliest first.
pub(super) fn events(report: &Report) -> Table<'_> {
    let rows = report.events.iter().map(|e| {
        let ranks = if e.rank_count as usize > e.ranks.len() {
            format!(
                "{} (of {})",
                rankscope_common::text::rank_ranges(&e.ranks),
                e.rank_count
            )
        } else {
            rankscope_common::text::rank_ranges(&e.ranks)
        };
        vec![
            Cell::text(e.kind.clone()),
            Cell::text(ranks),
            Cell::text(format!("{} #{}", e.step_stage, e.step)),
            Cell::text(e.stage.clone().unwrap_or_else(|| "(between steps)".into())),
            Cell::number(Some(e.started_s), 3),
            Cell::number(Some(e.cost_s), 3),
            Cell::text(e.evidence.join("; ")),
        ]
    });
    Table::new(
        &[
            ("Kind", false),
            ("Ranks", false),
            ("Step", false),
            ("Stage", false),
            ("At s", true),
            ("Job time cost s", true),
            ("Evidence", false),
        ],
        rows,
    )
}

/// The lockstep waits by stage.
pub(super) fn lockstep(report: &Report) -> Table<'_> {
    let rows = report.lockstep.iter().filter_map(|stage| {
        let worst = stage.ranks.iter().max_by(|a, b| {
            a.wait_imposed_s
                .total_cmp(&b.wait_imposed_s)
                .then(b.rank.cmp(&a.rank))
        })?;
        let total: f64 = stage.ranks.iter().map(|r| r.wait_imposed_s).sum();
        Some(vec![
            Cell::text(stage.stage.clone()),
            Cell::number(Some(stage.calls as f64), 0),
            Cell::number(Some(f64::from(worst.rank)), 0),
            Cell::number(Some(worst.slowest_calls as f64), 0),
            Cell::number(Some(worst.wait_imposed_s), 3),
            Cell::number(Some(total), 3),
        ])
    });
    Table::new(
        &[
            ("Stage", false),
            ("Calls compared", true),
            ("Most often slowest: rank", true),
            ("Its slowest calls", true),
            ("Wait it caused s", true),
            ("Wait, all ranks s", true),
        ],
        rows,
    )
}

/// One row per GPU, those with a bottleneck first.
pub(super) fn gpus(report: &Report) -> Table<'_> {
    // The GPUs with a bottleneck first: at scale they are the rows shown.
    let mut gpus: Vec<&GpuSummary> = report.gpus.iter().collect();
    gpus.sort_by_key(|g| g.bottlenecks.is_empty());
    let rows = gpus.into_iter().map(|g| {
        let sampled_by: Vec<String> = g.sampled_by.iter().map(u32::to_string).collect();
        vec![
            Cell::text(format!("{} #{}", g.host, g.index)),
            Cell::text(sampled_by.join(", ")),
            Cell::text(g.name.clone()),
            Cell::number(g.memory_peak_mb, 0),
            Cell::number(g.memory_total_mb, 0),
            Cell::number(g.util_avg, 1),
            Cell::number(g.temp_max_c, 0),
            Cell::number(g.power_avg_w, 0),
            Cell::number(g.sm_clock_avg_mhz, 0),
            Cell::number(g.throttled_pct, 1),
            Cell {
                text: if g.bottlenecks.is_empty() {
                    "none".into()
                } else {
                    String::new()
                },
                badges: g
                    .bottlenecks
                    .iter()
                    .map(|b| (b.kind.as_str().to_string(), b.evidence.clone()))
                    .collect(),
                ..Cell::default()
            },
        ]
    });
    Table::new(
        &[
            ("GPU", false),
            ("Ranks", false),
            ("Device", false),
            ("Mem peak MB", true),
            ("Mem total MB", true),
            ("Util avg %", true),
            ("Temp max °C", true),
            ("Power avg W", true),
            ("SM clock avg MHz", true),
            ("Throttled %", true),
            ("Bottlenecks", false),
        ],
        rows,
    )
    .limited(PER_RANK_ROWS)
}

/// One row per rank.
pub(super) fn ranks(report: &Report) -> Table<'_> {
    let rows = report.ranks.iter().map(|r| {
        let gpus: Vec<String> = r
            .gpus
            .iter()
            .map(|g| format!("#{} {}", g.index, g.uuid))
            .collect();
        let host = r.host_telemetry.as_ref();
        vec![
            Cell::number(Some(f64::from(r.rank)), 0),
            Cell::text(r.host.clone()),
            Cell::number(Some(f64::from(r.pid)), 0),
            Cell::number(Some(f64::from(r.local_rank)), 0),
            Cell::text(rankscope_common::parallel::label(&r.parallel)),
            Cell::number(r.clock_offset_ns.map(|ns| ns as f64 / 1e6), 3),
            Cell::number(Some(r.started_s), 3),
            Cell::number(Some(r.duration_s), 3),
            Cell::text(if r.partial { "partial" } else { "whole" }),
            Cell::number(host.and_then(|h| h.cpu_avg_pct), 1),
            Cell::number(host.and_then(|h| h.process_rss_peak_mb), 0),
            Cell::text(gpus.join(", ")),
        ]
    });
    Table::new(
        &[
            ("Rank", true),
            ("Host", false),
            ("PID", true),
            ("Local rank", true),
            ("Parallel", false),
            ("Clock offset ms", true),
            ("Started s", true),
            ("Duration s", true),
            ("Data", false),
            ("Host CPU avg %", true),
            ("Process RSS peak MB", true),
            ("GPUs", false),
        ],
        rows,
    )
    .limited(PER_RANK_ROWS)
}

/// What profiling cost each rank, and the rows it dropped.
pub(super) fn overhead(report: &Report) -> Table<'_> {
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
