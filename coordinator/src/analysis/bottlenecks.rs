//! Per-GPU bottlenecks: rules over one GPU's readings, each with a
//! threshold and the numbers that fired it, and one rule across peers
//! (a GPU out of line with the others).

use crate::model::{Bottleneck, BottleneckKind, GpuSummary};

/// NVML throttle-reason bits of thermal slowdown (software and hardware).
pub const THERMAL_REASONS: u64 = 0x20 | 0x40;
/// NVML throttle-reason bits of power capping (software power cap and the
/// hardware power brake).
pub const POWER_REASONS: u64 = 0x4 | 0x80;

/// The thresholds of the bottleneck rules.
#[derive(Debug, Clone, PartialEq)]
pub struct BottleneckRule {
    /// `memory_pressure`: peak memory at least this share of the total, %.
    pub memory_peak_pct: f64,
    /// `thermal_throttling`: thermal reason bits in at least this share of
    /// readings, %...
    pub thermal_readings_pct: f64,
    /// ... or a temperature of at least this, °C.
    pub thermal_temp_c: f64,
    /// `power_capped`: a reading is capped when it has a power-cap reason
    /// bit or draws at least this share of the enforced limit, %...
    pub power_draw_pct: f64,
    /// ... and the rule fires when this share of readings is capped, %.
    pub power_readings_pct: f64,
    /// `clock_throttled`: readings at or above this utilisation are busy, %...
    pub busy_util_pct: f64,
    /// ... and the rule fires when the mean SM clock of busy readings is at
    /// most this share of the device's maximum, %.
    pub clock_pct: f64,
    /// `underutilized`: mean utilisation of the readings taken while a
    /// stage was running below this, %.
    pub underutilized_pct: f64,
    /// `outlier`: a GPU this many standard deviations of its peers away
    /// from their mean...
    pub outlier_sigma: f64,
    /// ... and at least this far from it, relative to the mean, % (peers
    /// that agree to the digit have no spread to measure against).
    pub outlier_min_pct: f64,
    /// `outlier`: GPUs needed before any is compared with the others.
    pub outlier_min_gpus: usize,
}

/// The default configuration's thresholds.
impl Default for BottleneckRule {
    fn default() -> Self {
        crate::AnalysisConfig::default().bottlenecks
    }
}

/// What one GPU's readings say beyond its summary, for the rules.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadingCounts {
    /// Readings with throttle reasons.
    pub with_reasons: u64,
    /// ... of which with a reason other than idle.
    pub throttled: u64,
    /// ... of which with a thermal reason bit.
    pub thermal: u64,
    /// Readings with throttle reasons or power and limit.
    pub with_power: u64,
    /// ... of which capped: a power-cap bit, or draw near the limit.
    pub capped: u64,
    /// Mean SM clock of the busy readings, MHz.
    pub busy_sm_clock_mhz: Option<f64>,
    /// Mean utilisation of readings taken while a stage ran, %.
    pub util_in_stages: Option<f64>,
}

