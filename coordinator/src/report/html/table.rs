//! The page's table writer: a [`Table`] of [`Cell`]s, its rows made one at
//! a time as it is written, every cell's text escaped.

use std::io::Write;

use rankscope_common::text::markup;

/// `text` as the page shows it: control characters made `?`, then
/// escaped as tera's autoescaping escapes a value.
fn escaped(text: &str) -> String {
    tera::escape_html(&markup(text))
}

/// Rows a table shows at most; the rest are in report.json.
pub(crate) const MAX_TABLE_ROWS: usize = 2_000;
/// Rows a table of one row per rank or per GPU shows at most: at a
/// thousand ranks the page shows the charts' distributions and these (the
/// GPUs with a bottleneck first); report.json and stages.csv hold them all.
pub(crate) const PER_RANK_ROWS: usize = 64;

/// A table: its column heads, and its rows of cells, made one at a time as
/// the table is written (the page shows [`MAX_TABLE_ROWS`] of them and
/// counts the rest).
pub(crate) struct Table<'r> {
    heads: Vec<Head>,
    rows: Box<dyn Iterator<Item = Vec<Cell>> + 'r>,
    /// Rows shown at most.
    limit: usize,
}

impl<'r> Table<'r> {
    /// A table of `heads` and `rows`.
    pub(crate) fn new(
        heads: &[(&'static str, bool)],
        rows: impl Iterator<Item = Vec<Cell>> + 'r,
    ) -> Self {
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
    pub(crate) fn limited(self, limit: usize) -> Self {
        Table { limit, ..self }
    }

    /// Writes the table as `<table id="{id}">`, sortable by its columns
    /// (the page's script sorts a numeric column by its cells' `data-sort`).
    pub(crate) fn write_html(self, id: &str, out: &mut impl Write) -> std::io::Result<()> {
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

/// A column head: its label, and whether the column sorts as numbers.
struct Head {
    label: &'static str,
    numeric: bool,
}

/// One cell: its text, the number it sorts by (numeric columns), how deep
/// it is indented (nested stages) and badges (GPU bottlenecks).
#[derive(Default)]
pub(crate) struct Cell {
    /// What the cell shows.
    pub(crate) text: String,
    /// The number a numeric column sorts it by.
    pub(crate) sort: Option<f64>,
    /// How deep it is indented under its parent.
    pub(crate) depth: usize,
    /// Badges under the text: (kind, evidence).
    pub(crate) badges: Vec<(String, String)>,
}

impl Cell {
    /// Writes the cell as a `<td>`, its text escaped.
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

    /// A cell of text.
    pub(crate) fn text(text: impl Into<String>) -> Self {
        Cell {
            text: text.into(),
            ..Cell::default()
        }
    }

    /// `value` with `decimals` decimals; `null` (not measured) as a dash.
    pub(crate) fn number(value: Option<f64>, decimals: usize) -> Self {
        Cell {
            text: value.map_or_else(|| "–".to_string(), |v| format!("{v:.decimals$}")),
            sort: value,
            ..Cell::default()
        }
    }

    /// A value with the rank it belongs to: `1.234 (r3)`.
    pub(crate) fn at_rank(value: f64, rank: u32) -> Self {
        Cell {
            text: format!("{value:.3} (r{rank})"),
            sort: Some(value),
            ..Cell::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
