//! The chart data of the report ([`Series`]), reduced to a bounded size as
//! each rank is digested: a rank's outermost stages become at most a share
//! of [`TIMELINE_BARS`] bars, each GPU metric at most a share of
//! [`GPU_POINTS`] points, each rank's step times a share of
//! [`STEP_POINTS`]. The shares are of the whole job, so that the HTML of 64
//! ranks over an hour stays a few megabytes.
//!
//! [`Series`]: crate::model::Series

use std::collections::{BTreeMap, BTreeSet};

use super::times::{OuterStage, StageTimes};
use crate::model::{
    GpuSeries, RankRun, RankSteps, RankSummary, RankTimeline, Report, Series, Timed,
};

/// Timeline bars of all ranks together.
pub const TIMELINE_BARS: usize = 40_000;
/// Points of all metrics of all GPUs together.
pub const GPU_POINTS: usize = 120_000;
/// Step points of all ranks together.
pub const STEP_POINTS: usize = 40_000;
/// Stages in the stage × rank heatmap: the first of `stages` (the largest).
pub const HEATMAP_STAGES: usize = 50;
/// Columns of the heatmap: past this many ranks, runs of ranks.
pub const RANK_COLUMNS: usize = 256;
/// Ranks whose timeline and steps are drawn, at most.
pub const DRAWN_RANKS: usize = 64;
/// No part gets fewer than this many bars or points.
const FLOOR: usize = 16;

/// One part's share of `budget` split among `parts`.
pub fn share(budget: usize, parts: usize) -> usize {
    (budget / parts.max(1)).max(FLOOR)
}

/// Seconds rounded to the microsecond, values to 3 decimals: the charts
/// show no more, and the JSON stays short. A value too large to scale is
/// kept as it is.
fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    let rounded = (value * scale).round() / scale;
    if rounded.is_finite() {
        rounded
    } else {
        value
    }
}

/// The positions of at most `points` of `value`, in order: all of them
/// when they fit, else those of the lowest and the highest of each of
/// `points / 2` equal runs, so that spikes survive.
pub fn min_max_indices(value: &[f64], points: usize) -> Vec<usize> {
    let n = value.len();
    if n <= points {
        return (0..n).collect();
    }
    let buckets = (points / 2).max(1);
    let mut out = Vec::with_capacity(points);
    for b in 0..buckets {
        let (from, to) = (b * n / buckets, (b + 1) * n / buckets);
        if from == to {
            continue;
        }
        let extreme = |better: fn(f64, f64) -> bool| {
            (from..to).fold(from, |best, i| {
                if better(value[i], value[best]) {
                    i
                } else {
                    best
                }
            })
        };
        let (low, high) = (extreme(|a, b| a < b), extreme(|a, b| a > b));
        out.push(low.min(high));
        if low != high {
            out.push(low.max(high));
        }
    }
    out
}

/// The finite readings of `value` (`None`, NaN and infinities are not
/// readings) at times `t`, at most `points` of them ([`min_max_indices`]),
/// rounded for the charts.
pub fn readings(t: &[f64], value: &[Option<f64>], points: usize) -> Timed {
    let (t, value): (Vec<f64>, Vec<f64>) = t
        .iter()
        .zip(value)
        .filter_map(|(&t, v)| Some((t, v.filter(|v| v.is_finite())?)))
        .unzip();
    let kept = min_max_indices(&value, points);
    Timed {
        t_s: kept.iter().map(|&i| round(t[i], 6)).collect(),
        value: kept.iter().map(|&i| round(value[i], 3)).collect(),
    }
}

/// A rank's step times, at most `points` of them kept ([`readings`]).
pub fn rank_steps(rank: u32, ms: &[f64], points: usize) -> RankSteps {
    let index: Vec<f64> = (0..ms.len()).map(|i| i as f64).collect();
    let ms: Vec<Option<f64>> = ms.iter().copied().map(Some).collect();
    let kept = readings(&index, &ms, points);
    RankSteps {
        rank,
        step: kept.t_s.iter().map(|&i| i as u64).collect(),
        ms: kept.value,
    }
}

