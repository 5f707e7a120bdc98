//! The charts' data: what the page's script draws, inlined as JSON.

use serde::Serialize;

use rankscope_common::payload::GpuSource;

use crate::model::{GpuTime, RankRun, RankValue, Report, Series};

/// What the charts draw, from the report: its bounded series and the few
/// names they need, not the whole report (whose stage and lockstep lists
/// grow with the number of stage names).
#[derive(Serialize)]
pub(super) struct ChartData<'a> {
    gpu_source: GpuSource,
    /// The heatmap's columns: the series', or one per rank in a report
    /// made before they were.
    columns: Vec<RankRun>,
    /// The names of the heatmap's rows (`series.stage_totals_s`).
    heatmap_stages: Vec<&'a str>,
    block_fps: &'a [RankValue],
    /// The GPUs (positions in `series.gpus`) with a bottleneck: drawn on
    /// their own when there are too many GPUs to draw each.
    flagged_gpus: Vec<usize>,
    series: &'a Series,
    /// Each rank's GPU time from kernel traces.
    gpu_time: &'a [GpuTime],
}

impl<'a> ChartData<'a> {
    /// The data of `report`'s charts.
    pub(super) fn new(report: &'a Report) -> Self {
        ChartData {
            gpu_source: report.session.gpu_source,
            columns: match report.series.columns.is_empty() {
                false => report.series.columns.clone(),
                true => (report.ranks.iter())
                    .map(|r| RankRun {
                        first: r.rank,
                        last: r.rank,
                        ranks: 1,
                    })
                    .collect(),
            },
            heatmap_stages: report
                .stages
                .iter()
                .take(report.series.stage_totals_s.len())
                .map(|s| s.name.as_str())
                .collect(),
            block_fps: report
                .diffusion
                .blocks
                .as_ref()
                .map_or(&[], |b| b.per_rank_fps.as_slice()),
            flagged_gpus: (report.gpus.iter().enumerate())
                .filter(|(_, gpu)| !gpu.bottlenecks.is_empty())
                .map(|(i, _)| i)
                .collect(),
            series: &report.series,
            gpu_time: &report.gpu_time,
        }
    }
}
