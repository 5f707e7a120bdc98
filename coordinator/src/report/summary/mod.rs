//! `summary.txt`: the terminal table of the top stages across ranks (nested
//! stages indented under their parent), the kernel traces' sections, then stragglers, lockstep waits,
//! missing ranks, skipped inputs, GPUs, hosts and recommendations; every
//! line at most [`WIDTH`] columns.

use std::collections::BTreeMap;
use std::fmt::Write;

mod kernels;

use super::stage_tree;
use crate::model::{
    Bottleneck, GpuSummary, HostSummary, LockstepStage, RankOverhead, Report, Spread, StageStats,
};
use rankscope_common::payload::GpuSource;
use rankscope_common::text::{cell, column, rank_ranges, wrap};

/// Stages shown in the table; the rest are counted.
const TOP_STAGES: usize = 20;
const NAME_WIDTH: usize = 25;
/// Stages whose slowest rank took less than this show no imbalance: the
/// table shows milliseconds, and a ratio of microseconds is noise.
const MIN_SHOWN_S: f64 = 0.0005;
/// The widest line.
const WIDTH: usize = 100;
/// Indentation per nesting level in the stage table, and the deepest shown.
const INDENT: usize = 2;
const MAX_INDENTED_DEPTH: usize = 4;

/// The summary as text.
pub fn summary(report: &Report) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_summary(&mut out, report);
    out
}

/// One row of the stage table, at most [`WIDTH`] columns whatever the
/// numbers; `depth` indents the name under its parent. With `waits`, the
/// column of p95 gives the wait per rank in collectives instead. The
/// slowest rank is the one with the most work.
fn stage_row(stage: &StageStats, depth: usize, waits: bool) -> String {
    let (t, c) = (&stage.total_s, &stage.per_call_ms);
    let indent = " ".repeat(depth.min(MAX_INDENTED_DEPTH) * INDENT);
    let name = format!("{indent}{}", column(&stage.name, NAME_WIDTH - indent.len()));
    let slowest = stage.work_s.unwrap_or(*t);
    let rank = format!("r{}", slowest.max_rank);
    format!(
        "{name} {:>5} {:>8} s {:>8} s {:>8} {:>8} {:>14} {:>6} {:>6}",
        fit(stage.count as f64, 0, 5),
        fit(t.avg, 3, 8),
        fit(stage.self_s.avg, 3, 8),
        fit(c.p50, 2, 8),
        if waits {
            stage
                .wait_s
                .map_or_else(|| "-".to_string(), |w| format!("{} s", fit(w.avg, 3, 6)))
        } else {
            fit(c.p95, 2, 8)
        },
        cell(
            &format!(
                "{rank} {} s",
                fit(slowest.max, 3, 14usize.saturating_sub(rank.len() + 3))
            ),
            14
        ),
        // Below the table's resolution a ratio of times says nothing.
        if slowest.max < MIN_SHOWN_S {
            "-".to_string()
        } else {
            fit(stage.imbalance_pct, 1, 6)
        },
        fit(stage.share_pct, 1, 6)
    )
}

/// `value` in at most `width` characters: with `decimals` decimals, fewer
/// where it does not fit, then in scientific notation.
fn fit(value: f64, decimals: usize, width: usize) -> String {
    (0..=decimals)
        .rev()
        .map(|d| format!("{value:.d$}"))
        .chain([format!("{value:.1e}"), format!("{value:.0e}")])
        .find(|text| text.chars().count() <= width)
        .unwrap_or_else(|| cell(&format!("{value:.0e}"), width))
}

/// Free text (a recommendation, a piece of evidence) after `prefix`,
/// wrapped at [`WIDTH`], continuation lines indented 4 past the prefix's
/// own indentation.
fn write_wrapped(out: &mut String, prefix: &str, text: &str) -> std::fmt::Result {
    let indent = prefix.len() - prefix.trim_start_matches(' ').len() + 4;
    writeln!(out, "{}", wrap(&format!("{prefix}{text}"), WIDTH, indent))
}

/// The whole summary, section by section.
fn write_summary(out: &mut String, report: &Report) -> std::fmt::Result {
    write_header(out, report)?;
    write_verdict(out, report)?;
    write_stage_table(out, report)?;
    write_gpu_times(out, report)?;
    kernels::write_kernels(out, report)?;
    writeln!(out)?;
    write_stragglers(out, report)?;
    write_events(out, report)?;
    write_lockstep(out, report)?;
    write_data_notes(out, report)?;
    write_gpus(out, report)?;
    write_hosts(out, report)?;
    write_overhead(out, report)?;
    write_diffusion(out, report)?;
    write_recommendations(out, report)
}

