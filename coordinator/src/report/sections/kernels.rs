//! Inside the GPU, from torch.profiler traces: GPU time per rank (HTA's
//! definitions), kernels and CPU operators across ranks, the kernels each
//! stage launched, kernel stragglers, collectives and what the traces'
//! budgets cut.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{Part, Section};
use crate::model::{CollectiveStats, KernelStats, Report};
use crate::report::html::table::{Cell, Table};
use crate::report::summary::lines::{fit, write_wrapped, NAME_WIDTH};
use rankscope_common::text::{cell, column};

pub(super) const SECTION: Section = Section {
    id: "kernels",
    link: "Kernels",
    title: "Inside the GPU: kernel traces",
    fields: &[
        "gpu_time",
        "kernels",
        "cpu_ops",
        "stage_kernels",
        "kernel_stragglers",
        "collectives",
        "kernel_traces",
    ],
    summary: write_summary,
    values: super::no_values,
    parts: &[
        Part::Html(
            r#"<p class="hint">From torch.profiler traces. GPU time uses the definitions of Holistic Trace Analysis: the window runs from a GPU's first kernel to its last; idle is when no kernel, copy or set runs on any stream; compute is when a compute kernel runs; non-compute is the rest of the busy time (communication, memory, other). Overlapped is the share of communication time during which compute ran too.</p>"#,
        ),
        Part::Table("gpu-time-table", gpu_time),
        Part::Html(
            r#"<div class="chart" id="chart-gpu-time" data-empty="No kernel traces."></div>
  <h3>Kernels across ranks</h3>
  <p class="hint">Per kernel name, each rank's total; imbalance is the slowest rank against the median of the others.</p>"#,
        ),
        Part::Table("kernel-table", kernels),
        Part::Html(
            r#"<h3>CPU operators across ranks</h3>
  <p class="hint">torch.profiler's CPU operators, each rank's total time in them, nested operators included.</p>"#,
        ),
        Part::Table("cpu-op-table", cpu_ops),
        Part::Html(
            r#"<h3>Stages to kernels</h3>
  <p class="hint">Per stage, the GPU time of the kernels launched while it was the innermost open stage (by each kernel's launch on the host), on each rank; its host time is in the stage table above.</p>"#,
        ),
        Part::Table("stage-kernel-table", stage_kernels),
        Part::Html("<h3>Kernel and operator stragglers</h3>"),
        Part::Table("kernel-straggler-table", kernel_stragglers),
        Part::Html(
            r#"<h3>Collectives</h3>
  <p class="hint">The k-th call of a collective kind and group on each rank taken as one collective: waiting is the time from a rank's arrival to the last rank's (its time in the call past the least any rank spent there: the ranks leave together), counted over the steady calls (those in no rank's warm-up, stall or profiler step); the last to arrive imposes that wait on the others.</p>"#,
        ),
        Part::Table("collective-table", collectives),
    ],
};

/// GPUs shown in the GPU time table; the rest are counted.
const GPU_ROWS: usize = 16;
/// Kernels shown; report.json lists more.
const KERNEL_ROWS: usize = 10;
/// Kernel stragglers shown.
const KERNEL_STRAGGLER_ROWS: usize = 10;
/// Collective kinds and groups shown.
const COLLECTIVE_ROWS: usize = 10;

/// Every kernel section that has data.
fn write_summary(out: &mut String, report: &Report) -> std::fmt::Result {
    write_gpu_time(out, report)?;
    write_kernel_table(
        out,
        "Kernels across ranks (by total time):",
        &report.kernels,
    )?;
    write_kernel_table(
        out,
        "CPU operators across ranks (by total time, nested operators included):",
        &report.cpu_ops,
    )?;
    write_kernel_table(
        out,
        "GPU time of the kernels each stage launched (the innermost open stage; calls: kernels):",
        &report.stage_kernels,
    )?;
    write_kernel_stragglers(out, report)?;
    write_collectives(out, report)?;
    write_cuts(out, report)
}

fn write_gpu_time(out: &mut String, report: &Report) -> std::fmt::Result {
    if report.gpu_time.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nGPU time per rank (kernel traces; HTA's temporal breakdown, % of the window):"
    )?;
    writeln!(
        out,
        "{:>6} {:>4} {:>10} {:>7} {:>9} {:>12} {:>9} {:>9} {:>10}",
        "Rank",
        "GPU",
        "Window s",
        "Idle%",
        "Compute%",
        "Non-compute%",
        "Comm s",
        "Memory s",
        "Overlap%"
    )?;
    for g in report.gpu_time.iter().take(GPU_ROWS) {
        writeln!(
            out,
            "{:>6} {:>4} {:>10} {:>7} {:>9} {:>12} {:>9} {:>9} {:>10}",
            g.rank,
            g.gpu.map_or("-".into(), |i| i.to_string()),
            fit(g.window_s, 3, 10),
            fit(g.idle_pct, 1, 7),
            fit(g.compute_pct, 1, 9),
            fit(g.non_compute_pct, 1, 12),
            fit(g.communication_s, 3, 9),
            fit(g.memory_s, 3, 9),
            g.comm_overlap_pct.map_or("-".into(), |p| fit(p, 1, 10)),
        )?;
    }
    if report.gpu_time.len() > GPU_ROWS {
        writeln!(
            out,
            "... and {} more GPUs (report.json has them all)",
            report.gpu_time.len() - GPU_ROWS
        )?;
    }
    Ok(())
}

/// `kernels[]` or `cpu_ops[]` under `title`.
fn write_kernel_table(out: &mut String, title: &str, rows: &[KernelStats]) -> std::fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out, "\n{title}")?;
    writeln!(
        out,
        "{:<NAME_WIDTH$} {:<13} {:>8} {:>10} {:>14} {:>14} {:>7}",
        "Name", "Kind", "Calls", "Total s", "Least rank", "Most rank", "Imbal%"
    )?;
    for k in rows.iter().take(KERNEL_ROWS) {
        writeln!(
            out,
            "{} {} {:>8} {:>10} {:>14} {:>14} {:>7}",
            column(&k.name, NAME_WIDTH),
            column(&k.category, 13),
            fit(k.calls as f64, 0, 8),
            fit(k.total_s, 4, 10),
            cell(&format!("r{} {}", k.min_rank, fit(k.min_s, 4, 8)), 14),
            cell(&format!("r{} {}", k.max_rank, fit(k.max_s, 4, 8)), 14),
            fit(k.imbalance_pct, 1, 7),
        )?;
    }
    if rows.len() > KERNEL_ROWS {
        writeln!(
            out,
            "... and {} more rows (report.json has them)",
            rows.len() - KERNEL_ROWS
        )?;
    }
    Ok(())
}

