//! `summary.txt`: the terminal summary. The banner and the verdict, then
//! each section's lines in the order of the page (the recommendations, the
//! top stages across ranks with nested ones indented, stragglers, kernel
//! traces, GPUs, diffusion, the data's gaps and the hosts, overhead);
//! every line at most [`WIDTH`] columns.

pub(crate) mod lines;

use std::fmt::Write;

use super::sections::SECTIONS;
use crate::model::Report;
use lines::{write_wrapped, WIDTH};
use rankscope_common::payload::GpuSource;
use rankscope_common::text::cell;

/// The summary as text.
pub fn summary(report: &Report) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_summary(&mut out, report);
    out
}

/// The whole summary: the banner, the verdict, then section by section,
/// each after a blank line.
fn write_summary(out: &mut String, report: &Report) -> std::fmt::Result {
    write_header(out, report)?;
    write_verdict(out, report)?;
    for section in SECTIONS {
        // One blank line between sections, whatever their own start and end.
        let mut lines = String::new();
        (section.summary)(&mut lines, report)?;
        let lines = lines.trim_matches('\n');
        if !lines.is_empty() {
            writeln!(out, "\n{lines}")?;
        }
    }
    Ok(())
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