/// The banner: session, ranks, duration, launcher, GPU source and window.
fn write_header(out: &mut String, report: &Report) -> std::fmt::Result {
    let s = &report.session;
    let rule = "=".repeat(WIDTH);
    writeln!(out, "{rule}")?;
    writeln!(
        out,
        "rankscope PROFILING SUMMARY  session {} ({})",
        cell(&s.name, 28),
        cell(&s.id, 32)
    )?;
    writeln!(
        out,
        "ranks {}/{}  {:.3} s  launcher {}  GPU data: {}",
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
    if let Some(window) = &report.window {
        writeln!(out, "{}", window.describe())?;
    }
    writeln!(out, "{rule}")
}

/// The verdict: the costliest explanation of the job's lost time.
fn write_verdict(out: &mut String, report: &Report) -> std::fmt::Result {
    let Some(verdict) = &report.verdict else {
        return Ok(());
    };
    write_wrapped(
        out,
        &format!("VERDICT ({}): ", verdict.kind.as_str()),
        &cell(&verdict.sentence, 600),
    )?;
    if verdict.cost_s > 0.0 {
        writeln!(
            out,
            "    cost: {:.3} s, {:.1}% of the job's {:.3} s",
            verdict.cost_s,
            verdict.cost_pct,
            crate::analysis::verdict::job_seconds(report)
        )?;
    }
    for line in verdict.evidence.iter().take(VERDICT_EVIDENCE) {
        write_wrapped(out, "    - ", &cell(line, 400))?;
    }
    writeln!(out, "{}", "-".repeat(WIDTH))
}

/// Lines of the verdict's evidence in the summary (report.json has all).
const VERDICT_EVIDENCE: usize = 4;

/// The one-off events: the costliest, then a count of the rest.
fn write_events(out: &mut String, report: &Report) -> std::fmt::Result {
    if report.events.is_empty() {
        return Ok(());
    }
    let cost: f64 = report.events.iter().map(|e| e.cost_s).sum();
    writeln!(
        out,
        "One-off events (kept out of the straggler statistics): {}, costing {cost:.3} s",
        report.events.len()
    )?;
    write_listed(out, &report.events, EVENTS_LISTED, "events", |out, e| {
        let ranks = if e.rank_count == 1 {
            format!("rank {}", e.ranks.first().copied().unwrap_or(0))
        } else {
            format!("ranks {}", cell(&rank_ranges(&e.ranks), 40))
        };
        write_wrapped(
            out,
            "  ",
            &format!(
                "{} at {} #{} on {ranks}{}: +{:.3} s",
                e.kind,
                cell(&e.step_stage, NAME_WIDTH),
                e.step,
                e.stage
                    .as_deref()
                    .map(|s| format!(" in {}", cell(s, NAME_WIDTH)))
                    .unwrap_or_else(|| " between steps".into()),
                e.cost_s
            ),
        )
    })
}

/// One-off events listed in the summary; the rest are counted.
const EVENTS_LISTED: usize = 5;

/// The table of the top stages, nested ones indented, after the warm-up note.
fn write_stage_table(out: &mut String, report: &Report) -> std::fmt::Result {
    let warmup_calls = report.session.warmup_calls;
    if warmup_calls > 0 {
        writeln!(
            out,
            "Warm-up left out of the stage table, stragglers and lockstep waits: the first {} \
             calls of each stage on each rank",
            warmup_calls
        )?;
    }
    let waits = report.stages.iter().any(|s| s.wait_s.is_some());
    writeln!(
        out,
        "{:<NAME_WIDTH$} {:>5} {:>10} {:>10} {:>8} {:>8} {:>14} {:>6} {:>6}",
        "Stage (nested indented)",
        "Calls",
        "Total/rank",
        "Self/rank",
        "p50 ms",
        if waits { "Wait/rnk" } else { "p95 ms" },
        "Most work",
        "Imbal%",
        "Share%"
    )?;
    writeln!(out, "{}", "-".repeat(WIDTH))?;
    for (stage, depth) in stage_tree(&report.stages).into_iter().take(TOP_STAGES) {
        writeln!(out, "{}", stage_row(stage, depth, waits))?;
    }
    if waits {
        writeln!(
            out,
            "Wait/rnk: time waiting in collective calls inside the stage; Most work and Imbal% \
             compare the ranks on the rest (their work)"
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
    if let Some((stages, error)) = report.sketched_stages() {
        writeln!(
            out,
            "p50, p95 and p99 of {stages} stage(s) past {} calls across ranks are from a \
             quantile sketch: within {}% of the call at each one's rank",
            crate::analysis::EXACT_CALLS,
            error * 100.0
        )?;
    }
    Ok(())
}

/// The stragglers: the ranks blamed, by what they cost the job (the
/// ranking the verdict and the recommendations share), then each slow
/// stage of each rank with its evidence.
fn write_stragglers(out: &mut String, report: &Report) -> std::fmt::Result {
    let blamed: Vec<_> = report
        .recommendations
        .iter()
        .filter(|r| r.category == "straggler" && r.cost_s.is_some())
        .collect();
    if blamed.is_empty() && report.stragglers.is_empty() {
        return writeln!(out, "Stragglers: none");
    }
    if !blamed.is_empty() {
        writeln!(out, "Stragglers, by what they cost the job:")?;
        for (k, r) in blamed.iter().take(LISTED).enumerate() {
            write_wrapped(out, &format!("  {}. ", k + 1), &cell(&r.message, 400))?;
        }
        if blamed.len() > LISTED {
            writeln!(
                out,
                "  ... and {} more (report.json's recommendations)",
                blamed.len() - LISTED
            )?;
        }
    }
    if report.stragglers.is_empty() {
        return Ok(());
    }
    writeln!(out, "Slow stages (work: waits and one-off calls left out):")?;
    write_listed(out, &report.stragglers, LISTED, "stragglers", |out, st| {
        write_wrapped(
            out,
            "  ",
            &format!(
                "rank {} in {}: work {:.2}x the others' median (+{:.3} s{}); job +{:.3} s, \
                 others idle {:.3} rank-s",
                st.rank,
                cell(&st.stage, NAME_WIDTH),
                st.slowdown,
                st.excess_s,
                st.out_of_spread(),
                st.job_time_s,
                st.wait_s
            ),
        )?;
        for evidence in &st.evidence {
            write_wrapped(out, "    ", evidence)?;
        }
        Ok(())
    })
}

/// What the data lacks: missing ranks, the ranks' notices, files judged by
/// age and inputs skipped.
fn write_data_notes(out: &mut String, report: &Report) -> std::fmt::Result {
    let s = &report.session;
    if !s.ranks_missing.is_empty() {
        write_wrapped(out, "Missing ranks (no data): ", &s.missing_text())?;
    }
    write_listed(out, &s.notices, LISTED, "notices", |out, notice| {
        write_wrapped(
            out,
            &format!(
                "Notice from ranks {}: ",
                cell(&rank_ranges(&notice.ranks), 40)
            ),
            &cell(&notice.message, 400),
        )
    })?;
    if !s.judged_by_age.is_empty() {
        write_wrapped(
            out,
            "",
            &format!(
                "Judged this run's by their age alone (no run id: set RANKSCOPE_RUN_ID per \
                 launch): {} file{}; a run started within seconds of this one could be among \
                 them (report.json session.judged_by_age names them)",
                s.judged_by_age.len(),
                if s.judged_by_age.len() == 1 { "" } else { "s" }
            ),
        )?;
    }
    write_listed(out, &s.skipped, LISTED, "inputs skipped", |out, skipped| {
        write_wrapped(
            out,
            "Skipped ",
            &format!(
                "{}: {}",
                cell(&skipped.source, 200),
                cell(&skipped.reason, 400)
            ),
        )
    })
}

/// The diffusion figures: blocks and steps, where recorded.
fn write_diffusion(out: &mut String, report: &Report) -> std::fmt::Result {
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
    Ok(())
}

/// The recommendations, each with its evidence.
fn write_recommendations(out: &mut String, report: &Report) -> std::fmt::Result {
    if report.recommendations.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nRecommendations:")?;
    for r in &report.recommendations {
        write_wrapped(
            out,
            &format!("  [{}] ", r.severity.as_str()),
            &format!("{} ({})", cell(&r.message, 400), cell(&r.evidence, 400)),
        )?;
    }
    Ok(())
}

/// Stages in the lockstep section, those with the most wait first.
const LOCKSTEP_STAGES: usize = 10;
/// Ranks named per lockstep stage, those that imposed the most wait first.
const LOCKSTEP_RANKS: usize = 3;

/// Host and GPU time side by side, for the stages some rank timed on the
/// GPU (the Python package's CUDA events).
fn write_gpu_times(out: &mut String, report: &Report) -> std::fmt::Result {
    let timed: Vec<(&StageStats, &Spread)> = report
        .stages
        .iter()
        .filter_map(|s| Some((s, s.gpu_s.as_ref()?)))
        .take(TOP_STAGES)
        .collect();
    if timed.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nGPU time per stage (ranks that timed it on the GPU):"
    )?;
    writeln!(
        out,
        "{:<NAME_WIDTH$} {:>10} {:>10} {:>9} {:>16}",
        "Stage", "Host/rank", "GPU/rank", "GPU/host", "Slowest GPU rank"
    )?;
    for (stage, gpu) in timed {
        let ratio = match stage.total_s.avg > 0.0 {
            true => format!("{:.0}%", gpu.avg / stage.total_s.avg * 100.0),
            false => "-".into(),
        };
        writeln!(
            out,
            "{} {:>8.3} s {:>8.3} s {:>9} {:>16}",
            column(&stage.name, NAME_WIDTH),
            stage.total_s.avg,
            gpu.avg,
            ratio,
            format!("r{} {:.3} s", gpu.max_rank, gpu.max),
        )?;
    }
    Ok(())
}

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
        "Lockstep waits (per call k: the slowest rank, and how long the others waited for it):"
    )?;
    write_listed(out, &stages, LOCKSTEP_STAGES, "stages", |out, stage| {
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
        write_wrapped(
            out,
            &format!(
                "  {} ({} call{}): ",
                cell(&stage.stage, NAME_WIDTH),
                stage.calls,
                if stage.calls == 1 { "" } else { "s" }
            ),
            &format!(
                "{}{}",
                named.join("; "),
                if more > 0 {
                    format!("; {more} more rank{}", if more == 1 { "" } else { "s" })
                } else {
                    String::new()
                }
            ),
        )
    })
}