fn write_kernel_stragglers(out: &mut String, report: &Report) -> std::fmt::Result {
    if report.kernel_stragglers.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nKernel and operator stragglers:")?;
    for k in report.kernel_stragglers.iter().take(KERNEL_STRAGGLER_ROWS) {
        write_wrapped(
            out,
            "  ",
            &format!(
                "rank {} in {} `{}`: {:.2}x the others' median (+{:.6} s)",
                k.rank,
                k.category,
                cell(&k.kernel, 80),
                k.slowdown,
                k.excess_s
            ),
        )?;
        for evidence in &k.evidence {
            write_wrapped(out, "    ", evidence)?;
        }
    }
    if report.kernel_stragglers.len() > KERNEL_STRAGGLER_ROWS {
        writeln!(
            out,
            "  ... and {} more (report.json has them)",
            report.kernel_stragglers.len() - KERNEL_STRAGGLER_ROWS
        )?;
    }
    Ok(())
}

/// Per collective kind and group over all ranks: the time in the calls,
/// how much of it was waiting for the last rank, and who arrived last most.
fn write_collectives(out: &mut String, report: &Report) -> std::fmt::Result {
    if report.collectives.is_empty() {
        return Ok(());
    }
    let mut groups: BTreeMap<(&str, Option<&str>), Vec<&CollectiveStats>> = BTreeMap::new();
    for c in &report.collectives {
        groups
            .entry((c.kind.as_str(), c.group.as_deref()))
            .or_default()
            .push(c);
    }
    let mut rows: Vec<_> = groups.into_iter().collect();
    let total = |rows: &[&CollectiveStats]| rows.iter().map(|c| c.total_s).sum::<f64>();
    rows.sort_by(|a, b| total(&b.1).total_cmp(&total(&a.1)));
    writeln!(
        out,
        "\nCollectives (all ranks; waiting, in steady calls: from a rank's arrival to the last's):"
    )?;
    writeln!(
        out,
        "{:<20} {:<10} {:>7} {:>10} {:>16} {:>22}",
        "Kind", "Group", "Calls", "Total s", "Waiting s", "Last to arrive most"
    )?;
    for ((kind, group), ranks) in rows.iter().take(COLLECTIVE_ROWS) {
        let waits: Option<f64> = ranks.iter().map(|c| c.wait_s).sum();
        let sum = total(ranks);
        let waiting = match waits {
            Some(w) if sum > 0.0 => format!("{} ({:.0}%)", fit(w, 4, 8), w / sum * 100.0),
            _ => "-".into(),
        };
        let late = ranks
            .iter()
            .filter_map(|c| Some((c, c.last_to_arrive.filter(|&n| n > 0)?)))
            .max_by_key(|(_, last)| *last)
            .map_or("-".into(), |(c, last)| {
                format!("r{} ({last} of {})", c.rank, c.steady_compared)
            });
        writeln!(
            out,
            "{} {} {:>7} {:>10} {:>16} {:>22}",
            column(kind, 20),
            column(group.unwrap_or("-"), 10),
            ranks.iter().map(|c| c.calls).sum::<u64>(),
            fit(sum, 4, 10),
            cell(&waiting, 16),
            cell(&late, 22),
        )?;
    }
    if rows.len() > COLLECTIVE_ROWS {
        writeln!(
            out,
            "... and {} more (report.json has them)",
            rows.len() - COLLECTIVE_ROWS
        )?;
    }
    Ok(())
}