/// The report's chart data. `timelines` and `gpus` (in the order of
/// `report.gpus`), each on its rank's own clock, are moved onto the shared
/// timeline by their rank's `started_s`; `steps` are each rank's step
/// times.
pub fn series(
    report: &Report,
    times: &StageTimes,
    timelines: Vec<RankTimeline>,
    gpus: Vec<GpuSeries>,
    steps: &[(u32, &[f64])],
) -> Series {
    let started_s: BTreeMap<u32, f64> =
        report.ranks.iter().map(|r| (r.rank, r.started_s)).collect();
    let shift = |rank: u32, times: &mut [f64]| {
        let by = started_s.get(&rank).copied().unwrap_or(0.0);
        times.iter_mut().for_each(|t| *t = round(*t + by, 6));
    };
    let timelines: Vec<RankTimeline> = timelines
        .into_iter()
        .map(|mut timeline| {
            shift(timeline.rank, &mut timeline.start_s);
            shift(timeline.rank, &mut timeline.end_s);
            timeline
        })
        .collect();
    let gpus = gpus
        .into_iter()
        .map(|mut gpu| {
            let rank = gpu.rank;
            for metric in gpu.metrics_mut() {
                shift(rank, &mut metric.t_s);
            }
            gpu
        })
        .collect();
    let columns = rank_runs(&report.ranks, RANK_COLUMNS);
    let (stage_totals_s, stage_slowest) = stage_columns(report, times, &columns);
    let drawn = drawn_ranks(report, times, DRAWN_RANKS);
    let is_drawn = |rank: u32| drawn.as_ref().is_none_or(|d| d.contains(&rank));
    let steps: Vec<(u32, &[f64])> = steps
        .iter()
        .filter(|(rank, ms)| !ms.is_empty() && is_drawn(*rank))
        .copied()
        .collect();
    let points = share(STEP_POINTS, steps.len());
    Series {
        columns,
        stage_totals_s,
        stage_slowest,
        timelines: timelines.into_iter().filter(|t| is_drawn(t.rank)).collect(),
        gpus,
        steps: steps
            .iter()
            .map(|&(rank, ms)| rank_steps(rank, ms, points))
            .collect(),
        ranks_not_drawn: drawn.map_or(0, |d| (report.ranks.len() - d.len()) as u64),
    }
}

/// `ranks` (in order) as at most `columns` runs of consecutive ranks, each
/// as long as the others (the last maybe shorter): one rank each where
/// they fit.
fn rank_runs(ranks: &[RankSummary], columns: usize) -> Vec<RankRun> {
    let per_run = ranks.len().div_ceil(columns.max(1)).max(1);
    ranks
        .chunks(per_run)
        .map(|run| RankRun {
            first: run[0].rank,
            last: run[run.len() - 1].rank,
            ranks: run.len() as u32,
        })
        .collect()
}

/// A heatmap's rows: per stage, per column, a value.
type Rows<T> = Vec<Vec<Option<T>>>;

/// Per heatmap stage, per column: the total of the column's slowest rank,
/// and (where columns are runs of ranks) which rank that is.
fn stage_columns(
    report: &Report,
    times: &StageTimes,
    columns: &[RankRun],
) -> (Rows<f64>, Rows<u32>) {
    let binned = columns.len() < report.ranks.len();
    let mut totals = Vec::new();
    let mut slowest = Vec::new();
    for stage in report.stages.iter().take(HEATMAP_STAGES) {
        let by_rank = times.by_name.get(&stage.name);
        let mut ranks = report.ranks.iter();
        let (row_totals, row_slowest): (Vec<_>, Vec<_>) = columns
            .iter()
            .map(|column| {
                (&mut ranks)
                    .take(column.ranks as usize)
                    .filter_map(|rank| {
                        let calls = by_rank?.ranks.get(&rank.rank)?;
                        Some((calls.total_s, rank.rank))
                    })
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|(total, rank)| (round(total, 6), rank))
                    .unzip()
            })
            .unzip();
        totals.push(row_totals);
        if binned {
            slowest.push(row_slowest);
        }
    }
    (totals, slowest)
}

/// The ranks whose timeline and steps are drawn, past `most` ranks: the
/// stragglers' (the costliest first), then the ranks with the most time in
/// stages, `most` in all; `None` (every rank) where they fit.
fn drawn_ranks(report: &Report, times: &StageTimes, most: usize) -> Option<BTreeSet<u32>> {
    if report.ranks.len() <= most {
        return None;
    }
    let busy = times.busy_by_rank();
    let mut busiest: Vec<(f64, u32)> = report
        .ranks
        .iter()
        .map(|rank| (busy.get(&rank.rank).copied().unwrap_or(0.0), rank.rank))
        .collect();
    busiest.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let stragglers = report.stragglers.iter().map(|s| s.rank);
    let mut drawn = BTreeSet::new();
    for rank in stragglers.chain(busiest.into_iter().map(|(_, rank)| rank)) {
        if drawn.len() == most {
            break;
        }
        drawn.insert(rank);
    }
    Some(drawn)
}

