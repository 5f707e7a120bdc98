//! The charts' data: what the page's script draws, inlined as JSON.

use serde::Serialize;

use rankscope_common::payload::GpuSource;

use crate::model::{Category, CategorySpread, GpuTime, RankRun, RankValue, Report, Series};
use crate::report::html::table::PER_RANK_ROWS;

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
    /// The time account's bars.
    account: AccountChart<'a>,
}

/// The time account's chart: a stacked bar for the job and for each rank
/// (up to [`PER_RANK_ROWS`] ranks), past that each category's spread.
#[derive(Serialize)]
struct AccountChart<'a> {
    /// The categories' names, in the bars' order.
    categories: Vec<&'static str>,
    /// Each bar's label and seconds per category (`null`: not measured).
    bars: Vec<(String, Vec<Option<f64>>)>,
    /// Each category's spread, where the ranks are too many for a bar each.
    spread: &'a [CategorySpread],
}

impl<'a> AccountChart<'a> {
    fn new(report: &'a Report) -> Self {
        let account = &report.time_account;
        let seconds = |c: &crate::model::Categories| Category::ALL.map(|k| c.get(k)).to_vec();
        let mut bars = Vec::new();
        if !account.ranks.is_empty() {
            bars.push(("job".to_string(), seconds(&account.job.categories)));
        }
        let few = account.ranks.len() <= PER_RANK_ROWS;
        if few {
            bars.extend(
                account
                    .ranks
                    .iter()
                    .map(|r| (format!("rank {}", r.rank), seconds(&r.categories))),
            );
        }
        AccountChart {
            categories: Category::ALL.map(Category::words).to_vec(),
            bars,
            spread: if few { &[] } else { &account.spread },
        }
    }
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
            account: AccountChart::new(report),
        }
    }
}
