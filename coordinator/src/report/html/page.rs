//! What the page's head renders: the headline, the windows, the verdict
//! and the sections' links, as text already formatted.

use serde::Serialize;

use rankscope_common::payload::GpuSource;

use super::STYLE;
use crate::model::{Report, Severity};
use crate::report::sections::SECTIONS;

/// What the page's head renders: text already formatted, so that the
/// template holds no arithmetic.
#[derive(Serialize)]
pub(super) struct Page {
    title: String,
    name: String,
    simulated: bool,
    headline: Vec<(String, String)>,
    /// The session's windows with a report, linked.
    windows: Vec<u32>,
    verdict: Option<VerdictLine>,
    /// The sections' links, id and text, in page order.
    nav: Vec<(&'static str, &'static str)>,
    style: &'static str,
}

/// The verdict as the page shows it.
#[derive(Serialize)]
struct VerdictLine {
    kind: &'static str,
    severity: &'static str,
    sentence: String,
}

impl Page {
    /// The page of `report`.
    pub(super) fn new(report: &Report) -> Self {
        let s = &report.session;
        let simulated = s.gpu_source == GpuSource::Simulated;
        let missing = if s.ranks_missing_count == 0 {
            "none".to_string()
        } else {
            format!("{} {}", s.ranks_missing_count, s.missing_text())
        };
        let mut headline = vec![
            ("Session".into(), format!("{} ({})", s.name, s.id)),
            ("Started".into(), utc(s.started_unix_s)),
            ("Duration".into(), format!("{:.3} s", s.duration_s)),
            (
                "Ranks".into(),
                format!("{} of {} reporting", s.ranks_reporting.len(), s.world_size),
            ),
            ("Ranks missing".into(), missing),
            ("GPU data".into(), gpu_source(s.gpu_source).into()),
        ];
        if let Some(window) = &report.window {
            headline.insert(1, ("Window".into(), window.describe()));
        }
        let verdict = report.verdict.as_ref().map(|v| VerdictLine {
            kind: v.kind.as_str(),
            severity: if v.cost_pct >= crate::analysis::verdict::WARNING_PCT {
                Severity::Warning.as_str()
            } else {
                Severity::Info.as_str()
            },
            sentence: v.sentence.clone(),
        });
        Page {
            title: format!("rankscope · {}", s.name),
            name: s.name.clone(),
            simulated,
            headline,
            windows: report.windows.clone(),
            verdict,
            nav: SECTIONS.iter().map(|s| (s.id, s.link)).collect(),
            style: STYLE,
        }
    }
}

/// Where the GPU data came from, in words.
fn gpu_source(source: GpuSource) -> &'static str {
    match source {
        GpuSource::Nvml => "measured (NVML)",
        GpuSource::Simulated => "SIMULATED (no real GPU)",
        GpuSource::None => "none",
    }
}

/// `unix_s` as `2026-11-26 03:27:10 UTC`.
fn utc(unix_s: f64) -> String {
    let secs = unix_s.floor() as i64;
    let (days, time) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        time / 3_600,
        time % 3_600 / 60,
        time % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_by_hand() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400.5), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_663_630.0), "2026-11-26 03:27:10 UTC");
    }
}
