//! Two reports side by side: for each stage and headline metric (session
//! time, frames/s, blocks/s, peak GPU memory) the change from a baseline
//! run, a change worse than the threshold flagged as a regression unless it
//! stays inside the spread across ranks (noise).

use serde::Serialize;

use crate::analysis::stats::mean_std;
use crate::model::{BlockSummary, Report};

/// What a change amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Worse by more than the threshold and than the noise.
    Regression,
    /// Better by more than the threshold and than the noise.
    Improvement,
    /// Past the threshold, but inside the spread across ranks.
    WithinNoise,
    /// Within the threshold.
    Unchanged,
}

impl Verdict {
    /// The word in the text table.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regression => "REGRESSION",
            Verdict::Improvement => "improvement",
            Verdict::WithinNoise => "within noise",
            Verdict::Unchanged => "unchanged",
        }
    }
}

/// One metric in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// What is measured: `session_time_s`, `stage:<name>`, `fps`,
    /// `blocks_per_s`, `gpu_memory_peak_mb`.
    pub metric: String,
    /// Its unit.
    pub unit: &'static str,
    /// Whether a larger value is better (frames/s) or worse (seconds, MB).
    pub higher_is_better: bool,
    /// The baseline's value.
    pub baseline: f64,
    /// The current run's value.
    pub current: f64,
    /// current / baseline − 1, percent (`null` when the baseline is 0).
    pub change_pct: Option<f64>,
    /// The spread across ranks (the larger standard deviation of the two
    /// runs), in the metric's unit: a change no larger is noise.
    pub noise: f64,
    /// What the change amounts to.
    pub verdict: Verdict,
}

/// The comparison of two reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The threshold, percent.
    pub threshold_pct: f64,
    /// Every metric both runs have.
    pub changes: Vec<Change>,
    /// Stages only the baseline ran.
    pub only_in_baseline: Vec<String>,
    /// Stages only the current run ran.
    pub only_in_current: Vec<String>,
}

impl Comparison {
    /// The metrics that regressed.
    pub fn regressions(&self) -> impl Iterator<Item = &Change> {
        self.changes
            .iter()
            .filter(|c| c.verdict == Verdict::Regression)
    }

    /// Whether the current run is worse: a metric regressed, or a stage
    /// the baseline ran is gone (broken instrumentation, a skipped step).
    pub fn regressed(&self) -> bool {
        self.regressions().next().is_some() || !self.only_in_baseline.is_empty()
    }
}

/// Compares `current` with `baseline`: a change worse than `threshold_pct`
/// percent and larger than the spread across ranks is a regression.
pub fn compare(baseline: &Report, current: &Report, threshold_pct: f64) -> Comparison {
    let mut changes = Changes {
        threshold_pct,
        judged: Vec::new(),
    };
    changes.add(
        "session_time_s".into(),
        "s",
        false,
        session_time(baseline),
        session_time(current),
    );
    changes.add_stages(baseline, current);
    if let (Some(b), Some(c)) = (&baseline.diffusion.blocks, &current.diffusion.blocks) {
        changes.add_throughput(b, c);
    }
    if let (Some(b), Some(c)) = (gpu_memory_peak(baseline), gpu_memory_peak(current)) {
        changes.add("gpu_memory_peak_mb".into(), "MB", false, b, c);
    }
    Comparison {
        threshold_pct,
        changes: changes.judged,
        only_in_baseline: stages_missing(baseline, current),
        only_in_current: stages_missing(current, baseline),
    }
}

/// The changes of a comparison, each judged against `threshold_pct`.
struct Changes {
    threshold_pct: f64,
    judged: Vec<Change>,
}

impl Changes {
    /// Judges `metric` (in `unit`) from `baseline` to `current`, and adds it.
    fn add(
        &mut self,
        metric: String,
        unit: &'static str,
        higher_is_better: bool,
        baseline: Metric,
        current: Metric,
    ) {
        let change = judge(
            metric,
            unit,
            higher_is_better,
            baseline,
            current,
            self.threshold_pct,
        );
        self.judged.push(change);
    }