/// The bottlenecks one GPU's own readings show.
pub fn own_bottlenecks(
    gpu: &GpuSummary,
    counts: &ReadingCounts,
    rule: &BottleneckRule,
) -> Vec<Bottleneck> {
    // Each rule needs something seen, not only a threshold met: a threshold
    // of 0 must not call a healthy GPU throttled.
    [
        memory_pressure(gpu, rule),
        thermal_throttling(gpu, counts, rule),
        power_capped(counts, rule),
        clock_throttled(gpu, counts, rule),
        underutilized(counts, rule),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A bottleneck of `kind`, with its evidence.
fn found(kind: BottleneckKind, evidence: String) -> Bottleneck {
    Bottleneck { kind, evidence }
}

/// `memory_pressure`: peak memory near the total.
fn memory_pressure(gpu: &GpuSummary, rule: &BottleneckRule) -> Option<Bottleneck> {
    let (peak, total) = (gpu.memory_peak_mb?, gpu.memory_total_mb?);
    let pct = peak / total * 100.0;
    (total > 0.0 && peak > 0.0 && pct >= rule.memory_peak_pct).then(|| {
        found(
            BottleneckKind::MemoryPressure,
            format!("peak memory {peak:.0} of {total:.0} MB ({pct:.0}%)"),
        )
    })
}

/// `thermal_throttling`: thermal reasons in enough readings, or a GPU hot.
fn thermal_throttling(
    gpu: &GpuSummary,
    counts: &ReadingCounts,
    rule: &BottleneckRule,
) -> Option<Bottleneck> {
    let thermal_pct = share(counts.thermal, counts.with_reasons)
        .filter(|&p| counts.thermal > 0 && p >= rule.thermal_readings_pct);
    let hot = gpu.temp_max_c.filter(|&t| t >= rule.thermal_temp_c);
    if thermal_pct.is_none() && hot.is_none() {
        return None;
    }
    let mut evidence = Vec::new();
    if counts.thermal > 0 {
        evidence.push(format!(
            "thermally throttled in {:.0}% of {} readings",
            share(counts.thermal, counts.with_reasons).unwrap_or(0.0),
            counts.with_reasons
        ));
    }
    if let Some(t) = gpu.temp_max_c {
        evidence.push(format!("{t:.0} °C at most"));
    }
    Some(found(
        BottleneckKind::ThermalThrottling,
        evidence.join(", "),
    ))
}

/// `power_capped`: enough readings capped.
fn power_capped(counts: &ReadingCounts, rule: &BottleneckRule) -> Option<Bottleneck> {
    let p = share(counts.capped, counts.with_power)?;
    (counts.capped > 0 && p >= rule.power_readings_pct).then(|| {
        found(
            BottleneckKind::PowerCapped,
            format!(
                "power-capped (a cap reason, or ≥ {:.0}% of the enforced limit) in {p:.0}% of {} readings",
                rule.power_draw_pct, counts.with_power
            ),
        )
    })
}

/// `clock_throttled`: the SM clock under load well below the maximum.
fn clock_throttled(
    gpu: &GpuSummary,
    counts: &ReadingCounts,
    rule: &BottleneckRule,
) -> Option<Bottleneck> {
    let (clock, max) = (counts.busy_sm_clock_mhz?, gpu.sm_clock_max_mhz?);
    let pct = clock / f64::from(max) * 100.0;
    (max > 0 && clock < f64::from(max) && pct <= rule.clock_pct).then(|| {
        found(
            BottleneckKind::ClockThrottled,
            format!(
                "SM clock {clock:.0} of {max} MHz under load ({:.0}% below max)",
                100.0 - pct
            ),
        )
    })
}

/// `underutilized`: low utilisation while stages ran.
fn underutilized(counts: &ReadingCounts, rule: &BottleneckRule) -> Option<Bottleneck> {
    let util = counts
        .util_in_stages
        .filter(|&u| u < rule.underutilized_pct)?;
    Some(found(
        BottleneckKind::Underutilized,
        format!("{util:.0}% mean utilisation while stages ran"),
    ))
}

/// Adds an `outlier` bottleneck to each GPU out of line with its peers on
/// the side that holds a job back: lower utilisation, higher temperature or
/// lower SM clock, by at least `outlier_sigma` standard deviations and
/// `outlier_min_pct` % of the mean of the other GPUs. Needs
/// `outlier_min_gpus` GPUs. Peak memory is left out: rank 0 of a
/// data-parallel job, or one pipeline stage, holds more by design.
pub fn add_outliers(gpus: &mut [GpuSummary], rule: &BottleneckRule) {
    if gpus.len() < rule.outlier_min_gpus {
        return;
    }
    /// A metric: its label, unit, value, and +1 when higher is worse, −1
    /// when lower is.
    type Metric = (
        &'static str,
        &'static str,
        fn(&GpuSummary) -> Option<f64>,
        f64,
    );
    const METRICS: [Metric; 3] = [
        ("utilisation", "%", |g| g.util_avg, -1.0),
        ("peak temperature", " °C", |g| g.temp_max_c, 1.0),
        ("mean SM clock", " MHz", |g| g.sm_clock_avg_mhz, -1.0),
    ];
    let mut found: Vec<Vec<String>> = vec![Vec::new(); gpus.len()];
    for (label, unit, metric, worse) in METRICS {
        let values: Vec<Option<f64>> = gpus.iter().map(metric).collect();
        let all = Moments::of(values.iter().flatten().copied());
        for (i, value) in values.iter().enumerate() {
            let Some(value) = *value else { continue };
            let peers = all.count - 1;
            if peers + 1 < rule.outlier_min_gpus {
                continue;
            }
            let Some((mean, std)) = all.without(value) else {
                continue;
            };
            let off = (value - mean) * worse;
            if off >= rule.outlier_sigma * std
                && off >= rule.outlier_min_pct / 100.0 * mean.abs()
                && off > 0.0
            {
                found[i].push(format!(
                    "{label} {value:.0}{unit} against {mean:.0}{unit} ± {std:.0} on its {peers} peers"
                ));
            }
        }
    }
    for (gpu, evidence) in gpus.iter_mut().zip(found) {
        if !evidence.is_empty() {
            gpu.bottlenecks.push(Bottleneck {
                kind: BottleneckKind::Outlier,
                evidence: evidence.join("; "),
            });
        }
    }
}

/// The count, sum and sum of squares of values, each less a shift (their
/// mean, for precision): each value's peers' mean and standard deviation
/// in constant time, not a pass over the others per GPU.
struct Moments {
    /// How many values.
    count: usize,
    /// What each value was taken less.
    shift: f64,
    /// Σ (v − shift).
    sum: f64,
    /// Σ (v − shift)².
    squares: f64,
}

impl Moments {
    /// The moments of `values`.
    fn of(values: impl Iterator<Item = f64> + Clone) -> Self {
        let (count, total) = values.clone().fold((0, 0.0), |(n, s), v| (n + 1, s + v));
        let shift = if count > 0 { total / count as f64 } else { 0.0 };
        let (sum, squares) = values.fold((0.0, 0.0), |(s, q), v| {
            let d = v - shift;
            (s + d, q + d * d)
        });
        Moments {
            count,
            shift,
            sum,
            squares,
        }
    }

    /// The mean and population standard deviation of the values but one
    /// equal to `value`; `None` where no other is left.
    fn without(&self, value: f64) -> Option<(f64, f64)> {
        let n = self.count.checked_sub(1).filter(|&n| n > 0)? as f64;
        let d = value - self.shift;
        let mean = (self.sum - d) / n;
        let variance = ((self.squares - d * d) / n - mean * mean).max(0.0);
        Some((self.shift + mean, variance.sqrt()))
    }
}

/// `part` of `whole` in percent; `None` when `whole` is 0.
pub fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64 * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stats::mean_std;

    #[test]
    fn the_peers_moments_are_those_of_the_others() {
        let values = [61.0, 58.5, 99.0, 60.25, 1e-3, 60.0];
        let all = Moments::of(values.iter().copied());
        for (i, &value) in values.iter().enumerate() {
            let others: Vec<f64> = values
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, &v)| v)
                .collect();
            let (mean, std) = mean_std(&others).unwrap();
            let (found_mean, found_std) = all.without(value).unwrap();
            assert!((found_mean - mean).abs() < 1e-9, "{i}: {found_mean} {mean}");
            assert!((found_std - std).abs() < 1e-9, "{i}: {found_std} {std}");
        }
        assert_eq!(Moments::of([1.0].into_iter()).without(1.0), None);
    }

    #[test]
    fn kind_names_are_the_names_in_report_json() {
        use BottleneckKind::*;
        for kind in [
            MemoryPressure,
            ThermalThrottling,
            PowerCapped,
            ClockThrottled,
            Underutilized,
            Outlier,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