/// Entries of a list that summary.txt shows; the rest are counted.
const LISTED: usize = 10;

/// Writes the first `max` of `items` with `write_one`, then a line that
/// counts the rest, `what` they are.
fn write_listed<T>(
    out: &mut String,
    items: &[T],
    max: usize,
    what: &str,
    mut write_one: impl FnMut(&mut String, &T) -> std::fmt::Result,
) -> std::fmt::Result {
    for item in items.iter().take(max) {
        write_one(out, item)?;
    }
    match items.len().saturating_sub(max) {
        0 => Ok(()),
        more => writeln!(
            out,
            "  ... and {more} more {what} (report.json has them all)"
        ),
    }
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
    if report.gpus.len() > GPU_TABLE_ROWS {
        write_gpu_spread(out, &report.gpus)?;
    } else {
        write_gpu_table(out, &report.gpus)?;
    }
    write_bottlenecks(out, &report.gpus)
}

/// GPUs shown one per row; more become a distribution.
const GPU_TABLE_ROWS: usize = 16;

/// One row per GPU.
fn write_gpu_table(out: &mut String, gpus: &[GpuSummary]) -> std::fmt::Result {
    writeln!(
        out,
        "{:<5} {:>3} {:<33} {:>17} {:>5} {:>6} {:>7} {:>8} {:>5}",
        "Rank",
        "GPU",
        "Name",
        "Mem peak/total MB",
        "Util%",
        "Temp°C",
        "Power W",
        "Energy J",
        "Thr%"
    )?;
    for g in gpus {
        writeln!(
            out,
            "{:<5} {:>3} {} {:>17} {:>5} {:>6} {:>7} {:>8} {:>5}",
            format!("r{}", g.rank),
            g.index,
            column(&g.name, 33),
            format!("{}/{}", opt(g.memory_peak_mb, 0), opt(g.memory_total_mb, 0)),
            opt(g.util_avg, 1),
            opt(g.temp_max_c, 0),
            opt(g.power_avg_w, 0),
            opt(g.energy_j, 1),
            opt(g.throttled_pct, 0),
        )?;
    }
    Ok(())
}

