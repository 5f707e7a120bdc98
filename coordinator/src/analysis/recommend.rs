//! Recommendations: the judgement's ranking of what cost the job time
//! ([`super::verdict`]), each finding's severity set by what it cost, and
//! beside them what the data lacks and what is worth knowing.

use std::collections::{BTreeMap, BTreeSet};

use rankscope_common::payload::TransportName;
use rankscope_common::text::{cell, rank_ranges};

use super::steady::names_a_collective;
use super::stragglers::{owns, shared_gpus};
use super::verdict::{
    self, kind_of, mostly_waiting_for, waits_for_another, Blame, WAITING_SHARE, WARNING_PCT,
};
use crate::model::{
    Bottleneck, GpuSplit, GpuSummary, Recommendation, Report, Severity, StageStats, Straggler,
};

/// A stage taking more than this share of the session is worth a look.
const HOT_STAGE_PCT: f64 = 30.0;

/// Inputs not used that get a recommendation each; the rest are counted.
const LISTED_SKIPPED: usize = 10;

/// GPUs with one kind of bottleneck told of one by one; more are one
/// finding about them all.
const GPUS_TOLD_ONE_BY_ONE: usize = 3;

/// A recommendation of `severity` in `category`, its cost not known.
fn finding(
    severity: Severity,
    category: &str,
    message: String,
    evidence: String,
) -> Recommendation {
    Recommendation {
        severity,
        cost_s: None,
        category: category.into(),
        message,
        evidence,
    }
}

/// The recommendation of a blame: a warning where it cost the job
/// [`WARNING_PCT`] of its `job_s` seconds (warm-up never), else
/// information.
fn of_blame(blame: &Blame, job_s: f64) -> Recommendation {
    let v = &blame.verdict;
    Recommendation {
        severity: if v.cost_pct >= WARNING_PCT && blame.category != "warmup" {
            Severity::Warning
        } else {
            Severity::Info
        },
        cost_s: Some(v.cost_s),
        category: blame.category.into(),
        message: v.sentence.clone(),
        evidence: std::iter::once(format!(
            "cost the job {:.3} s of wall-clock time ({:.1}% of {job_s:.3} s)",
            v.cost_s, v.cost_pct
        ))
        .chain(v.evidence.iter().cloned())
        .collect::<Vec<_>>()
        .join("; "),
    }
}

