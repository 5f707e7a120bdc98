//! `summary.txt`: the terminal table of the top stages across ranks, then
//! stragglers, missing ranks, skipped inputs and recommendations.

use std::fmt::Write;

use crate::model::{LockstepStage, Report};
use rankscope_common::payload::GpuSource;
use rankscope_common::text::{cell, terminal};

/// Stages shown in the table; the rest are counted.
const TOP_STAGES: usize = 20;
const NAME_WIDTH: usize = 28;

/// The summary as text.
pub fn summary(report: &Report) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_summary(&mut out, report);
    out
}

fn write_summary(out: &mut String, report: &Report) -> std::fmt::Result {
    let s = &report.session;
    let rule = "=".repeat(128);
    writeln!(out, "{rule}")?;
    writeln!(
        out,
        "rankscope PROFILING SUMMARY  session {} ({})  ranks {}/{}  {:.3} s  launcher {}  GPU data: {}",
        cell(&s.name, 40),
        cell(&s.id, 40),
        s.ranks_reporting.len(),
        s.world_size,
        s.duration_s,
        cell(&s.launcher, 20),
        if s.gpu_source == GpuSource::Simulated {
            "SIMULATED (not real hardware)"
        } else {
            s.gpu_source.as_str()
        }
    )?;
    writeln!(out, "{rule}")?;
    writeln!(
        out,
        "{:<NAME_WIDTH$} {:>6} {:>11} {:>9} {:>9} {:>9} {:>9} {:>15} {:>15} {:>7} {:>7}",
        "Stage",
        "Calls",
        "Total/rank",
        "Mean ms",
        "Min ms",
        "Max ms",
        "p95 ms",
        "Fastest rank",
        "Slowest rank",
        "Imbal%",
        "Share%"
    )?;
    writeln!(out, "{}", "-".repeat(128))?;
    for stage in report.stages.iter().take(TOP_STAGES) {
        let (t, c) = (&stage.total_s, &stage.per_call_ms);
        writeln!(
            out,
            "{:<NAME_WIDTH$} {:>6} {:>9.3} s {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>15} {:>15} {:>7.1} {:>7.1}",
            cell(&stage.name, NAME_WIDTH),
            stage.count,
            t.avg,
            c.mean,
            c.min,
            c.max,
            c.p95,
            format!("r{} {:.3} s", t.min_rank, t.min),
            format!("r{} {:.3} s", t.max_rank, t.max),
            stage.imbalance_pct,
            stage.share_pct
        )?;
    }
    if report.stages.len() > TOP_STAGES {
        writeln!(
            out,
            "... and {} more stages (stages.csv has them all)",
            report.stages.len() - TOP_STAGES
        )?;
    }
    if report.stages.is_empty() {
        writeln!(out, "(no stages recorded)")?;
    }
    writeln!(out)?;

    if report.stragglers.is_empty() {
        writeln!(out, "Stragglers: none")?;
    } else {
        writeln!(out, "Stragglers:")?;
        for st in &report.stragglers {
            writeln!(
                out,
                "  rank {} in {}: {:.2}x the others' median (+{:.3} s); the others waited {:.3} s",
                st.rank,
                cell(&st.stage, NAME_WIDTH),
                st.slowdown,
                st.excess_s,
                st.wait_s
            )?;
            for evidence in &st.evidence {
                writeln!(out, "    {}", terminal(evidence))?;
            }
        }
    }
    write_lockstep(out, report)?;
    if !s.ranks_missing.is_empty() {
        writeln!(out, "Missing ranks (no data): {}", s.missing_text())?;
    }
    for notice in &s.notices {
        writeln!(
            out,
            "Notice from ranks {}: {}",
            cell(&rankscope_common::text::rank_ranges(&notice.ranks), 40),
            cell(&notice.message, 200)
        )?;
    }
    for skipped in &s.skipped {
        writeln!(
            out,
            "Skipped {}: {}",
            cell(&skipped.source, 200),
            cell(&skipped.reason, 200)
        )?;
    }
    write_gpus(out, report)?;
    write_hosts(out, report)?;
    if let Some(blocks) = &report.diffusion.blocks {
        writeln!(
            out,
            "Blocks: {} blocks, {} frames per rank; {:.2} frames/s, {:.3} blocks/s (slowest rank)",
            blocks.count, blocks.frames, blocks.fps, blocks.bps
        )?;
    }
    if let Some(steps) = &report.diffusion.steps {
        writeln!(
            out,
            "Diffusion steps: {} in all; {:.2} ms median, {:.2} ms p95",
            steps.count, steps.step_ms.p50, steps.step_ms.p95
        )?;
    }
    if !report.recommendations.is_empty() {
        writeln!(out, "\nRecommendations:")?;
        for r in &report.recommendations {
            writeln!(
                out,
                "  [{}] {} ({})",
                r.severity.as_str(),
                cell(&r.message, 200),
                cell(&r.evidence, 200)
            )?;
        }
    }
    Ok(())
}

/// Stages in the lockstep section, those with the most wait first.
const LOCKSTEP_STAGES: usize = 10;
/// Ranks named per lockstep stage, those that imposed the most wait first.
const LOCKSTEP_RANKS: usize = 3;

