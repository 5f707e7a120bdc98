//! Diffusion: steps, blocks and parameter counts, with each rank's step
//! times and block throughput over the session.

use std::fmt::Write;

use serde_json::json;

use super::{Part, Section};
use crate::model::Report;

pub(super) const SECTION: Section = Section {
    id: "diffusion",
    link: "Diffusion",
    title: "Diffusion",
    fields: &["diffusion", "series.steps"],
    summary: write_diffusion,
    values: |report| json!({ "diffusion": facts(report) }),
    parts: &[Part::Html(
        r#"{%- if diffusion | length == 0 %}<p class="none">No diffusion steps or blocks were recorded.</p>{% endif %}
  <dl class="facts">{% for item in diffusion %}<div><dt>{{ item.0 }}</dt><dd>{{ item.1 }}</dd></div>{% endfor %}</dl>
  <div class="grid">
    <div><h3>Step time per rank, ms</h3><div class="chart" id="chart-steps" data-empty="No diffusion steps."></div></div>
    <div><h3>Block throughput per rank, frames/s</h3><div class="chart" id="chart-fps" data-empty="No blocks."></div></div>
  </div>"#,
    )],
};

/// The diffusion figures, as label and value.
fn facts(report: &Report) -> Vec<(String, String)> {
    let d = &report.diffusion;
    let mut lines = Vec::new();
    if let Some(steps) = &d.steps {
        lines.push((
            "Steps".into(),
            format!(
                "{} steps; per step p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms",
                steps.count, steps.step_ms.p50, steps.step_ms.p95, steps.step_ms.p99
            ),
        ));
    }
    if let Some(blocks) = &d.blocks {
        lines.push((
            "Blocks".into(),
            format!(
                "{} blocks of {} frames in all; {:.2} frames/s and {:.3} blocks/s at the \
                 slowest rank's pace",
                blocks.count, blocks.frames, blocks.fps, blocks.bps
            ),
        ));
    }
    for (name, count) in &d.model_parameters {
        lines.push((format!("Parameters: {name}"), format!("{count}")));
    }
    lines
}

/// The diffusion figures: blocks and steps, where recorded.
fn write_diffusion(out: &mut String, report: &Report) -> std::fmt::Result {
    if let Some(blocks) = &report.diffusion.blocks {
        writeln!(
            out,
            "Blocks: {} blocks, {} frames per rank; {:.2} frames/s, {:.3} blocks/s (slowest rank)",
            blocks.count, blocks.frames, blocks.fps, blocks.bps
        )?;
    }
    if let Some(steps) = &report.diffusion.steps {
        writeln!(
            out,
            "Diffusion steps: {} in all; {:.2} ms median, {:.2} ms p95",
            steps.count, steps.step_ms.p50, steps.step_ms.p95
        )?;
    }
    Ok(())
}
