//! What the page's template renders: the headline, findings, session
//! settings and notes, as text already formatted.

use serde::Serialize;

use rankscope_common::payload::GpuSource;

use super::table::MAX_TABLE_ROWS;
use super::STYLE;
use crate::model::{Report, Severity};

/// What the template renders: text already formatted, so that the
/// template holds no arithmetic.
#[derive(Serialize)]
pub(super) struct Page {
    title: String,
    name: String,
    schema_version: u32,
    simulated: bool,
    version: &'static str,
    headline: Vec<(String, String)>,
    /// The session's windows with a report, linked.
    windows: Vec<u32>,
    verdict: Option<VerdictLine>,
    findings: Vec<Finding>,
    diffusion: Vec<(String, String)>,
    session: Vec<(String, String)>,
    notes: Vec<String>,
    coalesced_timelines: usize,
    /// Ranks per heatmap column, where a column is a run of ranks.
    ranks_per_column: Option<u32>,
    /// Ranks drawn on the timeline and the step chart, and how many are not.
    ranks_drawn: (u64, u64),
    /// Stages whose percentiles are sketched, within what percent, and
    /// past how many calls a stage's are.
    sketched_stages: Option<(usize, f64, usize)>,
    style: &'static str,
}

/// The verdict as the page shows it.
#[derive(Serialize)]
struct VerdictLine {
    kind: &'static str,
    severity: &'static str,
    sentence: String,
}

/// A recommendation as the page shows it.
#[derive(Serialize)]
struct Finding {
    severity: &'static str,
    category: String,
    message: String,
    evidence: String,
}

/// A recommendation as the page shows it.
fn finding(r: &crate::model::Recommendation) -> Finding {
    Finding {
        severity: r.severity.as_str(),
        category: r.category.clone(),
        message: r.message.clone(),
        evidence: r.evidence.clone(),
    }
}

impl Page {
    /// The page of `report`.
    pub(super) fn new(report: &Report) -> Self {
        let s = &report.session;
        let simulated = s.gpu_source == GpuSource::Simulated;
        let missing = if s.ranks_missing_count == 0 {
            "none".to_string()
        } else {
            format!("{} {}", s.ranks_missing_count, s.missing_text())
        };
        let mut headline = vec![
            ("Session".into(), format!("{} ({})", s.name, s.id)),
            ("Started".into(), utc(s.started_unix_s)),
            ("Duration".into(), format!("{:.3} s", s.duration_s)),
            (
                "Ranks".into(),
                format!("{} of {} reporting", s.ranks_reporting.len(), s.world_size),
            ),
            ("Ranks missing".into(), missing),
            ("GPU data".into(), gpu_source(s.gpu_source).into()),
        ];
        if let Some(window) = &report.window {
            headline.insert(1, ("Window".into(), window.describe()));
        }
        let findings: Vec<Finding> = report.recommendations.iter().map(finding).collect();
        let verdict = report.verdict.as_ref().map(|v| VerdictLine {
            kind: v.kind.as_str(),
            severity: if v.cost_pct >= crate::analysis::verdict::WARNING_PCT {
                Severity::Warning.as_str()
            } else {
                Severity::Info.as_str()
            },
            sentence: v.sentence.clone(),
        });
        Page {
            title: format!("rankscope · {}", s.name),
            name: s.name.clone(),
            schema_version: report.schema_version,
            simulated,
            version: env!("CARGO_PKG_VERSION"),
            headline,
            windows: report.windows.clone(),
            verdict,
            findings,
            diffusion: diffusion(report),
            session: session(report),
            notes: notes(report),
            coalesced_timelines: report
                .series
                .timelines
                .iter()
                .filter(|t| t.coalesced)
                .count(),
            ranks_per_column: (report.series.columns.first())
                .map(|c| c.ranks)
                .filter(|&ranks| ranks > 1),
            ranks_drawn: {
                let ranks = report.ranks.len() as u64;
                let not_drawn = report.series.ranks_not_drawn.min(ranks);
                (ranks - not_drawn, not_drawn)
            },
            sketched_stages: report
                .sketched_stages()
                .map(|(n, e)| (n, e * 100.0, crate::analysis::EXACT_CALLS)),
            style: STYLE,
        }
    }
}