/// One reading of a GPU's summary, where it was measured.
type GpuReading = fn(&GpuSummary) -> Option<f64>;

/// Many GPUs: each reading's distribution over them, min / p50 / p95 /
/// max, with the GPUs at the extremes named.
fn write_gpu_spread(out: &mut String, gpus: &[GpuSummary]) -> std::fmt::Result {
    let ranks = gpus
        .iter()
        .map(|g| g.rank)
        .collect::<std::collections::BTreeSet<_>>();
    write_wrapped(
        out,
        "",
        &format!(
            "{} GPUs on {} ranks, per GPU: min (where) / p50 / p95 / max (where); report.json \
             and raw/gpu_samples.arrow have every GPU",
            gpus.len(),
            ranks.len()
        ),
    )?;
    let readings: [(&str, GpuReading, usize); 6] = [
        ("Mem peak MB", |g| g.memory_peak_mb, 0),
        ("Util %", |g| g.util_avg, 1),
        ("Temp max °C", |g| g.temp_max_c, 0),
        ("Power avg W", |g| g.power_avg_w, 0),
        ("Energy J", |g| g.energy_j, 1),
        ("Throttled %", |g| g.throttled_pct, 0),
    ];
    for (name, reading, digits) in readings {
        let mut values: Vec<(f64, &GpuSummary)> =
            gpus.iter().filter_map(|g| Some((reading(g)?, g))).collect();
        if values.is_empty() {
            writeln!(out, "  {name:<12} not measured")?;
            continue;
        }
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize].0;
        let (low, high) = (values[0], values[values.len() - 1]);
        writeln!(
            out,
            "  {name:<12} {:.digits$} (r{} GPU {}) / {:.digits$} / {:.digits$} / {:.digits$} (r{} GPU {})",
            low.0,
            low.1.rank,
            low.1.index,
            at(0.5),
            at(0.95),
            high.0,
            high.1.rank,
            high.1.index,
        )?;
    }
    Ok(())
}

