//! `report.html`: one self-contained page (no network: the chart library and
//! the data are inlined) rendered with tera, autoescaping on. The tables are
//! written row by row into their slots of the page; the charts are drawn in
//! the browser by the vendored Apache ECharts build from `report.series`.
//!
//! Here the page is put together; `table` writes a table, `sections` and
//! `kernels` make the tables from the report, `page` what the template
//! renders, `charts` the charts' data and `script_json` the JSON that
//! carries it.
//!
//! Every string from a rank (stage names, tags, hosts, messages) reaches the
//! page through tera's autoescaping (in the template, or by
//! [`tera::escape_html`] in a table) or inside the JSON data block, where
//! [`write_script_json`] escapes what could end the `<script>` element.

mod charts;
mod kernels;
mod page;
mod script_json;
mod sections;
mod table;

use std::io::Write;

use rankscope_common::text::markup;

use crate::model::Report;
use charts::ChartData;
use page::Page;
pub use script_json::write_script_json;
use sections::{events, gpus, lockstep, overhead, ranks, stages, stragglers};
use table::Table;

/// The page's tera template.
const TEMPLATE: &str = include_str!("../../../templates/report.html");
/// The page's style sheet, inlined.
const STYLE: &str = include_str!("../../../assets/report.css");
/// The page's own script, inlined.
const SCRIPT: &str = include_str!("../../../assets/report.js");
/// The vendored Apache ECharts build, inlined.
const ECHARTS: &str = include_str!("../../../assets/echarts/echarts.min.js");

/// Where the template's large parts go, in page order: literal text of the
/// template, which no rendered value can produce (autoescaping turns every
/// `<` of a value into `&lt;`), filled in as the page is written. A table's
/// comment gives way to the table; a script element keeps its tag.
const SLOTS: [(&str, Slot); 16] = [
    (
        "<!--table stage-table-->",
        Slot::Table("stage-table", stages),
    ),
    (
        "<!--table straggler-table-->",
        Slot::Table("straggler-table", stragglers),
    ),
    (
        "<!--table event-table-->",
        Slot::Table("event-table", events),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inlined_assets_cannot_close_their_script_element() {
        for asset in [ECHARTS, SCRIPT] {
            assert!(!asset.to_ascii_lowercase().contains("</script"));
        }
    }
}