/// The timeline of a rank's outermost `stages`, in seconds of its own
/// session: one bar per stage when at most `bars` ran, else `bars` equal
/// stretches of time, each the stage that ran most within it (neighbours of
/// the same stage joined).
pub fn rank_timeline<'a>(rank: u32, mut stages: Vec<OuterStage<'a>>, bars: usize) -> RankTimeline {
    stages.retain(|&(start, end, _)| start <= end);
    stages.sort_unstable_by_key(|&(start, end, _)| (start, end));
    let mut bars_made = TimelineBars::new(rank, stages.len() > bars);
    if !bars_made.timeline.coalesced {
        for &(start, end, name) in &stages {
            bars_made.push(name, start, end, 1);
        }
        return bars_made.timeline;
    }
    let first = stages.first().map_or(0, |s| s.0);
    let last = stages.iter().map(|s| s.1).max().unwrap_or(first);
    let stretches = Stretches {
        first,
        width: (last - first).div_ceil(bars as u64).max(1),
        count: bars,
    };
    let by_stretch = stretches.time_by_name(&stages);
    stretches.join_dominant(&by_stretch, last, &mut bars_made);
    bars_made.timeline
}

/// A rank's timeline being made, with each stage name's index in it.
struct TimelineBars<'a> {
    timeline: RankTimeline,
    index_of: BTreeMap<&'a str, u32>,
}

impl<'a> TimelineBars<'a> {
    /// An empty timeline of `rank`, marked `coalesced` or not.
    fn new(rank: u32, coalesced: bool) -> Self {
        TimelineBars {
            timeline: RankTimeline {
                rank,
                coalesced,
                ..RankTimeline::default()
            },
            index_of: BTreeMap::new(),
        }
    }

    /// Adds a bar of `name` from `start` to `end` (ns) standing for `calls` calls.
    fn push(&mut self, name: &'a str, start: u64, end: u64, calls: u64) {
        let timeline = &mut self.timeline;
        let next = self.index_of.len() as u32;
        let index = *self.index_of.entry(name).or_insert_with(|| {
            timeline.names.push(name.to_string());
            next
        });
        timeline.name.push(index);
        timeline.start_s.push(round(start as f64 / 1e9, 6));
        timeline.end_s.push(round(end as f64 / 1e9, 6));
        timeline.calls.push(calls);
    }
}

/// Equal stretches of a rank's time: `count` of `width` ns from `first`.
struct Stretches {
    first: u64,
    width: u64,
    count: usize,
}

/// Per name, the time (ns) and calls (starts) within one stretch.
type StretchTotals<'a> = BTreeMap<&'a str, (u64, u64)>;

impl Stretches {
    /// The start (ns) of stretch `b`.
    fn lower(&self, b: usize) -> u64 {
        self.first
            .saturating_add((b as u64).saturating_mul(self.width))
    }