/// The recommendations for an analysed report: what makes the data
/// incomplete first, then the findings by what they cost the job, the
/// costliest first, then the rest by severity.
fn recommend(report: &Report, blames: &[Blame]) -> Vec<Recommendation> {
    let mut out = missing_ranks(report);
    out.extend(skipped_inputs(report));
    out.extend(
        blames
            .iter()
            .map(|b| of_blame(b, verdict::job_seconds(report))),
    );
    out.extend(waiting_stragglers(report));
    out.extend(gpu_bottlenecks(report, blames));
    out.extend(shared_gpu_findings(report));
    out.extend(hot_stages(report));
    out.extend(dropped_rows(report));
    out.extend(overflows(report));
    out.extend(kernel_findings(report, blames));
    out.sort_by(|a, b| {
        let critical = |r: &Recommendation| r.severity != Severity::Critical;
        critical(a)
            .cmp(&critical(b))
            .then(match (a.cost_s, b.cost_s) {
                (Some(x), Some(y)) => y.total_cmp(&x),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then(a.severity.cmp(&b.severity))
    });
    out
}

/// The verdict and recommendations of `report`, from one ranking.
pub fn judge(report: &mut Report) {
    let blames = verdict::blames(report);
    let (mut judged, blame) = verdict::verdict(report, &blames);
    report.recommendations = recommend(report, &blames);
    // The verdict's finding: its blame's number among the recommendations.
    judged.finding = blame.and_then(|blame| {
        let message = &blames[blame].verdict.sentence;
        let at = report
            .recommendations
            .iter()
            .position(|r| &r.message == message)?;
        Some(at as u32 + 1)
    });
    report.verdict = Some(judged);
}

/// The ranks that sent nothing (or have no imported trace), if any.
fn missing_ranks(report: &Report) -> Vec<Recommendation> {
    let session = &report.session;
    if session.ranks_missing.is_empty() {
        return Vec::new();
    }
    let message = if session.transport == TransportName::Import {
        format!(
            "ranks {} have no trace among those imported; statistics cover the traced \
             ranks only",
            session.missing_text()
        )
    } else {
        format!(
            "ranks {} sent no data: they crashed, hung or could not reach rank 0; \
             statistics cover the other ranks only",
            session.missing_text()
        )
    };
    vec![finding(
        Severity::Critical,
        "data",
        message,
        format!(
            "{} of {} ranks reported",
            session.ranks_reporting.len(),
            session.world_size
        ),
    )]
}

/// The first inputs not used one by one, the rest in one line.
fn skipped_inputs(report: &Report) -> Vec<Recommendation> {
    let skipped = &report.session.skipped;
    let mut out: Vec<Recommendation> = skipped
        .iter()
        .take(LISTED_SKIPPED)
        .map(|skipped| {
            finding(
                Severity::Warning,
                "data",
                format!("{} was not used", skipped.source),
                skipped.reason.clone(),
            )
        })
        .collect();
    if skipped.len() > LISTED_SKIPPED {
        out.push(finding(
            Severity::Warning,
            "data",
            format!(
                "{} more inputs were not used",
                skipped.len() - LISTED_SKIPPED
            ),
            "report.json's session.skipped names each, with the reason".into(),
        ));
    }
    out
}

/// Stragglers only slower waiting for another rank: told as that rank's.
fn waiting_stragglers(report: &Report) -> Vec<Recommendation> {
    report
        .stragglers
        .iter()
        .filter_map(|s| Some(waiting_straggler(s, waits_for_another(report, s)?)))
        .collect()
}

/// A straggler whose excess is its wait for rank `late`.
fn waiting_straggler(s: &Straggler, late: u32) -> Recommendation {
    finding(
        Severity::Info,
        "straggler",
        format!(
            "rank {} spends {:.0}% longer than the other ranks in `{}` waiting there for \
             rank {late}: the wait is rank {late}'s slowness, not work of rank {}",
            s.rank,
            (s.slowdown - 1.0) * 100.0,
            cell(&s.stage, 60),
            s.rank
        ),
        format!("{:.3} s over the other ranks' median", s.excess_s),
    )
}

/// GPU bottlenecks by kind, those of a blamed rank's own GPU left out
/// (they are told with the blame). Information: a GPU whose rank keeps
/// up costs the job no time that can be measured.
fn gpu_bottlenecks(report: &Report, blames: &[Blame]) -> Vec<Recommendation> {
    let blamed = |gpu: &GpuSummary| {
        blames
            .iter()
            .any(|b| b.verdict.ranks.iter().any(|&rank| owns(rank, gpu)))
    };
    let mut by_kind: BTreeMap<&str, Vec<(&GpuSummary, &Bottleneck)>> = BTreeMap::new();
    for gpu in report.gpus.iter().filter(|g| !blamed(g)) {
        for b in &gpu.bottlenecks {
            by_kind.entry(b.kind.as_str()).or_default().push((gpu, b));
        }
    }
    let mut out = Vec::new();
    for (kind, found) in by_kind {
        let kind = kind.replace('_', " ");
        if found.len() <= GPUS_TOLD_ONE_BY_ONE {
            out.extend(
                found
                    .iter()
                    .map(|(gpu, b)| one_gpu_bottleneck(gpu, b, &kind)),
            );
        } else {
            out.push(many_gpus_bottleneck(&found, &kind));
        }
    }
    out
}

/// A bottleneck of `kind` on one GPU.
fn one_gpu_bottleneck(gpu: &GpuSummary, b: &Bottleneck, kind: &str) -> Recommendation {
    finding(
        Severity::Info,
        "gpu",
        format!(
            "GPU {} of rank {} on {}: {kind}",
            gpu.index,
            gpu.rank,
            cell(&gpu.host, 40)
        ),
        b.evidence.clone(),
    )
}

/// A rule at its edge on many GPUs: one finding about them all.
fn many_gpus_bottleneck(found: &[(&GpuSummary, &Bottleneck)], kind: &str) -> Recommendation {
    let hosts: BTreeSet<&str> = found.iter().map(|(g, _)| g.host.as_str()).collect();
    let named: Vec<String> = found
        .iter()
        .take(3)
        .map(|(g, _)| format!("rank {} GPU {}", g.rank, g.index))
        .collect();
    let (first, example) = found[0];
    finding(
        Severity::Info,
        "gpu",
        format!(
            "{} GPUs on {} host{}: {kind} ({} and {} more)",
            found.len(),
            hosts.len(),
            if hosts.len() == 1 { "" } else { "s" },
            named.join(", "),
            found.len() - named.len()
        ),
        format!(
            "rank {} GPU {}: {}; report.json's gpus[].bottlenecks has each GPU's",
            first.rank, first.index, example.evidence
        ),
    )
}

/// Ranks that share a GPU: a finding of its own, as their GPU's readings
/// cannot tell them apart.
fn shared_gpu_findings(report: &Report) -> Vec<Recommendation> {
    shared_gpus(&report.gpus)
        .into_iter()
        .map(|gpu| {
            finding(
                Severity::Info,
                "gpu",
                format!(
                    "ranks {} share GPU {} on {}: their kernels compete for it, and its \
                     readings cannot tell one rank's slowness from another's",
                    rank_ranges(&gpu.sampled_by),
                    gpu.index,
                    cell(&gpu.host, 40)
                ),
                format!(
                    "{} ranks sampled the GPU (uuid {})",
                    gpu.sampled_by.len(),
                    cell(&gpu.uuid, 60)
                ),
            )
        })
        .collect()
}

/// A stage's own work: its self time less the waiting in it that is in no
/// stage inside it, per rank on average, seconds; and whether its work is
/// a collective's transfer, not compute.
fn own_work(report: &Report, stage: &StageStats) -> (f64, bool) {
    let inside: f64 = report
        .stages
        .iter()
        .filter(|s| s.parent.as_deref() == Some(stage.name.as_str()))
        .filter_map(|s| s.wait_s.map(|w| w.avg))
        .sum();
    let self_wait = stage.wait_s.map_or(0.0, |w| (w.avg - inside).max(0.0));
    // A stage named for a collective, or whose own time mostly waits in
    // collective calls, holds their transfer; a short call inside a stage
    // of compute leaves it compute.
    let collective =
        names_a_collective(&stage.name) || self_wait >= WAITING_SHARE * stage.self_s.avg;
    ((stage.self_s.avg - self_wait).max(0.0), collective)
}

/// Stages over [`HOT_STAGE_PCT`] of the session by their own work (a
/// stage that only encloses others is not where the time goes, and a
/// stage's waiting is the rank it waits for's), hottest first; one that
/// mostly waits is never a place to optimise.
fn hot_stages(report: &Report) -> Vec<Recommendation> {
    let mut hot: Vec<(&StageStats, f64, bool)> = report
        .stages
        .iter()
        .filter_map(|s| {
            let (work, collective) = own_work(report, s);
            let share = if s.self_s.avg > 0.0 {
                s.share_pct * work / s.self_s.avg
            } else {
                0.0
            };
            (s.share_pct > HOT_STAGE_PCT).then_some((s, share, collective))
        })
        .collect();
    hot.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut out = Vec::new();
    let mut to_optimise = 0;
    for (stage, share, collective) in hot {
        match mostly_waiting_for(report, stage) {
            Some(late) => out.push(waiting_stage(stage, late)),
            None if share > HOT_STAGE_PCT => {
                out.push(stage_to_optimise(
                    stage,
                    share,
                    collective,
                    to_optimise == 0,
                ));
                to_optimise += 1;
            }
            None => {}
        }
    }
    out
}

/// A hot stage whose time is mostly a wait for rank `late`.
fn waiting_stage(stage: &StageStats, late: u32) -> Recommendation {
    let waits = stage
        .wait_s
        .map(|w| {
            format!(
                "its ranks wait {:.3} s in it on average, of {:.3} s",
                w.avg, stage.total_s.avg
            )
        })
        .unwrap_or_else(|| {
            format!(
                "rank {late} spends {:.3} s in it, the ranks on average {:.3} s",
                stage.self_s.min, stage.self_s.avg
            )
        });
    finding(
        Severity::Info,
        "stage",
        format!(
            "`{}` takes {:.0}% of the session, but mostly waiting for rank {late}: the wait is \
             that rank's slowness, not work to optimise in `{}`",
            cell(&stage.name, 60),
            stage.share_pct,
            cell(&stage.name, 60)
        ),
        waits,
    )
}

/// A hot stage busy with its own work (`share` of the session, its
/// waiting left out): the first (or next) place to optimise, its work
/// compute or, where collective calls run in its own time, their transfer.
fn stage_to_optimise(
    stage: &StageStats,
    share: f64,
    collective: bool,
    first: bool,
) -> Recommendation {
    finding(
        Severity::Info,
        "stage",
        format!(
            "`{}` takes {share:.0}% of the session in its own work (nested stages and waiting \
             not counted), {}: {}",
            cell(&stage.name, 60),
            if collective {
                "a collective's transfer: move less data, or overlap it with compute"
            } else {
                "compute"
            },
            if first {
                "the first place to optimise"
            } else {
                "the next place to optimise"
            }
        ),
        format!(
            "{:.3} s self time per rank on average ({:.3} s with nested stages) over {} calls",
            stage.self_s.avg, stage.total_s.avg, stage.count
        ),
    )
}

/// Rows the ranks dropped at a table's budget.
fn dropped_rows(report: &Report) -> Vec<Recommendation> {
    report
        .session
        .dropped_rows
        .iter()
        .map(|dropped| {
            finding(
                Severity::Warning,
                "data",
                format!(
                    "rank {} dropped {} rows of `{}`: raise max_data_points to keep them",
                    dropped.rank, dropped.rows, dropped.table
                ),
                "the table reached max_data_points, or the payload its size limit".into(),
            )
        })
        .collect()
}

/// Names folded and stages not recorded at the recorder's limits, per rank.
fn overflows(report: &Report) -> Vec<Recommendation> {
    let mut out = Vec::new();
    for rank in &report.ranks {
        let overflow = &rank.overflow;
        if overflow.names_folded > 0 {
            out.push(finding(
                Severity::Warning,
                "data",
                format!(
                    "rank {} used more distinct names than max_names: {} were recorded as `(other)`; \
                     raise max_names, or keep ids out of stage names",
                    rank.rank, overflow.names_folded
                ),
                "a thread reached max_names".into(),
            ));
        }
        if overflow.stages_too_deep > 0 {
            out.push(finding(
                Severity::Warning,
                "data",
                format!(
                    "rank {} began {} stages while max_open_stages were open on a thread: they \
                     were not recorded; look for start() calls without stop()",
                    rank.rank, overflow.stages_too_deep
                ),
                "a thread reached max_open_stages".into(),
            ));
        }
    }
    out
}

/// A GPU idle for more than this share of its traced window is starved.
const IDLE_GPU_PCT: f64 = 50.0;
/// At most this many idle GPUs are told one by one; the rest are counted.
const IDLE_GPUS_TOLD: usize = 5;
/// At most this many kernel stragglers are told as recommendations.
const KERNEL_STRAGGLERS_TOLD: usize = 5;

/// What the kernel traces say beside the blames: kernels slower on a
/// rank no blame names, GPUs left idle, traces cut.
fn kernel_findings(report: &Report, blames: &[Blame]) -> Vec<Recommendation> {
    let mut out = kernel_stragglers(report, blames);
    out.extend(idle_gpus(report, blames));
    out.extend(cut_traces(report));
    out
}

/// The first [`KERNEL_STRAGGLERS_TOLD`] kernels slower on a rank that no
/// blame names (a blame tells its rank's own): information where the rank
/// keeps up, a warning where the others waited for it at a cost of
/// [`WARNING_PCT`] of the job (its lateness, in the time account).
fn kernel_stragglers(report: &Report, blames: &[Blame]) -> Vec<Recommendation> {
    let blamed = |rank: u32| blames.iter().any(|b| b.verdict.ranks.contains(&rank));
    report
        .kernel_stragglers
        .iter()
        .filter(|k| !blamed(k.rank))
        .take(KERNEL_STRAGGLERS_TOLD)
        .map(|k| {
            let late = report
                .time_account
                .job
                .waited_for
                .iter()
                .find(|w| w.rank == k.rank)
                .map_or(0.0, |w| w.delay_s);
            let job_s = verdict::job_seconds(report);
            let costly = job_s > 0.0 && late / job_s * 100.0 >= WARNING_PCT;
            finding(
                if costly {
                    Severity::Warning
                } else {
                    Severity::Info
                },
                "kernel",
                format!(
                    "{} `{}` takes {:.0}% longer on rank {} than the median of the other ranks",
                    kind_of(&k.category),
                    cell(&k.kernel, 80),
                    (k.slowdown - 1.0) * 100.0,
                    k.rank
                ),
                std::iter::once(format!("{:.6} s over the other ranks' median", k.excess_s))
                    .chain(k.evidence.iter().cloned())
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })
        .collect()
}

/// GPUs idle over [`IDLE_GPU_PCT`] of their traced windows, the idlest
/// first one by one, the rest counted; their idle time told by what the
/// host did meanwhile (the account's GPU split): in a collective's
/// transfer, waiting in one (for the blamed rank, where one is), or its
/// own work. Only the last is the host not keeping its GPU busy.
fn idle_gpus(report: &Report, blames: &[Blame]) -> Vec<Recommendation> {
    let mut idle: Vec<(u32, &GpuSplit, f64)> = report
        .time_account
        .ranks
        .iter()
        .filter_map(|r| {
            let gpu = r.gpu.as_ref()?;
            let idle_s =
                gpu.idle.host_work + gpu.idle.collective_transfer + gpu.idle.collective_wait;
            let pct = idle_s / gpu.window_s * 100.0;
            (pct > IDLE_GPU_PCT).then_some((r.rank, gpu, pct))
        })
        .collect();
    idle.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let late = blames
        .iter()
        .find(|b| b.category == "straggler")
        .map(|b| &b.verdict);
    let mut out: Vec<Recommendation> = idle
        .iter()
        .take(IDLE_GPUS_TOLD)
        .map(|&(rank, gpu, pct)| {
            let points = |s: f64| s / gpu.window_s * 100.0;
            let whom = late
                .filter(|v| !v.ranks.contains(&rank))
                .map(|v| {
                    if v.ranks.len() == 1 {
                        format!(" for rank {}", v.ranks[0])
                    } else {
                        format!(" for ranks {}", rank_ranges(&v.ranks))
                    }
                })
                .unwrap_or_default();
            let parts = [
                (
                    gpu.idle.collective_transfer,
                    "in collective calls' transfer".to_string(),
                ),
                (
                    gpu.idle.collective_wait,
                    format!("waiting in collective calls{whom}"),
                ),
                (gpu.idle.host_work, "in the host's own work".to_string()),
            ];
            let told: Vec<String> = parts
                .iter()
                .filter(|(s, _)| points(*s) >= 0.5)
                .map(|(s, what)| format!("{:.0} points {what}", points(*s)))
                .collect();
            let in_collectives = gpu.idle.collective_transfer + gpu.idle.collective_wait;
            let why = if gpu.idle.host_work >= in_collectives {
                "the host does not keep it busy (launch overhead, synchronisation, data loading)"
                    .to_string()
            } else if gpu.idle.collective_wait > gpu.idle.collective_transfer {
                format!("the wait{whom}, not the host, leaves it idle")
            } else {
                "the collectives, not the host, leave it idle".to_string()
            };
            finding(
                Severity::Info,
                "gpu",
                format!(
                    "rank {rank}'s GPU was idle {pct:.0}% of its traced windows ({}): {why}",
                    told.join(", ")
                ),
                format!(
                    "{:.6} s idle of {:.6} s from its first kernel to its last",
                    gpu.idle.host_work + in_collectives,
                    gpu.window_s
                ),
            )
        })
        .collect();
    if idle.len() > IDLE_GPUS_TOLD {
        out.push(finding(
            Severity::Info,
            "gpu",
            format!(
                "{} more GPUs were idle over {IDLE_GPU_PCT:.0}% of their traced windows",
                idle.len() - IDLE_GPUS_TOLD
            ),
            "time_account.ranks[].gpu in report.json has each".into(),
        ));
    }
    out
}

/// Ranks whose kernel trace was cut at a budget.
fn cut_traces(report: &Report) -> Vec<Recommendation> {
    report
        .kernel_traces
        .iter()
        .filter_map(|trace| {
            let cut = trace.cut.filter(|c| !c.is_empty())?;
            Some(finding(
                Severity::Warning,
                "data",
                format!(
                    "rank {}'s trace was cut: its figures cover only what was kept; raise \
                     --max-rows for rows past the budget",
                    trace.rank
                ),
                format!(
                    "{} rows past the row budget, {} events past the name budget, {} events with \
                     unusable times",
                    cut.rows, cut.names, cut.bad_times
                ),
            ))
        })
        .collect()
}