/// Per stage, call by call: which ranks were slowest and the wait they
/// imposed on the others (the number that matters most for
/// tensor-parallel jobs).
fn write_lockstep(out: &mut String, report: &Report) -> std::fmt::Result {
    let total_wait = |l: &LockstepStage| l.ranks.iter().map(|r| r.wait_imposed_s).sum::<f64>();
    let mut stages: Vec<&LockstepStage> = report
        .lockstep
        .iter()
        .filter(|l| total_wait(l) > 0.0)
        .collect();
    if stages.is_empty() {
        return Ok(());
    }
    stages.sort_by(|a, b| total_wait(b).total_cmp(&total_wait(a)));
    writeln!(
        out,
        "Lockstep waits (call k of a stage on every rank: the slowest rank, and the time the others waited for it):"
    )?;
    for stage in stages.iter().take(LOCKSTEP_STAGES) {
        let mut ranks: Vec<_> = stage.ranks.iter().filter(|r| r.slowest_calls > 0).collect();
        ranks.sort_by(|a, b| b.wait_imposed_s.total_cmp(&a.wait_imposed_s));
        let named: Vec<String> = ranks
            .iter()
            .take(LOCKSTEP_RANKS)
            .map(|r| {
                format!(
                    "r{} slowest in {} ({:.3} s waited)",
                    r.rank, r.slowest_calls, r.wait_imposed_s
                )
            })
            .collect();
        let more = ranks.len().saturating_sub(LOCKSTEP_RANKS);
        writeln!(
            out,
            "  {} ({} call{}): {}{}",
            cell(&stage.stage, NAME_WIDTH),
            stage.calls,
            if stage.calls == 1 { "" } else { "s" },
            named.join("; "),
            if more > 0 {
                format!("; {more} more rank{}", if more == 1 { "" } else { "s" })
            } else {
                String::new()
            }
        )?;
    }
    if stages.len() > LOCKSTEP_STAGES {
        writeln!(
            out,
            "  ... and {} more stages (report.json has them all)",
            stages.len() - LOCKSTEP_STAGES
        )?;
    }
    Ok(())
}

/// A number with `digits` decimals, or `-` where it is missing.
fn opt(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

fn write_gpus(out: &mut String, report: &Report) -> std::fmt::Result {
    if report.gpus.is_empty() {
        return writeln!(
            out,
            "GPUs: no GPU telemetry ({})",
            report.session.gpu_source.as_str()
        );
    }
    let simulated = report.gpus.iter().any(|g| g.source == GpuSource::Simulated);
    writeln!(
        out,
        "\nGPUs{}:",
        if simulated {
            " (SIMULATED readings, not real hardware)"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "{:<5} {:>4} {:<34} {:>17} {:>6} {:>7} {:>8} {:>9} {:>10}",
        "Rank",
        "GPU",
        "Name",
        "Mem peak/total MB",
        "Util%",
        "Temp°C",
        "Power W",
        "Energy J",
        "Throttled%"
    )?;
    for g in &report.gpus {
        writeln!(
            out,
            "{:<5} {:>4} {:<34} {:>17} {:>6} {:>7} {:>8} {:>9} {:>10}",
            format!("r{}", g.rank),
            g.index,
            cell(&g.name, 34),
            format!("{}/{}", opt(g.memory_peak_mb, 0), opt(g.memory_total_mb, 0)),
            opt(g.util_avg, 1),
            opt(g.temp_max_c, 0),
            opt(g.power_avg_w, 0),
            opt(g.energy_j, 1),
            opt(g.throttled_pct, 0),
        )?;
    }
    let mut bottlenecks = report
        .gpus
        .iter()
        .flat_map(|g| g.bottlenecks.iter().map(move |b| (g, b)))
        .peekable();
    if bottlenecks.peek().is_none() {
        return writeln!(out, "GPU bottlenecks: none");
    }
    writeln!(out, "GPU bottlenecks:")?;
    for (g, b) in bottlenecks {
        writeln!(
            out,
            "  r{} GPU {} {}: {}",
            g.rank,
            g.index,
            b.kind.as_str(),
            terminal(&b.evidence)
        )?;
    }
    Ok(())
}

fn write_hosts(out: &mut String, report: &Report) -> std::fmt::Result {
    let hosts: Vec<_> = report
        .ranks
        .iter()
        .filter_map(|r| r.host_telemetry.as_ref().map(|h| (r, h)))
        .collect();
    if hosts.is_empty() {
        return Ok(());
    }
    writeln!(out, "Hosts:")?;
    writeln!(
        out,
        "{:<5} {:<20} {:>13} {:>17} {:>9} {:>11}",
        "Rank", "Host", "CPU% avg/max", "Mem peak/total MB", "Load1 max", "RSS peak MB"
    )?;
    for (rank, h) in hosts {
        writeln!(
            out,
            "{:<5} {:<20} {:>13} {:>17} {:>9} {:>11}",
            format!("r{}", rank.rank),
            cell(&rank.host, 20),
            format!("{}/{}", opt(h.cpu_avg_pct, 0), opt(h.cpu_peak_pct, 0)),
            format!("{:.0}/{:.0}", h.memory_peak_mb, h.memory_total_mb),
            opt(h.load_1_max, 2),
            opt(h.process_rss_peak_mb, 0),
        )?;
    }
    writeln!(out)
}