    /// Per stretch, the time and calls of each stage name within it.
    fn time_by_name<'a>(&self, stages: &[OuterStage<'a>]) -> Vec<StretchTotals<'a>> {
        let (first, width, bars) = (self.first, self.width, self.count);
        // A stage longer than a stretch counts in each it covers, up to a
        // total of visits that keeps this linear whatever the input (past
        // it, in its first stretch only).
        let mut stretches: Vec<StretchTotals<'a>> = vec![BTreeMap::new(); bars];
        let mut visits_left = stages.len() + 4 * bars;
        for &(start, end, name) in stages {
            let stretch_of = |ns: u64| (((ns - first) / width) as usize).min(bars - 1);
            let (from, to) = (
                stretch_of(start),
                stretch_of(end.saturating_sub(1).max(start)),
            );
            let to = to.min(from + visits_left.saturating_sub(1));
            for (b, stretch) in stretches.iter_mut().enumerate().take(to + 1).skip(from) {
                let lower = self.lower(b);
                let overlap = end
                    .min(lower.saturating_add(width))
                    .saturating_sub(start.max(lower));
                let entry = stretch.entry(name).or_default();
                entry.0 = entry.0.saturating_add(overlap);
                entry.1 += u64::from(b == from);
            }
            visits_left = visits_left.saturating_sub(to + 1 - from);
        }
        stretches
    }

    /// Adds a bar per run of stretches with the same stage at most time,
    /// ending no later than `last` (ns), to `bars`.
    fn join_dominant<'a>(
        &self,
        by_stretch: &[StretchTotals<'a>],
        last: u64,
        bars: &mut TimelineBars<'a>,
    ) {
        let mut current: Option<(&'a str, u64, u64, u64)> = None;
        for (b, by_name) in by_stretch.iter().enumerate() {
            let from = self.lower(b);
            let Some((&name, &(_, calls))) = by_name.iter().max_by_key(|(_, &(ns, _))| ns) else {
                continue;
            };
            let to = from.saturating_add(self.width);
            match &mut current {
                Some((same, _, end, n)) if *same == name && *end == from => {
                    *end = to;
                    *n += calls;
                }
                _ => {
                    if let Some((name, start, end, n)) = current.take() {
                        bars.push(name, start, end.min(last), n);
                    }
                    current = Some((name, from, to, calls));
                }
            }
        }
        if let Some((name, start, end, n)) = current {
            bars.push(name, start, end.min(last), n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_series_is_kept_whole() {
        let t = [0.0, 1.0, 2.0];
        let kept = readings(&t, &[Some(5.0), Some(6.0), Some(7.0)], 10);
        assert_eq!(kept.t_s, t);
        assert_eq!(kept.value, [5.0, 6.0, 7.0]);
    }

    #[test]
    fn what_is_no_number_is_no_reading() {
        let t = [0.0, 1.0, 2.0, 3.0, 4.0];
        let v = [
            Some(1.0),
            None,
            Some(f64::NAN),
            Some(f64::INFINITY),
            Some(1e306),
        ];
        let kept = readings(&t, &v, 10);
        assert_eq!(kept.t_s, [0.0, 4.0]);
        assert_eq!(
            kept.value,
            [1.0, 1e306],
            "too large to round: kept as it is"
        );
    }

    #[test]
    fn a_long_series_keeps_each_buckets_extremes_and_its_spikes() {
        // 10,000 readings of 50 with one spike of 99 and one dip of 1.
        let t: Vec<f64> = (0..10_000).map(f64::from).collect();
        let mut v = vec![50.0; 10_000];
        v[1_234] = 99.0;
        v[8_765] = 1.0;
        let v: Vec<Option<f64>> = v.into_iter().map(Some).collect();
        let kept = readings(&t, &v, 100);
        assert!(kept.t_s.len() <= 100, "{}", kept.t_s.len());
        assert!(kept.t_s.windows(2).all(|w| w[0] < w[1]), "time order");
        assert!(kept.t_s.contains(&1_234.0) && kept.value.contains(&99.0));
        assert!(kept.t_s.contains(&8_765.0) && kept.value.contains(&1.0));
    }

    #[test]
    fn times_at_the_end_of_the_clock_do_not_overflow() {
        // A crafted payload: stages ending at u64::MAX, more than fit.
        let stages: Vec<OuterStage<'_>> = (0..40u64)
            .map(|i| (u64::MAX - 4_000 + i * 100, u64::MAX, "x"))
            .chain([(0, 10, "y")])
            .collect();
        let timeline = rank_timeline(0, stages, 16);
        assert!(timeline.coalesced && timeline.name.len() <= 16);
    }

    #[test]
    fn few_stages_are_one_bar_each() {
        let timeline = rank_timeline(
            3,
            vec![
                (2_000_000_000, 3_000_000_000, "decode"),
                (0, 1_500_000_000, "step"),
            ],
            10,
        );
        assert!(!timeline.coalesced);
        assert_eq!(timeline.names, ["step", "decode"]);
        assert_eq!(timeline.name, [0, 1]);
        assert_eq!(timeline.start_s, [0.0, 2.0]);
        assert_eq!(timeline.end_s, [1.5, 3.0]);
        assert_eq!(timeline.calls, [1, 1]);
    }

    #[test]
    fn many_stages_become_the_stage_that_ran_most_in_each_stretch() {
        // 1,000 s: `load` for the first 100 s in 100 calls, then `step`
        // calls of 0.9 s each second, with 0.1 s of `sync` between.
        let mut stages = Vec::new();
        for s in 0..100u64 {
            stages.push((s * 1_000_000_000, (s + 1) * 1_000_000_000, "load"));
        }
        for s in 100..1_000u64 {
            let start = s * 1_000_000_000;
            stages.push((start, start + 900_000_000, "step"));
            stages.push((start + 900_000_000, start + 1_000_000_000, "sync"));
        }
        let timeline = rank_timeline(0, stages, 50);
        assert!(timeline.coalesced);
        assert!(timeline.name.len() <= 50);
        let names: Vec<&str> = timeline
            .name
            .iter()
            .map(|&i| timeline.names[i as usize].as_str())
            .collect();
        assert_eq!(names, ["load", "step"], "neighbours of one stage joined");
        assert_eq!(timeline.start_s[0], 0.0);
        assert_eq!(timeline.end_s[1], 1_000.0);
        assert_eq!(timeline.calls, [100, 900]);
    }
}
