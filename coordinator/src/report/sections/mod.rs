//! The report's sections, in page order. A section is one concept of the
//! report in every format: the report.json fields it owns, its lines of
//! summary.txt and its part of report.html, declared together in its own
//! module. The page and the summary are assembled from [`SECTIONS`], so a
//! section on the list is in both, with its link in the page's navigation;
//! adding a section is one new module and one line in the list.

mod account;
mod diffusion;
mod gpus;
mod kernels;
mod overhead;
mod python;
mod recommendations;
mod session;
mod stages;
mod stragglers;
mod timeline;

use serde_json::Value;

use super::html::table::Table;
use crate::model::Report;

/// Every section, in the order of the page and of summary.txt.
pub(crate) const SECTIONS: [&Section; 11] = [
    &account::SECTION,
    &recommendations::SECTION,
    &stages::SECTION,
    &timeline::SECTION,
    &stragglers::SECTION,
    &kernels::SECTION,
    &python::SECTION,
    &gpus::SECTION,
    &diffusion::SECTION,
    &session::SECTION,
    &overhead::SECTION,
];

/// One part of the report in every format.
pub(crate) struct Section {
    /// The id of its `<section>` in report.html, and its link's anchor.
    pub id: &'static str,
    /// Its link in the page's navigation.
    pub link: &'static str,
    /// Its heading on the page.
    pub title: &'static str,
    /// The report.json fields it owns: top-level names, `series.x` for a
    /// chart series, `ranks.x` for a field of every rank. The page names
    /// them in its heading's tooltip.
    pub fields: &'static [&'static str],
    /// Writes its lines of summary.txt, nothing where it has none.
    pub summary: fn(&mut String, &Report) -> std::fmt::Result,
    /// The values its templates render (an object, or null for none);
    /// `simulated` is there too.
    pub values: fn(&Report) -> Value,
    /// Its part of report.html, in order.
    pub parts: &'static [Part],
}

/// A piece of a section's part of report.html.
pub(crate) enum Part {
    /// A tera template, autoescaped, rendered with the section's values.
    Html(&'static str),
    /// The table of this id, made from the report row by row.
    Table(&'static str, fn(&Report) -> Table<'_>),
}

/// A section's [`Section::values`] where its templates need none.
fn no_values(_: &Report) -> Value {
    Value::Null
}

/// A section's [`Section::summary`] where it has no lines.
fn no_summary(_: &mut String, _: &Report) -> std::fmt::Result {
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The report.json fields the page's head presents (the session, its
    /// window and the verdict), beside those of the sections.
    const HEAD_FIELDS: [&str; 5] = ["schema_version", "session", "window", "windows", "verdict"];

    /// Every field of report.json, and every field of its objects (of each
    /// rank, of the session, each chart series), has one owner: the
    /// section (or the head) that names it, or else the one that names the
    /// object it is in. Every field a section names exists.
    #[test]
    fn every_field_of_report_json_has_one_section() {
        let json = serde_json::to_value(crate::test_support::report_of_one_idle_rank()).unwrap();
        let declared: Vec<&str> = SECTIONS
            .iter()
            .flat_map(|s| s.fields.iter().copied())
            .chain(HEAD_FIELDS)
            .collect();
        // A field of every rank: the first rank's.
        let fields_of = |value: &Value| -> Vec<String> {
            let object = match value {
                Value::Array(items) => items.first(),
                object => Some(object),
            };
            let keys = object.and_then(Value::as_object).map(|o| o.keys().cloned());
            keys.into_iter().flatten().collect()
        };
        for path in &declared {
            let (top, field) = path.split_once('.').unwrap_or((path, ""));
            let fields = fields_of(&json[top]);
            let there =
                json.get(top).is_some() && (field.is_empty() || fields.iter().any(|f| f == field));
            assert!(there, "no {path} in report.json");
        }
        let owners = |path: &str| declared.iter().filter(|d| **d == path).count();
        for (top, value) in json.as_object().unwrap() {
            assert!(owners(top) <= 1, "{top} has {} owners", owners(top));
            for field in fields_of(value) {
                let path = format!("{top}.{field}");
                let owned = match owners(&path) {
                    0 => owners(top),
                    named => named,
                };
                assert_eq!(owned, 1, "report.json's {path}: {owned} owners");
            }
            assert!(
                owners(top) == 1 || !fields_of(value).is_empty(),
                "{top} has no section"
            );
        }
    }

    #[test]
    fn each_section_has_its_own_id_and_tables() {
        let mut ids = BTreeSet::new();
        for section in SECTIONS {
            assert!(ids.insert(section.id), "{} twice", section.id);
            for part in section.parts {
                if let Part::Table(id, _) = part {
                    assert!(ids.insert(id), "{id} twice");
                }
            }
            // Written into the page as they are: nothing to escape.
            for text in [section.id, section.link, section.title]
                .iter()
                .chain(section.fields)
            {
                assert!(!text.contains(['<', '>', '&', '"']), "{text}");
            }
        }
    }
}
