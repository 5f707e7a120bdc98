//! The page's tables from kernel traces: GPU time per rank, kernels across
//! ranks, kernel stragglers and collectives.

use rankscope_common::text::cell;

use super::table::{Cell, Table};
use crate::model::{KernelStats, Report};

/// The longest kernel name a table shows (C++ template names run to
/// kilobytes); report.json has them whole.
const KERNEL_NAME_SHOWN: usize = 160;

/// `value` % with one decimal, sorted by it.
fn pct(value: f64) -> Cell {
    Cell::number(Some(value), 1)
}

pub(super) fn gpu_time(report: &Report) -> Table<'_> {
    let rows = report.gpu_time.iter().map(|g| {
        vec![
            Cell::number(Some(f64::from(g.rank)), 0),
            Cell::number(g.gpu.map(|i| i as f64), 0),
            Cell::number(Some(g.window_s), 4),
            pct(g.idle_pct),
            pct(g.compute_pct),
            pct(g.non_compute_pct),
            Cell::number(Some(g.communication_s), 4),
            Cell::number(Some(g.memory_s), 4),
            Cell::number(g.comm_overlap_pct, 1),
        ]
    });
    Table::new(
        &[
            ("Rank", true),
            ("GPU", true),
            ("Window s", true),
            ("Idle %", true),
            ("Compute %", true),
            ("Non-compute %", true),
            ("Communication s", true),
            ("Memory s", true),
            ("Comm. overlapped %", true),
        ],
        rows,
    )
}

pub(super) fn kernels(report: &Report) -> Table<'_> {
    names_across_ranks(&report.kernels, "Kernel")
}

pub(super) fn cpu_ops(report: &Report) -> Table<'_> {
    names_across_ranks(&report.cpu_ops, "CPU operator")
}

pub(super) fn stage_kernels(report: &Report) -> Table<'_> {
    names_across_ranks(&report.stage_kernels, "Stage")
}

/// `kernels[]` or `cpu_ops[]`, the first column headed `what`.
fn names_across_ranks<'r>(rows: &'r [KernelStats], what: &'static str) -> Table<'r> {
    let rows = rows.iter().map(|k| {
        vec![
            Cell::text(cell(&k.name, KERNEL_NAME_SHOWN)),
            Cell::text(k.category.clone()),
            Cell::number(Some(k.calls as f64), 0),
            Cell::number(Some(k.total_s), 4),
            Cell::at_rank(k.min_s, k.min_rank),
            Cell::at_rank(k.max_s, k.max_rank),
            Cell::number(Some(k.avg_s), 4),
            pct(k.imbalance_pct),
        ]
    });
    Table::new(
        &[
            (what, false),
            ("Category", false),
            ("Calls", true),
            ("Total s", true),
            ("Least per rank s", true),
            ("Most per rank s", true),
            ("Mean per rank s", true),
            ("Imbalance %", true),
        ],
        rows,
    )
}

pub(super) fn kernel_stragglers(report: &Report) -> Table<'_> {
    let rows = report.kernel_stragglers.iter().map(|k| {
        vec![
            Cell::number(Some(f64::from(k.rank)), 0),
            Cell::text(cell(&k.kernel, KERNEL_NAME_SHOWN)),
            Cell::text(k.category.clone()),
            Cell {
                text: format!("{:.2}×", k.slowdown),
                sort: Some(k.slowdown),
                ..Cell::default()
            },
            Cell::number(Some(k.excess_s), 6),
            Cell::text(k.evidence.join("; ")),
        ]
    });
    Table::new(
        &[
            ("Rank", true),
            ("Kernel", false),
            ("Category", false),
            ("Slowdown", true),
            ("Excess s", true),
            ("Evidence", false),
        ],
        rows,
    )
}

pub(super) fn collectives(report: &Report) -> Table<'_> {
    let rows = report.collectives.iter().map(|c| {
        vec![
            Cell::number(Some(f64::from(c.rank)), 0),
            Cell::text(c.kind.clone()),
            Cell::text(c.group.clone().unwrap_or_else(|| "–".into())),
            Cell::number(Some(c.calls as f64), 0),
            Cell::number(Some(c.total_s), 6),
            Cell::number(c.wait_s, 6),
            Cell::number(Some(c.compared as f64), 0),
            Cell::number(c.last_to_arrive.map(|n| n as f64), 0),
            Cell::number(c.wait_imposed_s, 6),
            Cell::number(c.bytes.map(|b| b as f64), 0),
        ]
    });
    Table::new(
        &[
            ("Rank", true),
            ("Collective", false),
            ("Group", false),
            ("Calls", true),
            ("Total s", true),
            ("Waiting s", true),
            ("Compared", true),
            ("Last to arrive", true),
            ("Wait imposed, rank-s", true),
            ("Bytes", true),
        ],
        rows,
    )
}