/// What the traces' budgets left out, per rank that lost anything.
fn write_cuts(out: &mut String, report: &Report) -> std::fmt::Result {
    for t in &report.kernel_traces {
        let Some(cut) = t.cut.filter(|cut| !cut.is_empty()) else {
            continue;
        };
        write_wrapped(
            out,
            "",
            &format!(
                "Trace of rank {} cut: {} rows past the row budget, {} events past the name \
                 budget, {} names shortened, {} events with unusable times",
                t.rank, cut.rows, cut.names, cut.long_names, cut.bad_times
            ),
        )?;
    }
    Ok(())
}

/// The longest kernel name a table shows (C++ template names run to
/// kilobytes); report.json has them whole.
const KERNEL_NAME_SHOWN: usize = 160;

/// `value` % with one decimal, sorted by it.
fn pct(value: f64) -> Cell {
    Cell::number(Some(value), 1)
}

fn gpu_time(report: &Report) -> Table<'_> {
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

fn kernels(report: &Report) -> Table<'_> {
    names_across_ranks(&report.kernels, "Kernel")
}

fn cpu_ops(report: &Report) -> Table<'_> {
    names_across_ranks(&report.cpu_ops, "CPU operator")
}

fn stage_kernels(report: &Report) -> Table<'_> {
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

fn kernel_stragglers(report: &Report) -> Table<'_> {
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

fn collectives(report: &Report) -> Table<'_> {
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
