//! Recommendations: rules with thresholds, each with the evidence that fired it.

use std::collections::{BTreeMap, BTreeSet};

use rankscope_common::kineto::KernelCategory;
use rankscope_common::payload::TransportName;
use rankscope_common::text::cell;

use super::stragglers::owns;
use crate::model::{
    Bottleneck, GpuSummary, GpuTime, Recommendation, Report, Severity, StageStats, Straggler,
    StragglerGroup,
};

/// A stage taking more than this share of the session is worth a look.
const HOT_STAGE_PCT: f64 = 30.0;

/// Inputs not used that get a recommendation each; the rest are counted.
const LISTED_SKIPPED: usize = 10;

/// GPUs with one kind of bottleneck told of one by one; more are one
/// finding about them all.
const GPUS_TOLD_ONE_BY_ONE: usize = 3;

/// What stragglers cost, each figure labelled as what it is: wall-clock
/// time of the job, and the other ranks' idle rank-seconds.
fn costs(job_time_s: f64, wait_s: f64, whom: &str) -> String {
    format!(
        "cost the job {job_time_s:.3} s of wall-clock time (the stage's calls ended that much \
         later); the other ranks idled {wait_s:.3} rank-seconds on {whom}"
    )
}

/// Stragglers told of together: those of one of the report's straggler
/// groups (one stage on one host), or one alone.
struct Told<'a> {
    group: Option<&'a StragglerGroup>,
    stragglers: Vec<&'a Straggler>,
}

/// `stragglers` by the report's straggler group each is in (one in none
/// alone), in the order of each's first straggler (the costliest first,
/// as the report lists them).
fn by_group<'a>(report: &'a Report, stragglers: &[&'a Straggler]) -> Vec<Told<'a>> {
    let mut told: Vec<Told<'a>> = Vec::new();
    for &s in stragglers {
        let group = report
            .straggler_groups
            .iter()
            .find(|g| g.stage == s.stage && g.ranks.binary_search(&s.rank).is_ok());
        let same = |t: &&mut Told<'a>| matches!((t.group, group), (Some(a), Some(b)) if std::ptr::eq(a, b));
        match told.iter_mut().find(same) {
            Some(t) => t.stragglers.push(s),
            None => told.push(Told {
                group,
                stragglers: vec![s],
            }),
        }
    }
    told
}

/// A recommendation of `severity` in `category`.
fn finding(
    severity: Severity,
    category: &str,
    message: String,
    evidence: String,
) -> Recommendation {
    Recommendation {
        severity,
        category: category.into(),
        message,
        evidence,
    }
}

/// The recommendations for an analysed report, most severe first.
pub fn recommend(report: &Report) -> Vec<Recommendation> {
    let mut out = missing_ranks(report);
    out.extend(skipped_inputs(report));
    out.extend(straggler_findings(report));
    out.extend(gpu_bottlenecks(report));
    out.extend(hot_stages(report));
    out.extend(dropped_rows(report));
    out.extend(overflows(report));
    out.extend(kernel_findings(report));
    out.sort_by_key(|r| r.severity);
    out
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

/// The stragglers: first those slower only waiting for another rank, then
/// the others, by straggler group.
fn straggler_findings(report: &Report) -> Vec<Recommendation> {
    let mut out = Vec::new();
    let mut alone: Vec<&Straggler> = Vec::new();
    for s in &report.stragglers {
        match waited_for(report, s) {
            Some(late) => out.push(waiting_straggler(s, late)),
            None => alone.push(s),
        }
    }
    out.extend(
        by_group(report, &alone)
            .iter()
            .filter_map(straggler_group_finding),
    );
    out
}

/// The straggler `s` waits for, where `s` is slower in a stage that mostly
/// waits for another rank.
fn waited_for<'a>(report: &'a Report, s: &Straggler) -> Option<&'a Straggler> {
    let stage = report.stages.iter().find(|stage| stage.name == s.stage);
    stage
        .and_then(|stage| mostly_waiting(report, stage))
        .filter(|late| late.rank != s.rank)
}

