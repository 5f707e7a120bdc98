//! Recommendations: rules with thresholds, each with the evidence that fired it.

use rankscope_common::text::cell;

use super::stragglers::owns;
use crate::model::{GpuSummary, Recommendation, Report, Severity};

/// A stage taking more than this share of the session is worth a look.
const HOT_STAGE_PCT: f64 = 30.0;

/// The recommendations for an analysed report, most severe first.
pub fn recommend(report: &Report) -> Vec<Recommendation> {
    let mut out = Vec::new();
    let mut add = |severity: Severity, category: &str, message: String, evidence: String| {
        out.push(Recommendation {
            severity,
            category: category.into(),
            message,
            evidence,
        })
    };
    let session = &report.session;
    if !session.ranks_missing.is_empty() {
        add(
            Severity::Critical,
            "data",
            format!(
                "ranks {} sent no data: they crashed, hung or could not reach rank 0; \
                 statistics cover the other ranks only",
                session.missing_text()
            ),
            format!(
                "{} of {} ranks reported",
                session.ranks_reporting.len(),
                session.world_size
            ),
        );
    }
    for skipped in &session.skipped {
        add(
            Severity::Warning,
            "data",
            format!("{} was not used", skipped.source),
            skipped.reason.clone(),
        );
    }
    for s in &report.stragglers {
        // The first finding explains it in the message; the others follow
        // the numbers in the evidence.
        let (explanation, more) = match s.evidence.split_first() {
            Some((first, more)) => (first.as_str(), more),
            None => (
                "no GPU or host bottleneck explains it: check its input and data loading",
                &[][..],
            ),
        };
        add(
            Severity::Warning,
            "straggler",
            format!(
                "rank {} is {:.0}% slower than the median of the other ranks in `{}`; {}",
                s.rank,
                (s.slowdown - 1.0) * 100.0,
                s.stage,
                explanation
            ),
            std::iter::once(format!(
                "{:.3} s over the other ranks' median; the other ranks waited {:.3} s on it",
                s.excess_s, s.wait_s
            ))
            .chain(more.iter().cloned())
            .collect::<Vec<_>>()
            .join("; "),
        );
    }
    // Bottlenecks of a straggler's own GPU are told above.
    let explained = |gpu: &GpuSummary| report.stragglers.iter().any(|s| owns(s.rank, gpu));
    for gpu in report.gpus.iter().filter(|g| !explained(g)) {
        for b in &gpu.bottlenecks {
            add(
                Severity::Warning,
                "gpu",
                format!(
                    "GPU {} of rank {} on {}: {}",
                    gpu.index,
                    gpu.rank,
                    cell(&gpu.host, 40),
                    b.kind.as_str().replace('_', " ")
                ),
                b.evidence.clone(),
            );
        }
    }
    // By self time: a stage that only encloses others is not where the
    // time goes.
    let mut hot: Vec<_> = report
        .stages
        .iter()
        .filter(|s| s.share_pct > HOT_STAGE_PCT)
        .collect();
    hot.sort_by(|a, b| b.share_pct.total_cmp(&a.share_pct));
    for (i, stage) in hot.iter().enumerate() {
        add(
            Severity::Info,
            "stage",
            format!(
                "`{}` takes {:.0}% of the session in its own work (nested stages not counted): {}",
                stage.name,
                stage.share_pct,
                if i == 0 {
                    "the first place to optimise"
                } else {
                    "the next place to optimise"
                }
            ),
            format!(
                "{:.3} s self time per rank on average ({:.3} s with nested stages) over {} calls",
                stage.self_s.avg, stage.total_s.avg, stage.count
            ),
        );
    }
    for dropped in &session.dropped_rows {
        add(
            Severity::Warning,
            "data",
            format!(
                "rank {} dropped {} rows of `{}`: raise max_data_points to keep them",
                dropped.rank, dropped.rows, dropped.table
            ),
            "the table reached max_data_points, or the payload its size limit".into(),
        );
    }
    for rank in &report.ranks {
        let overflow = &rank.overflow;
        if overflow.names_folded > 0 {
            add(
                Severity::Warning,
                "data",
                format!(
                    "rank {} used more distinct names than max_names: {} were recorded as `(other)`; \
                     raise max_names, or keep ids out of stage names",
                    rank.rank, overflow.names_folded
                ),
                "a thread reached max_names".into(),
            );
        }
        if overflow.stages_too_deep > 0 {
            add(
                Severity::Warning,
                "data",
                format!(
                    "rank {} began {} stages while max_open_stages were open on a thread: they \
                     were not recorded; look for start() calls without stop()",
                    rank.rank, overflow.stages_too_deep
                ),
                "a thread reached max_open_stages".into(),
            );
        }
    }
    out.sort_by_key(|r| r.severity);
    out
}
