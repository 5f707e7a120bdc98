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
    values: |report| json!({ "findings": report.recommendations.iter().enumerate().map(|(k, r)| finding(report, k, r)).collect::<Value>() }),
    parts: &[Part::Html(
        r##"{%- if findings | length == 0 %}<p class="none">Nothing to recommend.</p>{% endif %}
  <ol class="findings">
  {%- for f in findings %}
    <li class="{{ f.severity }}" id="finding-{{ f.number }}">{{ f.number }}. <span class="severity">{{ f.severity }}</span> <strong>{{ f.category }}</strong> {% if f.verdict %}<a href="#verdict">the verdict</a>, {{ f.cost }}{% else %}{{ f.message }}{% endif %}
      {%- if f.evidence %}<div class="evidence">{{ f.evidence }}</div>{% endif %}</li>
  {%- endfor %}
  </ol>"##,
    )],
};

/// Whether finding `k` (from 0) of `report` is its verdict's.
pub(super) fn is_verdict(report: &Report, k: usize) -> bool {
    report
        .verdict
        .as_ref()
        .and_then(|v| v.finding)
        .is_some_and(|n| n as usize == k + 1)
}

/// The cost of a finding in words, where it is known.
fn cost_words(report: &Report, r: &Recommendation) -> String {
    let job = report
        .time_account
        .job
        .wall_s
        .max(report.session.duration_s);
    r.cost_s.map_or_else(String::new, |cost| {
        format!(
            "cost the job {cost:.3} s ({:.1}%)",
            if job > 0.0 { cost / job * 100.0 } else { 0.0 }
        )
    })
}

/// Recommendation `k` (from 0) as the page shows it: the verdict's by
/// reference, as the page opens with it.
fn finding(report: &Report, k: usize, r: &Recommendation) -> Value {
    json!({
        "number": k + 1,
        "severity": r.severity.as_str(),
        "category": r.category,
        "message": r.message,
        "evidence": if is_verdict(report, k) { "" } else { r.evidence.as_str() },
        "verdict": is_verdict(report, k),
        "cost": cost_words(report, r),
    })
}

/// The recommendations, numbered, each with its evidence; the verdict's
/// by its number alone (the summary opens with it).
fn write_recommendations(out: &mut String, report: &Report) -> std::fmt::Result {
    if report.recommendations.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nFindings (other places refer to them by number):")?;
    for (k, r) in report.recommendations.iter().enumerate() {
        let prefix = format!("  {}. [{}] ", k + 1, r.severity.as_str());
        if is_verdict(report, k) {
            writeln!(out, "{prefix}the verdict above: {}", cost_words(report, r))?;
            continue;
        }
        write_wrapped(
            out,
            &prefix,
            &format!("{} ({})", cell(&r.message, 400), cell(&r.evidence, 400)),
        )?;
    }
    Ok(())
}
