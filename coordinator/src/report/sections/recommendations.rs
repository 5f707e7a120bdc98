//! Recommendations: the judgement's ranking of what cost the job time,
//! each finding with the evidence that fired it.

use std::fmt::Write;

use serde_json::{json, Value};

use super::{Part, Section};
use crate::model::{Recommendation, Report};
use crate::report::summary::lines::write_wrapped;
use rankscope_common::text::cell;

pub(super) const SECTION: Section = Section {
    id: "recommendations",
    link: "Recommendations",
    title: "Recommendations",
    fields: &["recommendations"],
    summary: write_recommendations,
    values: |report| json!({ "findings": report.recommendations.iter().map(finding).collect::<Value>() }),
    parts: &[Part::Html(
        r#"{%- if findings | length == 0 %}<p class="none">Nothing to recommend.</p>{% endif %}
  <ul class="findings">
  {%- for f in findings %}
    <li class="{{ f.severity }}"><span class="severity">{{ f.severity }}</span> <strong>{{ f.category }}</strong> {{ f.message }}
      {%- if f.evidence %}<div class="evidence">{{ f.evidence }}</div>{% endif %}</li>
  {%- endfor %}
  </ul>"#,
    )],
};

/// A recommendation as the page shows it.
fn finding(r: &Recommendation) -> Value {
    json!({
        "severity": r.severity.as_str(),
        "category": r.category,
        "message": r.message,
        "evidence": r.evidence,
    })
}

/// The recommendations, each with its evidence.
fn write_recommendations(out: &mut String, report: &Report) -> std::fmt::Result {
    if report.recommendations.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nRecommendations:")?;
    for r in &report.recommendations {
        write_wrapped(
            out,
            &format!("  [{}] ", r.severity.as_str()),
            &format!("{} ({})", cell(&r.message, 400), cell(&r.evidence, 400)),
        )?;
    }
    Ok(())
}