/// The GPUs' bottlenecks: one line each, or, past [`LISTED`], one per kind
/// with the GPUs it fired on counted and the first named.
fn write_bottlenecks(out: &mut String, gpus: &[GpuSummary]) -> std::fmt::Result {
    let bottlenecks: Vec<(&GpuSummary, &Bottleneck)> = gpus
        .iter()
        .flat_map(|g| g.bottlenecks.iter().map(move |b| (g, b)))
        .collect();
    if bottlenecks.is_empty() {
        return writeln!(out, "GPU bottlenecks: none");
    }
    writeln!(out, "GPU bottlenecks:")?;
    if bottlenecks.len() <= LISTED {
        for (g, b) in bottlenecks {
            write_wrapped(
                out,
                &format!("  r{} GPU {} {}: ", g.rank, g.index, b.kind.as_str()),
                &cell(&b.evidence, 400),
            )?;
        }
        return Ok(());
    }
    let mut by_kind: BTreeMap<&str, Vec<(&GpuSummary, &Bottleneck)>> = BTreeMap::new();
    for (g, b) in bottlenecks {
        by_kind.entry(b.kind.as_str()).or_default().push((g, b));
    }
    for (kind, found) in by_kind {
        let named: Vec<String> = found
            .iter()
            .take(3)
            .map(|(g, _)| format!("r{} GPU {}", g.rank, g.index))
            .collect();
        let more = match found.len().saturating_sub(named.len()) {
            0 => String::new(),
            more => format!(" and {more} more"),
        };
        let (first, example) = found[0];
        write_wrapped(
            out,
            &format!("  {kind} on {} GPUs: ", found.len()),
            &format!(
                "{}{more}; r{} GPU {}: {}",
                named.join(", "),
                first.rank,
                first.index,
                cell(&example.evidence, 400)
            ),
        )?;
    }
    Ok(())
}

