//! Session and system: the session's settings, one row per rank (host,
//! process, clock offset, host telemetry, GPUs), the hosts, and what the
//! reader should know about the data itself.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;
use serde_json::json;

use super::{Part, Section};
use crate::model::{HostSummary, Report};
use crate::report::html::table::{Cell, Table, MAX_TABLE_ROWS, PER_RANK_ROWS};
use crate::report::summary::lines::{opt, write_listed, write_wrapped, LISTED};
use rankscope_common::text::{cell, column, rank_ranges};

pub(super) const SECTION: Section = Section {
    id: "session",
    link: "Session",
    title: "Session and system",
    fields: &["ranks"],
    summary: write_summary,
    values: |report| json!({ "session": facts(report), "notes": notes(report) }),
    parts: &[
        Part::Html(
            r#"<dl class="facts">{% for item in session %}<div><dt>{{ item.0 }}</dt><dd>{{ item.1 }}</dd></div>{% endfor %}</dl>"#,
        ),
        Part::Table("rank-table", table),
        Part::Html(
            r#"{%- if notes | length > 0 %}
  <h3>About the data</h3>
  <ul class="notes">{% for n in notes %}<li>{{ n }}</li>{% endfor %}</ul>
  {%- endif %}"#,
        ),
    ],
};

/// What the data lacks, then the hosts.
fn write_summary(out: &mut String, report: &Report) -> std::fmt::Result {
    write_data_notes(out, report)?;
    write_hosts(out, report)
}

/// The session's settings, as label and value.
fn facts(report: &Report) -> Vec<(String, String)> {
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

/// One row per rank.
fn table(report: &Report) -> Table<'_> {
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
            Cell::text(rankscope_common::parallel::label(&r.parallel)),
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
            ("Parallel", false),
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
