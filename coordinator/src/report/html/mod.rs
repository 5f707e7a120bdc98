//! `report.html`: one self-contained page (no network: the chart library and
//! the data are inlined) rendered with tera, autoescaping on. The tables are
//! written here, row by row into their slots of the page; the charts are
//! drawn in the browser by the vendored Apache ECharts build from
//! `report.series`.
//!
//! Every string from a rank (stage names, tags, hosts, messages) reaches the
//! page through tera's autoescaping (in the template, or by
//! [`tera::escape_html`] in a table) or inside the JSON data block, where
//! [`write_script_json`] escapes what could end the `<script>` element.

mod kernels;

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use super::stage_tree;
use rankscope_common::payload::GpuSource;
use rankscope_common::text::markup;

use crate::model::{GpuSummary, GpuTime, RankValue, Report, Series, Severity};

const TEMPLATE: &str = include_str!("../../../templates/report.html");
const STYLE: &str = include_str!("../../../assets/report.css");
const SCRIPT: &str = include_str!("../../../assets/report.js");
const ECHARTS: &str = include_str!("../../../assets/echarts/echarts.min.js");

/// Where the template's large parts go, in page order: literal text of the
/// template, which no rendered value can produce (autoescaping turns every
/// `<` of a value into `&lt;`), filled in as the page is written. A table's
/// comment gives way to the table; a script element keeps its tag.
const SLOTS: [(&str, Slot); 15] = [
    (
        "<!--table stage-table-->",
        Slot::Table("stage-table", stages),
    ),
    (
        "<!--table straggler-table-->",
        Slot::Table("straggler-table", stragglers),
    ),
    (
        "<!--table lockstep-table-->",
        Slot::Table("lockstep-table", lockstep),
    ),
    (
        "<!--table gpu-time-table-->",
        Slot::Table("gpu-time-table", kernels::gpu_time),
    ),
    (
        "<!--table kernel-table-->",
        Slot::Table("kernel-table", kernels::kernels),
    ),
    (
        "<!--table cpu-op-table-->",
        Slot::Table("cpu-op-table", kernels::cpu_ops),
    ),
    (
        "<!--table stage-kernel-table-->",
        Slot::Table("stage-kernel-table", kernels::stage_kernels),
    ),
    (
        "<!--table kernel-straggler-table-->",
        Slot::Table("kernel-straggler-table", kernels::kernel_stragglers),
    ),
    (
        "<!--table collective-table-->",
        Slot::Table("collective-table", kernels::collectives),
    ),
    ("<!--table gpu-table-->", Slot::Table("gpu-table", gpus)),
    ("<!--table rank-table-->", Slot::Table("rank-table", ranks)),
    (
        "<!--table overhead-table-->",
        Slot::Table("overhead-table", overhead),
    ),
    (
        "<script type=\"application/json\" id=\"report-data\">",
        Slot::Data,
    ),
    ("<script id=\"echarts\">", Slot::Script(ECHARTS)),
    ("<script id=\"report-script\">", Slot::Script(SCRIPT)),
];