    /// Adds each stage of `baseline` that `current` ran too: its time per rank.
    fn add_stages(&mut self, baseline: &Report, current: &Report) {
        for stage in &baseline.stages {
            if let Some(now) = current.stages.iter().find(|s| s.name == stage.name) {
                self.add(
                    format!("stage:{}", stage.name),
                    "s/rank",
                    false,
                    Metric::new(stage.total_s.avg, stage.total_s.std),
                    Metric::new(now.total_s.avg, now.total_s.std),
                );
            }
        }
    }

    /// Adds the frames and blocks per second of the baseline's blocks `b`
    /// and the current run's `c`.
    fn add_throughput(&mut self, b: &BlockSummary, c: &BlockSummary) {
        let fps_spread =
            |blocks: &BlockSummary| std_dev(blocks.per_rank_fps.iter().map(|r| r.value));
        self.add(
            "fps".into(),
            "frames/s",
            true,
            Metric::new(b.fps, fps_spread(b)),
            Metric::new(c.fps, fps_spread(c)),
        );
        // Blocks/s moves with frames/s; its noise in proportion.
        let scaled = |blocks: &BlockSummary| {
            if blocks.fps > 0.0 {
                fps_spread(blocks) * blocks.bps / blocks.fps
            } else {
                0.0
            }
        };
        self.add(
            "blocks_per_s".into(),
            "blocks/s",
            true,
            Metric::new(b.bps, scaled(b)),
            Metric::new(c.bps, scaled(c)),
        );
    }
}

/// The names of the stages `report` ran and `other` did not, in `report`'s order.
fn stages_missing(report: &Report, other: &Report) -> Vec<String> {
    report
        .stages
        .iter()
        .filter(|s| !other.stages.iter().any(|o| o.name == s.name))
        .map(|s| s.name.clone())
        .collect()
}

/// A value and its spread across ranks.
#[derive(Debug, Clone, Copy)]
struct Metric {
    value: f64,
    spread: f64,
}

impl Metric {
    fn new(value: f64, spread: f64) -> Self {
        Metric { value, spread }
    }
}

fn judge(
    metric: String,
    unit: &'static str,
    higher_is_better: bool,
    baseline: Metric,
    current: Metric,
    threshold_pct: f64,
) -> Change {
    let change_pct =
        (baseline.value != 0.0).then(|| (current.value / baseline.value - 1.0) * 100.0);
    let noise = baseline.spread.max(current.spread);
    // How much worse, in the metric's unit and in percent (+: worse).
    let sign = if higher_is_better { -1.0 } else { 1.0 };
    let worse = (current.value - baseline.value) * sign;
    // From a baseline of 0 any rise is past every threshold.
    let worse_pct = change_pct.map_or(
        if worse == 0.0 {
            0.0
        } else {
            f64::INFINITY.copysign(worse)
        },
        |p| p * sign,
    );
    let verdict = if worse_pct.abs() <= threshold_pct {
        Verdict::Unchanged
    } else if worse.abs() <= noise {
        Verdict::WithinNoise
    } else if worse_pct > 0.0 {
        Verdict::Regression
    } else {
        Verdict::Improvement
    };
    Change {
        metric,
        unit,
        higher_is_better,
        baseline: baseline.value,
        current: current.value,
        change_pct,
        noise,
        verdict,
    }
}

/// The session's length (the longest rank's) and the spread of the ranks'.
fn session_time(report: &Report) -> Metric {
    Metric::new(
        report.session.duration_s,
        std_dev(report.ranks.iter().map(|r| r.duration_s)),
    )
}

/// The highest peak memory of any GPU, and the spread of the GPUs' peaks.
fn gpu_memory_peak(report: &Report) -> Option<Metric> {
    let peaks: Vec<f64> = report
        .gpus
        .iter()
        .filter_map(|g| g.memory_peak_mb)
        .collect();
    let highest = peaks.iter().copied().reduce(f64::max)?;
    Some(Metric::new(highest, std_dev(peaks.into_iter())))
}

