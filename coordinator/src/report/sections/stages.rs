//! Stages across ranks: each stage's calls, total and self time, work and
//! wait, percentiles and imbalance, nested stages under their parent; the
//! heatmap of time per stage and rank.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

use serde_json::{json, Value};

use super::{Part, Section};
use crate::model::{Report, Spread, StageStats};
use crate::report::html::table::{Cell, Table};
use crate::report::summary::lines::{fit, NAME_WIDTH, WIDTH};
use rankscope_common::text::{cell, column};

pub(super) const SECTION: Section = Section {
    id: "stages",
    link: "Stages",
    title: "Stages across ranks",
    fields: &[
        "stages",
        "series.columns",
        "series.stage_totals_s",
        "series.stage_slowest",
    ],
    summary: write_summary,
    values,
    parts: &[
        Part::Html(
            r#"<p class="hint">Nested stages are indented under the stage they run in; total includes them, self leaves them out. Share is self time over the session, so shares add up to at most 100 %. Click a column to sort.</p>"#,
        ),
        Part::Table("stage-table", table),
        Part::Html(
            r#"{%- if sketched_stages %}<p class="hint">p50, p95 and p99 of {{ sketched_stages.0 }} stage(s) with more than {{ sketched_stages.2 }} calls across ranks come from a quantile sketch: each within {{ sketched_stages.1 }} % of the call at its rank (report.json: <code>per_call_ms.relative_error</code>). Min, mean and max are exact.</p>{% endif %}
  <h3>Time per stage and rank</h3>
  {%- if ranks_per_column %}<p class="hint">{{ ranks_per_column }} consecutive ranks a column: each cell is the slowest of them, named when you point at it. Every rank's stage rows are in raw/stages.arrow, where the report wrote raw/.</p>{% endif %}
  <div class="chart" id="chart-heatmap" data-empty="No stages were recorded."></div>"#,
        ),
    ],
};

/// What the templates render: the sketched stages (how many, within what
/// percent, past how many calls) and the ranks per heatmap column, where a
/// column is a run of ranks.
fn values(report: &Report) -> Value {
    json!({
        "sketched_stages": report
            .sketched_stages()
            .map(|(n, e)| (n, e * 100.0, crate::analysis::EXACT_CALLS)),
        "ranks_per_column": (report.series.columns.first())
            .map(|c| c.ranks)
            .filter(|&ranks| ranks > 1),
    })
}

/// The stage table, then GPU time beside host time where measured.
fn write_summary(out: &mut String, report: &Report) -> std::fmt::Result {
    write_stage_table(out, report)?;
    write_gpu_times(out, report)
}

/// Stages shown in the table; the rest are counted.
const TOP_STAGES: usize = 20;
/// Stages whose slowest rank took less than this show no imbalance: the
/// table shows milliseconds, and a ratio of microseconds is noise.
const MIN_SHOWN_S: f64 = 0.0005;
/// Indentation per nesting level in the stage table, and the deepest shown.
const INDENT: usize = 2;
const MAX_INDENTED_DEPTH: usize = 4;

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

/// The stage table: nested stages under their parent, with GPU time where measured.
fn table(report: &Report) -> Table<'_> {
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

/// The stages in tree order: each top-level stage (the largest total
/// first) followed by the stages nested in it, with their depth. A stage
/// whose parent is not in the list, or that sits in a loop of parents, is
/// shown at the top.
pub(crate) fn stage_tree(stages: &[StageStats]) -> Vec<(&StageStats, usize)> {
    let mut children: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let known: HashSet<&str> = stages.iter().map(|s| s.name.as_str()).collect();
    let mut roots = Vec::new();
    for (i, stage) in stages.iter().enumerate() {
        match stage.parent.as_deref().filter(|p| known.contains(p)) {
            Some(parent) => children.entry(parent).or_default().push(i),
            None => roots.push(i),
        }
    }
    let mut ordered = Vec::with_capacity(stages.len());
    let mut placed = vec![false; stages.len()];
    // Depth first from each root; then from whatever a loop kept unplaced.
    for start in roots.into_iter().chain(0..stages.len()) {
        let mut stack = vec![(start, 0)];
        while let Some((i, depth)) = stack.pop() {
            if std::mem::replace(&mut placed[i], true) {
                continue;
            }
            ordered.push((&stages[i], depth));
            if let Some(kids) = children.get(stages[i].name.as_str()) {
                stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
            }
        }
    }
    ordered
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
