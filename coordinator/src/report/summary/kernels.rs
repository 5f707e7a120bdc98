//! The summary's sections from kernel traces: GPU time per rank, the top
//! kernels across ranks, kernel stragglers, collectives and what the
//! traces' budgets cut.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{column, fit, write_wrapped, NAME_WIDTH};
use crate::model::{CollectiveStats, KernelStats, Report};
use rankscope_common::text::cell;

/// GPUs shown in the GPU time table; the rest are counted.
const GPU_ROWS: usize = 16;
/// Kernels shown; report.json lists more.
const KERNEL_ROWS: usize = 10;
/// Kernel stragglers shown.
const KERNEL_STRAGGLER_ROWS: usize = 10;
/// Collective kinds and groups shown.
const COLLECTIVE_ROWS: usize = 10;

/// Every kernel section that has data.
pub(super) fn write_kernels(out: &mut String, report: &Report) -> std::fmt::Result {
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