/// One row per host: the host's CPU, memory and load as its lowest rank
/// read them (every rank on a host reads the same machine), and the
/// largest rank process.
fn write_hosts(out: &mut String, report: &Report) -> std::fmt::Result {
    let mut hosts: BTreeMap<&str, Vec<(u32, &HostSummary)>> = BTreeMap::new();
    for rank in &report.ranks {
        if let Some(h) = &rank.host_telemetry {
            hosts.entry(&rank.host).or_default().push((rank.rank, h));
        }
    }
    if hosts.is_empty() {
        return Ok(());
    }
    writeln!(out, "Hosts:")?;
    writeln!(
        out,
        "{:<20} {:<12} {:>13} {:>17} {:>9} {:>16}",
        "Host", "Ranks", "CPU% avg/max", "Mem peak/total MB", "Load1 max", "Largest RSS MB"
    )?;
    let hosts: Vec<(&str, Vec<(u32, &HostSummary)>)> = hosts.into_iter().collect();
    write_listed(out, &hosts, LISTED, "hosts", |out, (host, ranks)| {
        let (_, h) = ranks[0];
        let numbers: Vec<u32> = ranks.iter().map(|&(rank, _)| rank).collect();
        let rss = ranks
            .iter()
            .filter_map(|(_, h)| h.process_rss_peak_mb)
            .reduce(f64::max);
        writeln!(
            out,
            "{} {:<12} {:>13} {:>17} {:>9} {:>16}",
            column(host, 20),
            cell(&rank_ranges(&numbers), 12),
            format!("{}/{}", opt(h.cpu_avg_pct, 0), opt(h.cpu_peak_pct, 0)),
            format!("{:.0}/{:.0}", h.memory_peak_mb, h.memory_total_mb),
            opt(h.load_1_max, 2),
            opt(rss, 0),
        )
    })?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Percentiles, Spread};
    use rankscope_common::text::width;

    fn stage(name: &str, parent: Option<&str>) -> StageStats {
        let spread = Spread {
            min: 1.0,
            max: 1.0,
            avg: 1.0,
            std: 0.0,
            min_rank: 0,
            max_rank: 0,
        };
        StageStats {
            name: name.into(),
            parent: parent.map(str::to_string),
            count: 1,
            ranks: 1,
            total_s: spread,
            self_s: spread,
            gpu_s: None,
            per_call_ms: Percentiles {
                p50: 1.0,
                p95: 1.0,
                p99: 1.0,
                min: 1.0,
                mean: 1.0,
                max: 1.0,
                relative_error: None,
            },
            wait_s: None,
            work_s: None,
            one_off_calls: 0,
            imbalance_pct: 0.0,
            share_pct: 0.0,
        }
    }

    #[test]
    fn a_stage_row_fits_the_width_whatever_its_numbers() {
        let mut huge = stage(&"very_long_stage_name_".repeat(5), Some("x"));
        huge.count = 123_456_789_012;
        huge.total_s.avg = 1.5e9;
        huge.total_s.max = 9.9e12;
        huge.total_s.max_rank = u32::MAX;
        huge.self_s.avg = 12_345_678.9;
        huge.per_call_ms.p50 = 1e300;
        huge.per_call_ms.p95 = f64::INFINITY;
        huge.imbalance_pct = 123_456.0;
        huge.share_pct = f64::NAN;
        huge.wait_s = Some(Spread {
            avg: 9.9e15,
            ..huge.total_s
        });
        for (depth, waits) in [(0, false), (3, true), (50, true)] {
            let row = stage_row(&huge, depth, waits);
            assert!(width(&row) <= WIDTH, "{} columns: {row}", width(&row));
        }
        // Wide (CJK) names take two columns a character: the numbers after
        // them still line up, and the row still fits.
        let ascii = stage_row(&stage("vae_decode", None), 0, false);
        for name in ["画像デコード", &"画像デコード".repeat(10)] {
            let wide = stage_row(&stage(name, None), 0, false);
            assert!(width(&wide) <= WIDTH, "{wide}");
            // The columns before the first number's unit.
            let seconds_at = |row: &str| width(&row[..row.find(" s ").expect("a total")]);
            assert_eq!(seconds_at(&wide), seconds_at(&ascii), "{wide}\n{ascii}");
        }
        assert_eq!(fit(0.3619, 3, 8), "0.362");
        assert_eq!(fit(123_456.789_1, 3, 8), "123456.8");
        assert_eq!(fit(123_456_789.0, 3, 8), "1.2e8");
        assert_eq!(fit(123_456.0, 0, 5), "1.2e5");
    }

    #[test]
    fn the_stage_tree_puts_children_under_parents_and_survives_loops() {
        let stages = [
            stage("step", None),
            stage("decode", None),
            stage("attention", Some("denoise")),
            stage("denoise", Some("step")),
            stage("gone", Some("not-in-the-list")),
            // A loop of parents: each shown once, at the top.
            stage("a", Some("b")),
            stage("b", Some("a")),
        ];
        let tree: Vec<(&str, usize)> = stage_tree(&stages)
            .into_iter()
            .map(|(s, depth)| (s.name.as_str(), depth))
            .collect();
        assert_eq!(
            tree,
            [
                ("step", 0),
                ("denoise", 1),
                ("attention", 2),
                ("decode", 0),
                ("gone", 0),
                ("a", 0),
                ("b", 1),
            ]
        );
    }
}