/// What fills a slot of the page.
#[derive(Clone, Copy)]
enum Slot {
    /// The table of this id, made from the report by the function.
    Table(&'static str, fn(&Report) -> Table<'_>),
    /// The charts' data, as JSON.
    Data,
    /// A script of the page's own.
    Script(&'static str),
}

/// Writes the page of `report` to `out`. The tables, the data and the
/// scripts are streamed into their slots, never copied into the rendered
/// template; each table's rows are made one at a time as it is written.
pub fn write_html(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let mut tera = tera::Tera::default();
    // The name ends in `.html`: tera autoescapes every `{{ }}` in it.
    tera.add_raw_template("report.html", TEMPLATE)
        .map_err(std::io::Error::other)?;
    let context =
        tera::Context::from_serialize(Page::new(report)).map_err(std::io::Error::other)?;
    let page = tera
        .render("report.html", &context)
        .map_err(std::io::Error::other)?;
    // Names are the ranks' own: no control character of theirs reaches the
    // page (the data slot's JSON escapes them).
    let page = markup(&page);
    let mut rest = page.as_ref();
    for (marker, slot) in SLOTS {
        let (before, after) = rest.split_once(marker).ok_or_else(|| {
            std::io::Error::other(format!("the page template lost its slot {marker}"))
        })?;
        out.write_all(before.as_bytes())?;
        match slot {
            Slot::Table(id, table) => table(report).write_html(id, out)?,
            Slot::Data => {
                out.write_all(marker.as_bytes())?;
                write_script_json(&ChartData::new(report), out)?;
            }
            Slot::Script(script) => {
                out.write_all(marker.as_bytes())?;
                out.write_all(script.as_bytes())?;
            }
        }
        rest = after;
    }
    out.write_all(rest.as_bytes())
}

/// `text` as the page shows it: control characters made `?`, then
/// escaped as tera's autoescaping escapes a value.
fn escaped(text: &str) -> String {
    tera::escape_html(&markup(text))
}

/// Writes `value` as JSON that can sit inside a `<script>` element: `<`,
/// `>` and `&` (so no `</script>` or `<!--` can appear) and the line
/// separators U+2028/U+2029 written as `\u` escapes, which JSON reads back
/// as the same characters.
pub fn write_script_json(value: &impl Serialize, out: &mut impl Write) -> std::io::Result<()> {
    serde_json::to_writer(ScriptSafe(out), value).map_err(std::io::Error::other)
}

/// Passes JSON through, escaping what [`write_script_json`] promises.
/// The characters escaped only ever occur inside JSON strings, where a
/// `\u` escape means the same.
struct ScriptSafe<W>(W);

impl<W: Write> Write for ScriptSafe<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            let escape: Option<(&[u8], usize)> = match bytes[i] {
                b'<' => Some((b"\\u003c", 1)),
                b'>' => Some((b"\\u003e", 1)),
                b'&' => Some((b"\\u0026", 1)),
                // U+2028 and U+2029 are E2 80 A8 and E2 80 A9 in UTF-8;
                // serde_json writes each character in one call.
                0xE2 if bytes[i..].starts_with(&[0xE2, 0x80, 0xA8]) => Some((b"\\u2028", 3)),
                0xE2 if bytes[i..].starts_with(&[0xE2, 0x80, 0xA9]) => Some((b"\\u2029", 3)),
                _ => None,
            };
            match escape {
                Some((text, len)) => {
                    self.0.write_all(&bytes[start..i])?;
                    self.0.write_all(text)?;
                    i += len;
                    start = i;
                }
                None => i += 1,
            }
        }
        self.0.write_all(&bytes[start..])?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// What the charts draw, from the report: its bounded series and the few
/// names they need, not the whole report (whose stage and lockstep lists
/// grow with the number of stage names).
#[derive(Serialize)]
struct ChartData<'a> {
    gpu_source: GpuSource,
    ranks: Vec<u32>,
    /// The names of the heatmap's rows (`series.stage_totals_s`).
    heatmap_stages: Vec<&'a str>,
    block_fps: &'a [RankValue],
    /// The GPUs (positions in `series.gpus`) with a bottleneck: drawn on
    /// their own when there are too many GPUs to draw each.
    flagged_gpus: Vec<usize>,
    series: &'a Series,
    /// Each rank's GPU time from kernel traces.
    gpu_time: &'a [GpuTime],
}

impl<'a> ChartData<'a> {
    fn new(report: &'a Report) -> Self {
        ChartData {
            gpu_source: report.session.gpu_source,
            ranks: report.ranks.iter().map(|r| r.rank).collect(),
            heatmap_stages: report
                .stages
                .iter()
                .take(report.series.stage_totals_s.len())
                .map(|s| s.name.as_str())
                .collect(),
            block_fps: report
                .diffusion
                .blocks
                .as_ref()
                .map_or(&[], |b| b.per_rank_fps.as_slice()),
            flagged_gpus: (report.gpus.iter().enumerate())
                .filter(|(_, gpu)| !gpu.bottlenecks.is_empty())
                .map(|(i, _)| i)
                .collect(),
            series: &report.series,
            gpu_time: &report.gpu_time,
        }
    }
}

/// What the template renders: text already formatted, so that the
/// template holds no arithmetic.
#[derive(Serialize)]
struct Page {
    title: String,
    name: String,
    schema_version: u32,
    simulated: bool,
    version: &'static str,
    headline: Vec<(String, String)>,
    /// The session's windows with a report, linked.
    windows: Vec<u32>,
    top_finding: Option<Finding>,
    findings: Vec<Finding>,
    diffusion: Vec<(String, String)>,
    session: Vec<(String, String)>,
    notes: Vec<String>,
    coalesced_timelines: usize,
    style: &'static str,
}

