//! `report.html`: one self-contained page (no network: the chart library and
//! the data are inlined) rendered with tera, autoescaping on. The page is
//! its head, then each of the sections (`report::sections::SECTIONS`) in order (its templates rendered,
//! its tables written row by row between them), then the charts' data and
//! the scripts; the charts are drawn in the browser by the vendored Apache
//! ECharts build from `report.series`.
//!
//! Here the page is put together; `page` is what the head renders, `table`
//! writes a table, `charts` makes the charts' data and `script_json` the
//! JSON that carries it. The sections are `report::sections`.
//!
//! Every string from a rank (stage names, tags, hosts, messages) reaches the
//! page through tera's autoescaping (in a template, or by
//! [`tera::escape_html`] in a table) or inside the JSON data block, where
//! [`write_script_json`] escapes what could end the `<script>` element.

mod charts;
mod page;
mod script_json;
pub(crate) mod table;

use std::io::Write;

use rankscope_common::payload::GpuSource;
use rankscope_common::text::markup;

use super::sections::{Part, Section, SECTIONS};
use crate::model::Report;
use charts::ChartData;
use page::Page;
pub use script_json::write_script_json;

/// The page's head: a tera template.
const HEAD: &str = include_str!("../../../templates/report.html");
/// The page's style sheet, inlined.
const STYLE: &str = include_str!("../../../assets/report.css");
/// The page's own script, inlined.
const SCRIPT: &str = include_str!("../../../assets/report.js");
/// The vendored Apache ECharts build, inlined.
const ECHARTS: &str = include_str!("../../../assets/echarts/echarts.min.js");

/// Writes the page of `report` to `out`. The tables, the data and the
/// scripts are streamed into the page, never copied into a rendered
/// template; each table's rows are made one at a time as it is written.
pub fn write_html(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let tera = templates()?;
    let head = tera::Context::from_serialize(Page::new(report)).map_err(std::io::Error::other)?;
    write_rendered(&tera, "report.html", &head, out)?;
    let simulated = report.session.gpu_source == GpuSource::Simulated;
    for section in SECTIONS {
        write_section(&tera, section, report, simulated, out)?;
    }
    write!(
        out,
        "</main>\n<footer>rankscope {} · report.json schema_version {}</footer>\n\
         <script type=\"application/json\" id=\"report-data\">",
        env!("CARGO_PKG_VERSION"),
        report.schema_version
    )?;
    write_script_json(&ChartData::new(report), out)?;
    write!(
        out,
        "</script>\n<script id=\"echarts\">{ECHARTS}</script>\n\
         <script id=\"report-script\">{SCRIPT}</script>\n</body>\n</html>"
    )
}

/// The head's template and every section's, named `<section id>/<part>.html`
/// (the name ends in `.html`: tera autoescapes every `{{ }}` in them).
fn templates() -> std::io::Result<tera::Tera> {
    let mut tera = tera::Tera::default();
    let sections = SECTIONS.iter().flat_map(|section| {
        (section.parts.iter().enumerate()).filter_map(|(k, part)| match part {
            Part::Html(template) => Some((template_name(section, k), *template)),
            Part::Table(..) => None,
        })
    });
    tera.add_raw_templates(std::iter::once(("report.html".to_string(), HEAD)).chain(sections))
        .map_err(std::io::Error::other)?;
    Ok(tera)
}

/// The name of part `k` of `section`'s templates.
fn template_name(section: &Section, k: usize) -> String {
    format!("{}/{k}.html", section.id)
}

/// Writes `section`: its heading, then its parts in order.
fn write_section(
    tera: &tera::Tera,
    section: &Section,
    report: &Report,
    simulated: bool,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let mut values = match (section.values)(report) {
        serde_json::Value::Null => tera::Context::new(),
        values => tera::Context::from_value(values).map_err(std::io::Error::other)?,
    };
    values.insert("simulated", &simulated);
    // Its id, title and fields are the section's own, with nothing to escape.
    write!(
        out,
        "<section id=\"{}\">\n  <h2 title=\"report.json: {}\">{}</h2>\n  ",
        section.id,
        section.fields.join(", "),
        section.title
    )?;
    for (k, part) in section.parts.iter().enumerate() {
        match part {
            Part::Html(_) => write_rendered(tera, &template_name(section, k), &values, out)?,
            Part::Table(id, table) => table(report).write_html(id, out)?,
        }
        out.write_all(b"\n  ")?;
    }
    out.write_all(b"\n</section>\n\n")
}

/// Renders template `name` with `context` into `out`. Names are the ranks'
/// own: no control character of theirs reaches the page.
fn write_rendered(
    tera: &tera::Tera,
    name: &str,
    context: &tera::Context,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let rendered = tera.render(name, context).map_err(std::io::Error::other)?;
    out.write_all(markup(&rendered).as_bytes())
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
