//! The summary's line helpers: numbers fitted to a column, free text
//! wrapped at the summary's width, lists cut after their first entries.

use std::fmt::Write;

use rankscope_common::text::{cell, wrap};

/// The widest line.
pub(crate) const WIDTH: usize = 100;
/// The width of a name column.
pub(crate) const NAME_WIDTH: usize = 25;

/// `value` in at most `width` characters: with `decimals` decimals, fewer
/// where it does not fit, then in scientific notation.
pub(crate) fn fit(value: f64, decimals: usize, width: usize) -> String {
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
pub(crate) fn write_wrapped(out: &mut String, prefix: &str, text: &str) -> std::fmt::Result {
    let indent = prefix.len() - prefix.trim_start_matches(' ').len() + 4;
    writeln!(out, "{}", wrap(&format!("{prefix}{text}"), WIDTH, indent))
}

/// Entries of a list that summary.txt shows; the rest are counted.
pub(crate) const LISTED: usize = 10;

/// Writes the first `max` of `items` with `write_one`, then a line that
/// counts the rest, `what` they are.
pub(crate) fn write_listed<T>(
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
pub(crate) fn opt(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}
