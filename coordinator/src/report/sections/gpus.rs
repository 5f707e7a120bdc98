//! GPUs: each physical GPU's readings (a distribution past a page of
//! them), its bottlenecks, and its readings over time.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{Part, Section};
use crate::model::{Bottleneck, GpuSummary, Report};
use crate::report::html::table::{Cell, Table, PER_RANK_ROWS};
use crate::report::summary::lines::{opt, write_wrapped, LISTED};
use rankscope_common::payload::GpuSource;
use rankscope_common::text::{cell, column};

pub(super) const SECTION: Section = Section {
    id: "gpus",
    link: "GPUs",
    title: "GPUs",
    fields: &["gpus", "series.gpus"],
    summary: write_gpus,
    values: super::no_values,
    parts: &[
        Part::Html(
            r#"{%- if simulated %}<p class="simulated-note">These GPU readings are SIMULATED: the demo's fake GPUs, not real hardware.</p>{% endif %}"#,
        ),
        Part::Table("gpu-table", table),
        Part::Html(
            r#"<div class="grid">
    <div><h3>Utilisation %</h3><div class="chart" id="chart-gpu-util" data-empty="No GPU readings."></div></div>
    <div><h3>Memory in use, MB</h3><div class="chart" id="chart-gpu-memory" data-empty="No GPU readings."></div></div>
    <div><h3>Temperature °C</h3><div class="chart" id="chart-gpu-temperature" data-empty="No GPU readings."></div></div>
    <div><h3>Power W</h3><div class="chart" id="chart-gpu-power" data-empty="No GPU readings."></div></div>
    <div><h3>SM clock MHz</h3><div class="chart" id="chart-gpu-clock" data-empty="No GPU readings."></div></div>
  </div>"#,
        ),
    ],
};

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

/// One row per GPU, those with a bottleneck first.
fn table(report: &Report) -> Table<'_> {
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