#[derive(Serialize)]
struct Finding {
    severity: &'static str,
    category: String,
    message: String,
    evidence: String,
}

/// Rows a table shows at most; the rest are in report.json.
const MAX_TABLE_ROWS: usize = 2_000;
/// Rows a table of one row per rank or per GPU shows at most: at a
/// thousand ranks the page shows the charts' distributions and these (the
/// GPUs with a bottleneck first); report.json and stages.csv hold them all.
const PER_RANK_ROWS: usize = 64;

/// A table: its column heads, and its rows of cells, made one at a time as
/// the table is written (the page shows [`MAX_TABLE_ROWS`] of them and
/// counts the rest).
struct Table<'r> {
    heads: Vec<Head>,
    rows: Box<dyn Iterator<Item = Vec<Cell>> + 'r>,
    /// Rows shown at most.
    limit: usize,
}

impl<'r> Table<'r> {
    /// A table of `heads` and `rows`.
    fn new(heads: &[(&'static str, bool)], rows: impl Iterator<Item = Vec<Cell>> + 'r) -> Self {
        Table {
            heads: heads
                .iter()
                .map(|&(label, numeric)| Head { label, numeric })
                .collect(),
            rows: Box::new(rows),
            limit: MAX_TABLE_ROWS,
        }
    }

    /// The table showing at most `limit` rows.
    fn limited(self, limit: usize) -> Self {
        Table { limit, ..self }
    }

    /// Writes the table as `<table id="{id}">`, sortable by its columns
    /// (the page's script sorts a numeric column by its cells' `data-sort`).
    fn write_html(self, id: &str, out: &mut impl Write) -> std::io::Result<()> {
        let mut rows = self.rows.peekable();
        if rows.peek().is_none() {
            return out.write_all(b"<p class=\"none\">None.</p>");
        }
        write!(
            out,
            "<div class=\"scroll\"><table class=\"sortable\" id=\"{id}\">\n<thead><tr>"
        )?;
        for head in &self.heads {
            write!(
                out,
                "<th class=\"{}\" data-numeric=\"{}\" title=\"Sort\">{}</th>",
                if head.numeric { "num" } else { "" },
                head.numeric,
                escaped(head.label)
            )?;
        }
        out.write_all(b"</tr></thead>\n<tbody>")?;
        for row in rows.by_ref().take(self.limit) {
            out.write_all(b"\n<tr>")?;
            for cell in row {
                cell.write_html(out)?;
            }
            out.write_all(b"</tr>")?;
        }
        out.write_all(b"\n</tbody></table></div>")?;
        let more = rows.count();
        if more > 0 {
            write!(
                out,
                "<p class=\"hint\">… and {more} more rows, in report.json.</p>"
            )?;
        }
        Ok(())
    }
}

struct Head {
    label: &'static str,
    numeric: bool,
}

/// One cell: its text, the number it sorts by (numeric columns), how deep
/// it is indented (nested stages) and badges (GPU bottlenecks).
#[derive(Default)]
struct Cell {
    text: String,
    sort: Option<f64>,
    depth: usize,
    badges: Vec<(String, String)>,
}

impl Cell {
    fn write_html(&self, out: &mut impl Write) -> std::io::Result<()> {
        // A number that is not finite sorts as text, as JSON has no
        // number for it.
        match self.sort.filter(|v| v.is_finite()) {
            Some(sort) => write!(out, "<td class=\"num\" data-sort=\"{sort}\"")?,
            None => out.write_all(b"<td class=\"\"")?,
        }
        if self.depth > 0 {
            let indent = self.depth as f64 * 1.2 + 0.4;
            write!(
                out,
                " style=\"padding-left: {indent:.1}em\"><span class=\"nest\">└ </span>"
            )?;
        } else {
            out.write_all(b">")?;
        }
        out.write_all(escaped(&self.text).as_bytes())?;
        for (kind, evidence) in &self.badges {
            write!(
                out,
                "<div><span class=\"badge {}\">{}</span> <span class=\"evidence\">{}</span></div>",
                escaped(kind),
                escaped(&kind.replace('_', " ")),
                escaped(evidence)
            )?;
        }
        out.write_all(b"</td>")
    }

    fn text(text: impl Into<String>) -> Self {
        Cell {
            text: text.into(),
            ..Cell::default()
        }
    }

    /// `value` with `decimals` decimals; `null` (not measured) as a dash.
    fn number(value: Option<f64>, decimals: usize) -> Self {
        Cell {
            text: value.map_or_else(|| "–".to_string(), |v| format!("{v:.decimals$}")),
            sort: value,
            ..Cell::default()
        }
    }

    /// A value with the rank it belongs to: `1.234 (r3)`.
    fn at_rank(value: f64, rank: u32) -> Self {
        Cell {
            text: format!("{value:.3} (r{rank})"),
            sort: Some(value),
            ..Cell::default()
        }
    }
}

fn finding(r: &crate::model::Recommendation) -> Finding {
    Finding {
        severity: r.severity.as_str(),
        category: r.category.clone(),
        message: r.message.clone(),
        evidence: r.evidence.clone(),
    }
}

impl Page {
    fn new(report: &Report) -> Self {
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
        let top_finding = report
            .recommendations
            .iter()
            .find(|r| r.severity != Severity::Info)
            .or(report.recommendations.first())
            .map(finding);
        Page {
            title: format!("rankscope · {}", s.name),
            name: s.name.clone(),
            schema_version: report.schema_version,
            simulated,
            version: env!("CARGO_PKG_VERSION"),
            headline,
            windows: report.windows.clone(),
            top_finding,
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
            style: STYLE,
        }
    }
}

fn gpu_source(source: GpuSource) -> &'static str {
    match source {
        GpuSource::Nvml => "measured (NVML)",
        GpuSource::Simulated => "SIMULATED (no real GPU)",
        GpuSource::None => "none",
    }
}

fn stages(report: &Report) -> Table<'_> {
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

fn stragglers(report: &Report) -> Table<'_> {
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
            ("Excess s", true),
            ("Job time cost s", true),
            ("Others idle rank-s", true),
            ("Evidence", false),
        ],
        rows,
    )
}