/// Where the GPU data came from, in words.
fn gpu_source(source: GpuSource) -> &'static str {
    match source {
        GpuSource::Nvml => "measured (NVML)",
        GpuSource::Simulated => "SIMULATED (no real GPU)",
        GpuSource::None => "none",
    }
}

/// The diffusion figures, as label and value.
fn diffusion(report: &Report) -> Vec<(String, String)> {
    let d = &report.diffusion;
    let mut lines = Vec::new();
    if let Some(steps) = &d.steps {
        lines.push((
            "Steps".into(),
            format!(
                "{} steps; per step p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms",
                steps.count, steps.step_ms.p50, steps.step_ms.p95, steps.step_ms.p99
            ),
        ));
    }
    if let Some(blocks) = &d.blocks {
        lines.push((
            "Blocks".into(),
            format!(
                "{} blocks of {} frames in all; {:.2} frames/s and {:.3} blocks/s at the \
                 slowest rank's pace",
                blocks.count, blocks.frames, blocks.fps, blocks.bps
            ),
        ));
    }
    for (name, count) in &d.model_parameters {
        lines.push((format!("Parameters: {name}"), format!("{count}")));
    }
    lines
}

/// The session's settings, as label and value.
fn session(report: &Report) -> Vec<(String, String)> {
    let s = &report.session;
    let mut rows = vec![
        ("Session id".to_string(), s.id.clone()),
        ("Run".into(), s.run_id.clone().unwrap_or_else(|| "–".into())),
        ("Launcher".into(), s.launcher.clone()),
        ("Transport".into(), wire_name(&s.transport)),
        ("Clock sync".into(), wire_name(&s.clock_sync)),
        ("Warm-up calls left out".into(), s.warmup_calls.to_string()),
    ];
    rows.extend(s.tags.iter().map(|(k, v)| (format!("Tag: {k}"), v.clone())));
    rows
}

/// `value` as report.json names it (`tcp-pingpong`, not `TcpPingpong`).
fn wire_name(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "–".into(),
    }
}

/// What the reader should know about the data itself: notices, inputs left
/// out, other runs, rows dropped.
fn notes(report: &Report) -> Vec<String> {
    let s = &report.session;
    let mut notes: Vec<String> = s
        .notices
        .iter()
        .map(|n| {
            let ranks: Vec<u32> = n.ranks.clone();
            format!(
                "{} (ranks {})",
                n.message,
                rankscope_common::text::rank_ranges(&ranks)
            )
        })
        .collect();
    notes.extend(
        s.skipped
            .iter()
            .map(|k| format!("left out: {}: {}", k.source, k.reason)),
    );
    notes.extend(
        s.other_runs
            .iter()
            .map(|k| format!("another run: {}: {}", k.source, k.reason)),
    );
    notes.extend(
        s.dropped_rows
            .iter()
            .map(|d| format!("rank {} dropped {} rows of {}", d.rank, d.rows, d.table)),
    );
    if notes.len() > MAX_TABLE_ROWS {
        let more = notes.len() - MAX_TABLE_ROWS;
        notes.truncate(MAX_TABLE_ROWS);
        notes.push(format!("… and {more} more, in report.json"));
    }
    notes
}

/// `unix_s` as `2026-11-26 03:27:10 UTC`.
fn utc(unix_s: f64) -> String {
    let secs = unix_s.floor() as i64;
    let (days, time) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        time / 3_600,
        time % 3_600 / 60,
        time % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_by_hand() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400.5), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_663_630.0), "2026-11-26 03:27:10 UTC");
    }
}
