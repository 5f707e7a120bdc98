//! The time account: where each rank's time went, every second in one
//! category, and the job's, of which each finding is a slice.

use std::fmt::Write;

use serde_json::{json, Value};

use super::{Part, Section};
use crate::model::{AccountScope, Categories, Category, Report, TimeAccount};
use crate::report::html::table::{Cell, Table, PER_RANK_ROWS};
use crate::report::summary::lines::{write_wrapped, LISTED};

pub(super) const SECTION: Section = Section {
    id: "account",
    link: "Time account",
    title: "Where the time went",
    fields: &["time_account"],
    summary: write_summary,
    values,
    parts: &[
        Part::Html(
            r#"{%- if ranks == 0 %}<p class="none">No time was accounted for.</p>{% else %}
  <p class="hint">Each rank's {{ scope }} split once: every second in one category, the categories adding up to its wall time. The job's is the path through rank {{ reference }} (its span is the job's), with its waiting put where the job spent it: in the set-up, one-off time or extra work of the ranks it waited for. Each finding above is a slice of the job's; its cost is what removing it would save.
  {%- if ranks > per_rank %} Past {{ per_rank }} ranks the chart shows each category's spread across the ranks.{% endif %}</p>
  <div class="chart" id="chart-account" data-empty="No time was accounted for."></div>
  {%- for note in notes %}<p class="hint">{{ note }}</p>{% endfor %}
  {%- endif %}"#,
        ),
        Part::Table("account-table", table),
    ],
};

/// What the template renders.
fn values(report: &Report) -> Value {
    let account = &report.time_account;
    json!({
        "ranks": account.ranks.len(),
        "per_rank": PER_RANK_ROWS,
        "scope": scope_words(account.scope),
        "reference": account.job.critical_path.rank,
        "notes": account.notes,
    })
}

/// What the account covers, in words.
fn scope_words(scope: AccountScope) -> &'static str {
    match scope {
        AccountScope::Session => "session",
        AccountScope::Window => "window",
        AccountScope::Traces => "traced window",
    }
}

/// The job's categories in a line, the largest first, then (for a few
/// ranks) a row per rank, percent of its wall.
fn write_summary(out: &mut String, report: &Report) -> std::fmt::Result {
    let account = &report.time_account;
    let job = &account.job;
    if account.ranks.is_empty() || job.wall_s <= 0.0 {
        return Ok(());
    }
    writeln!(
        out,
        "Time account ({}, the job's {:.3} s through rank {}):",
        scope_words(account.scope),
        job.wall_s,
        job.critical_path.rank.unwrap_or(0)
    )?;
    write_wrapped(out, "  job: ", &in_words(&job.categories, job.wall_s))?;
    if account.ranks.len() <= LISTED {
        let head: String = Category::ALL
            .iter()
            .map(|c| format!("{:>9}", short(*c)))
            .collect();
        writeln!(out, "  Rank    Wall s{head}")?;
        for rank in &account.ranks {
            let cells: String = Category::ALL
                .iter()
                .map(|&c| match rank.categories.get(c) {
                    Some(s) => format!("{:>8.1}%", percent(s, rank.wall_s).max(0.0)),
                    None => format!("{:>9}", "-"),
                })
                .collect();
            writeln!(out, "  {:>4} {:>9.3}{cells}", rank.rank, rank.wall_s)?;
        }
    } else {
        for spread in account.spread.iter().filter(|s| s.max_s > 0.0) {
            writeln!(
                out,
                "  {:<20} least {:.3} s (r{}), median {:.3} s, most {:.3} s (r{})",
                spread.category.words(),
                spread.min_s,
                spread.min_rank,
                spread.p50_s,
                spread.max_s,
                spread.max_rank
            )?;
        }
    }
    for note in &account.notes {
        write_wrapped(out, "  note: ", note)?;
    }
    Ok(())
}

/// A category's short name, for a column head.
fn short(category: Category) -> &'static str {
    match category {
        Category::Setup => "setup",
        Category::Warmup => "warmup",
        Category::Profiler => "profiler",
        Category::Stall => "stall",
        Category::Work => "work",
        Category::CollectiveTransfer => "transfer",
        Category::CollectiveWait => "wait",
        Category::Untracked => "no stage",
        Category::Teardown => "teardown",
    }
}

/// `part` of `whole`, percent; 0 for an empty whole.
fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}

/// The measured categories of `categories`, the largest first, with their
/// share of `wall_s`; those under a millisecond left out.
fn in_words(categories: &Categories, wall_s: f64) -> String {
    let mut listed: Vec<(Category, f64)> = categories
        .iter()
        .filter_map(|(c, s)| Some((c, s?)))
        .filter(|&(_, s)| s >= 1e-3)
        .collect();
    listed.sort_by(|a, b| b.1.total_cmp(&a.1));
    listed
        .iter()
        .map(|(c, s)| format!("{} {s:.3} s ({:.1}%)", c.words(), percent(*s, wall_s)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A row per rank (the first [`PER_RANK_ROWS`]), its seconds by category.
fn table(report: &Report) -> Table<'_> {
    let account: &TimeAccount = &report.time_account;
    let rows = account.ranks.iter().map(|r| {
        let mut cells = vec![
            Cell::number(Some(f64::from(r.rank)), 0),
            Cell::number(Some(r.wall_s), 3),
        ];
        cells.extend(
            Category::ALL
                .iter()
                .map(|&c| Cell::number(r.categories.get(c), 3)),
        );
        let launch = r.gpu.as_ref().and_then(|g| g.launch_bound_share());
        cells.push(Cell::number(launch.map(|s| s * 100.0), 0));
        cells
    });
    Table::new(
        &[
            ("Rank", true),
            ("Wall s", true),
            ("Set-up s", true),
            ("Warm-up s", true),
            ("Profiler s", true),
            ("Stall s", true),
            ("Work s", true),
            ("Transfer s", true),
            ("Wait s", true),
            ("Untracked s", true),
            ("Teardown s", true),
            ("GPU idle in host work %", true),
        ],
        rows,
    )
    .limited(PER_RANK_ROWS)
}