fn lockstep(report: &Report) -> Table<'_> {
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

fn gpus(report: &Report) -> Table<'_> {
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

fn ranks(report: &Report) -> Table<'_> {
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

fn overhead(report: &Report) -> Table<'_> {
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
    fn script_json_cannot_close_the_script_element() {
        let hostile = "</script><script>window.pwned=1</script><!-- & \u{2028}\u{2029} é \u{2027}";
        let mut json = Vec::new();
        write_script_json(&hostile, &mut json).unwrap();
        let json = String::from_utf8(json).unwrap();
        for forbidden in ["<", ">", "&", "\u{2028}", "\u{2029}"] {
            assert!(!json.contains(forbidden), "{forbidden:?} in {json}");
        }
        let back: String = serde_json::from_str(&json).unwrap();
        assert_eq!(
            back, hostile,
            "JSON reads the escapes back as the same text"
        );
    }

    #[test]
    fn the_inlined_assets_cannot_close_their_script_element() {
        for asset in [ECHARTS, SCRIPT] {
            assert!(!asset.to_ascii_lowercase().contains("</script"));
        }
    }

    fn table_html(rows: Vec<Vec<Cell>>) -> String {
        let mut out = Vec::new();
        Table::new(&[("Name", false), ("Value", true)], rows.into_iter())
            .write_html("t", &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_table_escapes_its_cells_and_counts_the_rows_it_leaves_out() {
        assert_eq!(table_html(Vec::new()), "<p class=\"none\">None.</p>");
        let row = |i: usize| {
            vec![
                Cell::text(format!("<b>'{i}'</b>\u{7}")),
                Cell::number(Some(if i == 1 { f64::NAN } else { i as f64 }), 0),
            ]
        };
        let page = table_html((0..MAX_TABLE_ROWS + 3).map(row).collect());
        assert!(page.contains("<td class=\"\">&lt;b&gt;&#x27;0&#x27;&lt;&#x2F;b&gt;?</td>"));
        assert!(!page.contains("<b>"), "no markup from a cell");
        assert!(page.contains("<td class=\"num\" data-sort=\"2\">2</td>"));
        assert!(
            page.contains("<td class=\"\">NaN</td>"),
            "a number that is not finite sorts as text"
        );
        assert_eq!(
            page.matches("<tr>").count(),
            MAX_TABLE_ROWS + 1,
            "heads and rows"
        );
        assert!(page.ends_with("<p class=\"hint\">… and 3 more rows, in report.json.</p>"));
    }

    #[test]
    fn civil_dates_by_hand() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400.5), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_663_630.0), "2026-11-26 03:27:10 UTC");
    }
}
