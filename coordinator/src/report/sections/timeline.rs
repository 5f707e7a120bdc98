//! Timeline: each rank's outermost stages on one clock.

use serde_json::{json, Value};

use super::{Part, Section};
use crate::model::Report;

pub(super) const SECTION: Section = Section {
    id: "timeline",
    link: "Timeline",
    title: "Timeline",
    fields: &["series.timelines", "series.ranks_not_drawn"],
    summary: super::no_summary,
    values,
    parts: &[Part::Html(
        r#"<p class="hint">Each rank's outermost stages on one clock (clock offsets applied where they were measured). Drag or scroll to zoom.
  {%- if coalesced_timelines > 0 %} {{ coalesced_timelines }} rank(s) ran more stages than fit: each of their bars is the stage that ran most within its stretch of time.{% endif %}
  {%- if ranks_drawn.1 > 0 %} {{ ranks_drawn.0 }} ranks are drawn, the stragglers and then the ranks with the most time in stages; {{ ranks_drawn.1 }} more are not (here and in the step times).{% endif %}</p>
  <div class="chart tall" id="chart-timeline" data-empty="No stages were recorded."></div>"#,
    )],
};

/// What the template renders: the ranks whose timelines were coalesced,
/// and the ranks drawn and not.
fn values(report: &Report) -> Value {
    let ranks = report.ranks.len() as u64;
    let not_drawn = report.series.ranks_not_drawn.min(ranks);
    json!({
        "coalesced_timelines": report.series.timelines.iter().filter(|t| t.coalesced).count(),
        "ranks_drawn": (ranks - not_drawn, not_drawn),
    })
}