/// A straggler whose excess is its wait for `late`, told as that rank's.
fn waiting_straggler(s: &Straggler, late: &Straggler) -> Recommendation {
    finding(
        Severity::Info,
        "straggler",
        format!(
            "rank {} spends {:.0}% longer than the other ranks in `{}` waiting there for \
             rank {}, the straggler in `{}`",
            s.rank,
            (s.slowdown - 1.0) * 100.0,
            s.stage,
            late.rank,
            late.stage
        ),
        format!("{:.3} s over the other ranks' median", s.excess_s),
    )
}

/// One finding about stragglers told together, with the evidence of each.
fn straggler_group_finding(group: &Told) -> Option<Recommendation> {
    let [s, ..] = group.stragglers.as_slice() else {
        return None;
    };
    let evidence = group_evidence(group);
    let by_model = group.group.is_some_and(|g| g.gpu_model.is_some());
    let (explanation, more) = match evidence.split_first() {
        Some((first, more)) => (*first, more),
        None if by_model => (
            "the other ranks run other GPU models: give these ranks less of the work, \
             or run the job on one model",
            &[][..],
        ),
        None => (
            "no GPU or host bottleneck explains it: check its input and data loading",
            &[][..],
        ),
    };
    let (message, numbers) = match (group.group, group.stragglers.len()) {
        (None, _) | (Some(_), 1) => one_straggler_text(s, explanation),
        (Some(shared), _) => group_text(shared, &group.stragglers, explanation),
    };
    Some(finding(
        Severity::Warning,
        "straggler",
        message,
        std::iter::once(numbers)
            .chain(more.iter().map(|line| line.to_string()))
            .collect::<Vec<_>>()
            .join("; "),
    ))
}

/// The evidence of every rank of the group, each line once: the first
/// explains it in the message, the others follow the numbers.
fn group_evidence<'a>(group: &Told<'a>) -> Vec<&'a str> {
    let mut evidence: Vec<&str> = Vec::new();
    for line in group.stragglers.iter().flat_map(|s| &s.evidence) {
        if !evidence.contains(&line.as_str()) {
            evidence.push(line);
        }
    }
    evidence
}

/// The message and numbers of a straggler told alone.
fn one_straggler_text(s: &Straggler, explanation: &str) -> (String, String) {
    (
        format!(
            "rank {} is {:.0}% slower than the median of the other ranks in `{}`; {}",
            s.rank,
            (s.slowdown - 1.0) * 100.0,
            s.stage,
            explanation
        ),
        format!(
            "{:.3} s over the other ranks' median{}; {}",
            s.excess_s,
            s.out_of_spread(),
            costs(s.job_time_s, s.wait_s, "it")
        ),
    )
}

/// The message and numbers of several stragglers that share a host or a
/// GPU model.
fn group_text(
    shared: &StragglerGroup,
    stragglers: &[&Straggler],
    explanation: &str,
) -> (String, String) {
    let n = stragglers.len();
    let stage = &stragglers[0].stage;
    let slowdowns = stragglers.iter().map(|s| (s.slowdown - 1.0) * 100.0);
    let (least, most) = slowdowns.fold((f64::MAX, f64::MIN), |(lo, hi), pct| {
        (lo.min(pct), hi.max(pct))
    });
    let mut ranks: Vec<u32> = stragglers.iter().map(|s| s.rank).collect();
    ranks.sort_unstable();
    (
        format!(
            "{n} ranks {} ({}) are {least:.0}–{most:.0}% slower than the \
             median of the other ranks in `{}`; {}",
            what_they_share(shared),
            rankscope_common::text::rank_ranges(&ranks),
            stage,
            explanation
        ),
        format!(
            "{:.3} s over the other ranks' median in all; {}",
            stragglers.iter().map(|s| s.excess_s).sum::<f64>(),
            // What the ranks cost together (each alone may
            // cost nothing: another as slow holds the job).
            costs(
                shared.job_time_s,
                stragglers.iter().map(|s| s.wait_s).sum(),
                "them"
            )
        ),
    )
}