/// Population standard deviation; 0 for fewer than two values.
fn std_dev(values: impl Iterator<Item = f64>) -> f64 {
    let values: Vec<f64> = values.collect();
    mean_std(&values).map_or(0.0, |(_, std)| std)
}

/// The comparison as a text table.
pub fn render(comparison: &Comparison, baseline: &str, current: &str) -> String {
    use rankscope_common::text::{cell, column};
    use std::fmt::Write;

    let mut out = String::new();
    let _ = writeln!(
        out,
        "rankscope compare (regression: {}% worse, and more than the noise)",
        comparison.threshold_pct
    );
    let _ = writeln!(out, "baseline: {}", cell(baseline, 90));
    let _ = writeln!(out, "current:  {}", cell(current, 90));
    let _ = writeln!(
        out,
        "{:<36} {:>12} {:>12} {:>9} {:>10}  Verdict",
        "Metric", "Baseline", "Current", "Change", "Noise"
    );
    for c in &comparison.changes {
        let _ = writeln!(
            out,
            "{} {:>12.3} {:>12.3} {:>9} {:>10.3}  {}",
            column(&format!("{} ({})", c.metric, c.unit), 36),
            c.baseline,
            c.current,
            c.change_pct
                .map_or_else(|| "-".to_string(), |p| format!("{p:+.1}%")),
            c.noise,
            c.verdict.as_str()
        );
    }
    for (label, names) in [
        (
            "only in the baseline (a regression: gone from this run)",
            &comparison.only_in_baseline,
        ),
        ("only in the current run", &comparison.only_in_current),
    ] {
        if !names.is_empty() {
            let names: Vec<String> = names.iter().map(|n| cell(n, 40)).collect();
            let _ = writeln!(out, "Stages {label}: {}", names.join(", "));
        }
    }
    let regressions = comparison.regressions().count() + comparison.only_in_baseline.len();
    let _ = writeln!(
        out,
        "{}",
        match regressions {
            0 => "No regression.".to_string(),
            1 => "1 regression.".to_string(),
            n => format!("{n} regressions."),
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(baseline: f64, current: f64, spread: f64, higher_is_better: bool) -> Verdict {
        judge(
            "m".into(),
            "s",
            higher_is_better,
            Metric::new(baseline, spread),
            Metric::new(current, spread),
            10.0,
        )
        .verdict
    }

    #[test]
    fn verdicts_by_hand() {
        assert_eq!(
            judged(1.0, 1.2, 0.01, false),
            Verdict::Regression,
            "20 % slower"
        );
        assert_eq!(judged(1.0, 1.02, 0.01, false), Verdict::Unchanged, "2 %");
        assert_eq!(judged(1.0, 0.8, 0.01, false), Verdict::Improvement);
        assert_eq!(
            judged(1.0, 1.2, 0.3, false),
            Verdict::WithinNoise,
            "0.2 s inside a 0.3 s spread across ranks"
        );
        assert_eq!(
            judged(100.0, 80.0, 1.0, true),
            Verdict::Regression,
            "20 % fewer frames/s"
        );
        assert_eq!(judged(100.0, 120.0, 1.0, true), Verdict::Improvement);
        assert_eq!(
            judged(0.0, 5.0, 0.0, false),
            Verdict::Regression,
            "up from 0"
        );
        assert_eq!(judged(0.0, 5.0, 6.0, false), Verdict::WithinNoise);
        assert_eq!(judged(0.0, 0.0, 0.0, false), Verdict::Unchanged);
    }

    #[test]
    fn spread_by_hand() {
        assert_eq!(
            std_dev([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0].into_iter()),
            2.0
        );
        assert_eq!(std_dev([3.0].into_iter()), 0.0);
    }
}
