//! Python functions across ranks (`python_tracing`): each traced
//! function's calls, own and total time, and the ranks with the least and
//! the most of its own time.

use std::fmt::Write;

use super::{Part, Section};
use crate::model::{PythonFunctionStats, Report};
use crate::report::html::table::{Cell, Table};
use crate::report::summary::lines::fit;
use rankscope_common::text::{cell, column};

pub(super) const SECTION: Section = Section {
    id: "python",
    link: "Python",
    title: "Python functions",
    fields: &["python_functions"],
    summary: write_summary,
    values: super::no_values,
    parts: &[
        Part::Html(
            r#"<p class="hint">Traced Python functions (<code>python_tracing</code>), the most own time first: own time is the time in a function's calls less that in the traced calls they made; total time includes them (a recursive call's once). Least and most are the ranks with the least and the most own time in it; imbalance is the most against the median of the other ranks.</p>"#,
        ),
        Part::Table("python-table", functions),
    ],
};

/// Characters of a function's name in summary.txt: qualified names run
/// longer than stage names.
const FUNCTION_WIDTH: usize = 44;
/// Functions shown in summary.txt; report.json lists more.
const SUMMARY_ROWS: usize = 15;
/// Characters of a function's name or file shown on the page.
const NAME_SHOWN: usize = 160;

fn write_summary(out: &mut String, report: &Report) -> std::fmt::Result {
    let functions = &report.python_functions;
    if functions.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nPython functions across ranks (by own time):")?;
    writeln!(
        out,
        "{:<FUNCTION_WIDTH$} {:>9} {:>10} {:>10} {:>14} {:>14} {:>7}",
        "Function", "Calls", "Own s", "Total s", "Least rank", "Most rank", "Imbal%"
    )?;
    for f in functions.iter().take(SUMMARY_ROWS) {
        writeln!(
            out,
            "{} {:>9} {:>10} {:>10} {:>14} {:>14} {:>7}",
            column(&f.name, FUNCTION_WIDTH),
            fit(f.calls as f64, 0, 9),
            fit(f.self_s, 4, 10),
            fit(f.total_s, 4, 10),
            at_rank(f.min_rank, f.min_s),
            at_rank(f.max_rank, f.max_s),
            fit(f.imbalance_pct, 1, 7),
        )?;
    }
    if functions.len() > SUMMARY_ROWS {
        writeln!(
            out,
            "... and {} more functions (report.json has them)",
            functions.len() - SUMMARY_ROWS
        )?;
    }
    Ok(())
}

/// `r3 0.1234`, or `-` where no rank traced it.
fn at_rank(rank: Option<u32>, seconds: Option<f64>) -> String {
    match (rank, seconds) {
        (Some(rank), Some(s)) => cell(&format!("r{rank} {}", fit(s, 4, 8)), 14),
        _ => "-".into(),
    }
}

fn functions(report: &Report) -> Table<'_> {
    let rows = report
        .python_functions
        .iter()
        .map(|f: &PythonFunctionStats| {
            let ranked = |rank: Option<u32>, s: Option<f64>| match (rank, s) {
                (Some(rank), Some(s)) => Cell::at_rank(s, rank),
                _ => Cell::number(None, 0),
            };
            vec![
                Cell::text(cell(&f.name, NAME_SHOWN)),
                Cell::text(cell(&format!("{}:{}", f.file, f.line), NAME_SHOWN)),
                Cell::number(Some(f.calls as f64), 0),
                Cell::number(Some(f.self_s), 4),
                Cell::number(Some(f.total_s), 4),
                ranked(f.min_rank, f.min_s),
                ranked(f.max_rank, f.max_s),
                Cell::number(Some(f.imbalance_pct), 1),
            ]
        });
    Table::new(
        &[
            ("Function", false),
            ("Where", false),
            ("Calls", true),
            ("Own s", true),
            ("Total s", true),
            ("Least per rank s", true),
            ("Most per rank s", true),
            ("Imbalance %", true),
        ],
        rows,
    )
}