/// What the ranks of `group` share, in words: `on host h` or `on m GPUs`.
fn what_they_share(group: &StragglerGroup) -> String {
    match (&group.gpu_model, &group.host) {
        (Some(model), _) => format!("on {} GPUs", cell(model, 40)),
        (None, Some(host)) => format!("on host {}", cell(host, 40)),
        (None, None) => "together".into(),
    }
}

/// GPU bottlenecks by kind, those of a straggler's own GPU left out (they
/// are told with the straggler).
fn gpu_bottlenecks(report: &Report) -> Vec<Recommendation> {
    let explained = |gpu: &GpuSummary| report.stragglers.iter().any(|s| owns(s.rank, gpu));
    let mut by_kind: BTreeMap<&str, Vec<(&GpuSummary, &Bottleneck)>> = BTreeMap::new();
    for gpu in report.gpus.iter().filter(|g| !explained(g)) {
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
        Severity::Warning,
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
        Severity::Warning,
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

/// Stages over [`HOT_STAGE_PCT`] of the session by self time (a stage
/// that only encloses others is not where the time goes), hottest first.
fn hot_stages(report: &Report) -> Vec<Recommendation> {
    let mut hot: Vec<_> = report
        .stages
        .iter()
        .filter(|s| s.share_pct > HOT_STAGE_PCT)
        .collect();
    hot.sort_by(|a, b| b.share_pct.total_cmp(&a.share_pct));
    let mut out = Vec::new();
    let mut to_optimise = 0;
    for stage in hot {
        match mostly_waiting(report, stage) {
            Some(late) => out.push(waiting_stage(stage, late)),
            None => {
                out.push(stage_to_optimise(stage, to_optimise == 0));
                to_optimise += 1;
            }
        }
    }
    out
}

/// A hot stage whose time is mostly a wait for the straggler `late`.
fn waiting_stage(stage: &StageStats, late: &Straggler) -> Recommendation {
    finding(
        Severity::Info,
        "stage",
        format!(
            "`{}` takes {:.0}% of the session, but mostly waiting for rank {}, the \
             straggler in `{}`: the wait is that rank's slowness, not work to optimise \
             in `{}`",
            stage.name, stage.share_pct, late.rank, late.stage, stage.name
        ),
        format!(
            "rank {} spends {:.3} s in it, the ranks on average {:.3} s",
            late.rank, stage.self_s.min, stage.self_s.avg
        ),
    )
}

/// A hot stage busy with its own work: the first (or next) place to optimise.
fn stage_to_optimise(stage: &StageStats, first: bool) -> Recommendation {
    finding(
        Severity::Info,
        "stage",
        format!(
            "`{}` takes {:.0}% of the session in its own work (nested stages not counted): {}",
            stage.name,
            stage.share_pct,
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

/// A stage whose least self time is under this share of its mean is
/// mostly waiting on the other ranks, when the rank with the least is a
/// straggler elsewhere.
const WAITING_STAGE_SHARE: f64 = 0.5;

/// The straggler `stage`'s time mostly waits for: a rank slow in another
/// stage that spends far less in this one than the others do (it arrives
/// last, so it waits least). A collective behind a straggler looks so.
fn mostly_waiting<'a>(report: &'a Report, stage: &StageStats) -> Option<&'a Straggler> {
    if stage.self_s.min >= WAITING_STAGE_SHARE * stage.self_s.avg {
        return None;
    }
    report
        .stragglers
        .iter()
        .find(|s| s.rank == stage.self_s.min_rank && s.stage != stage.name)
}

/// What a kernel straggler's category calls the thing that is slow.
fn kind_of(category: &str) -> String {
    if category == KernelCategory::CpuOp.as_str() {
        "CPU operator".into()
    } else {
        format!("{category} kernel")
    }
}

/// A GPU idle for more than this share of its traced window is starved.
const IDLE_GPU_PCT: f64 = 50.0;
/// At most this many idle GPUs are told one by one; the rest are counted.
const IDLE_GPUS_TOLD: usize = 5;
/// At most this many kernel stragglers are told as recommendations.
const KERNEL_STRAGGLERS_TOLD: usize = 5;

/// What the kernel traces say: kernels slower on one rank, ranks the
/// others waited for in collectives (the wait told as the late rank's,
/// never as work to optimise in the collective), GPUs left idle.
fn kernel_findings(report: &Report) -> Vec<Recommendation> {
    let mut out = kernel_stragglers(report);
    out.extend(late_to_collectives(report));
    out.extend(idle_gpus(report));
    out.extend(cut_traces(report));
    out
}

/// The first [`KERNEL_STRAGGLERS_TOLD`] kernels slower on one rank.
fn kernel_stragglers(report: &Report) -> Vec<Recommendation> {
    report
        .kernel_stragglers
        .iter()
        .take(KERNEL_STRAGGLERS_TOLD)
        .map(|k| {
            finding(
                Severity::Warning,
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

/// Ranks that hold the others back in a collective, arriving last.
fn late_to_collectives(report: &Report) -> Vec<Recommendation> {
    let mut out = Vec::new();
    for c in &report.collectives {
        let (Some(last), Some(imposed_s)) = (c.last_to_arrive, c.wait_imposed_s) else {
            continue;
        };
        let others_s: f64 = report
            .collectives
            .iter()
            .filter(|o| o.kind == c.kind && o.group == c.group && o.rank != c.rank)
            .map(|o| o.total_s)
            .sum();
        // A rank last at most of the compared calls, for whom the others
        // spend most of their time in the calls waiting, holds them back;
        // one last now and then is ordinary.
        if last * 2 <= c.compared || imposed_s < WAITING_STAGE_SHARE * others_s {
            continue;
        }
        out.push(finding(
            Severity::Warning,
            "straggler",
            format!(
                "rank {} arrived last at {} of {} `{}` calls compared across ranks{}: the time \
                 the other ranks spend in them is mostly waiting for it; speed up rank {}, not \
                 the collective",
                c.rank,
                last,
                c.compared,
                c.kind,
                c.group
                    .as_deref()
                    .map(|g| format!(" (group {})", cell(g, 40)))
                    .unwrap_or_default(),
                c.rank
            ),
            format!(
                "the other ranks waited {imposed_s:.6} rank-seconds for it to arrive, of \
                 {others_s:.6} s they spent in these calls"
            ),
        ));
    }
    out
}

/// GPUs idle over [`IDLE_GPU_PCT`] of their traced window, the idlest
/// first one by one, the rest counted.
fn idle_gpus(report: &Report) -> Vec<Recommendation> {
    let mut idle: Vec<&GpuTime> = report
        .gpu_time
        .iter()
        .filter(|g| g.idle_pct > IDLE_GPU_PCT)
        .collect();
    idle.sort_by(|a, b| b.idle_pct.total_cmp(&a.idle_pct));
    let mut out: Vec<Recommendation> = idle
        .iter()
        .take(IDLE_GPUS_TOLD)
        .map(|g| {
            finding(
                Severity::Info,
                "gpu",
                format!(
                    "rank {}'s GPU{} was idle {:.0}% of its traced window: the host does not keep it \
                     busy (launch overhead, synchronisation, data loading or waiting for other ranks)",
                    g.rank,
                    g.gpu.map(|i| format!(" {i}")).unwrap_or_default(),
                    g.idle_pct
                ),
                format!(
                    "{:.6} s idle of {:.6} s from its first kernel to its last",
                    g.idle_s, g.window_s
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
            "gpu_time[] in report.json has each".into(),
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
