//! The analysis: gathered payloads in, the [`Report`] model out.

pub mod account;
pub mod bottlenecks;
mod calls;
mod diffusion;
mod digest;
mod events;
pub mod gpus;
mod intervals;
pub mod kernels;
mod launches;
mod overhead;
pub mod python;
pub mod recommend;
pub mod series;
pub mod shared_names;
mod sketch;
mod stages;
pub mod stats;
mod steady;
mod stragglers;
pub mod timeline;
mod times;
pub mod verdict;

pub use bottlenecks::BottleneckRule;
pub use digest::REPRESENTED_NODES;
pub use digest::{leader_digest, DigestError, NodeDigest, NodeOf, RankDigest, NODE_DIGEST_LIMIT};
pub use sketch::EXACT_CALLS;
pub use stragglers::StragglerRule;

use std::collections::BTreeMap;

use crate::AnalysisConfig;
use rankscope_common::error::Chain;
use rankscope_common::gather::Headed;
use rankscope_common::payload::GpuSource;
use rankscope_common::window::WindowMeta;
use rankscope_common::{Gathered, Payload, Rejection, Skipped};

use crate::join::join;
use crate::model::{
    AccountScope, DiffusionSummary, DroppedRows, GpuSeries, GpuSummary, LockstepStage, NodeSummary,
    Notice, RankGpu, RankSummary, RankTimeline, Report, Series, SessionSummary, SkippedInput,
    StageStats, TimeAccount, WindowSummary, MISSING_LISTED, SCHEMA_VERSION,
};
use times::StageTimes;

/// Puts the analysis of kernel traces into `report`: its kernel sections,
/// the kernel stragglers joined to the stage stragglers, and the verdict
/// and recommendations judged (again, for a report judged before) with both.
pub fn add_kernels(report: &mut Report, analysis: kernels::KernelAnalysis) {
    report.gpu_time = analysis.gpu_time;
    report.kernels = analysis.kernels;
    report.cpu_ops = analysis.cpu_ops;
    report.stage_kernels = analysis.stage_kernels;
    report.kernel_stragglers = analysis.kernel_stragglers;
    report.collectives = analysis.collectives;
    report.kernel_traces = analysis.kernel_traces;
    kernels::attribute_kernels(&mut report.kernel_stragglers, &report.stragglers);
    recommend::judge(report);
}

/// Analyses everything rank 0 gathered: its payloads, and in a two-level
/// gather the other nodes' digests (those refused named as skipped inputs).
pub fn analyze(gathered: &Gathered, config: &AnalysisConfig) -> Report {
    analyze_gathered(gathered, config).0
}

/// [`analyze`], and the payloads of the busiest rank of the nodes the
/// digests came from (of the [`REPRESENTED_NODES`] busiest) and of the
/// ranks `trace_ranks` names, decoded, by rank: rank 0 writes their rows
/// into the trace and raw/ beside its own.
pub fn analyze_with_rows(gathered: &Gathered, config: &AnalysisConfig) -> (Report, Vec<Payload>) {
    let (report, represented) = analyze_gathered(gathered, config);
    (report, digest::represented_payloads(gathered, represented))
}

/// [`analyze`], and the payloads the node digests carried (their busiest
/// ranks' and those to trace), still encoded, as `(rank, payload)`.
fn analyze_gathered(
    gathered: &Gathered,
    config: &AnalysisConfig,
) -> (Report, Vec<(u32, digest::Bytes)>) {
    let ranks = gathered
        .payloads
        .iter()
        .map(|payload| RankDigest::new(payload, config))
        .collect();
    let mut job = NodeDigest::new(ranks);
    let mut represented = Vec::new();
    if !gathered.nodes.is_empty() {
        let (mut nodes, refused) = digest::accept_nodes(gathered, config);
        let busiest = std::mem::take(&mut nodes.representatives);
        represented = busiest
            .into_iter()
            .map(|(_, rank, bytes)| (rank, bytes))
            .collect();
        represented.append(&mut nodes.traced);
        job.merge(nodes);
        job.add_skipped(refused, 0);
    }
    (analyze_nodes(gathered, [job], config), represented)
}

/// Analyses the payloads gathered as digests ([`RankDigest`]), each made
/// when its payload was decoded.
pub fn analyze_digests(mut gathered: Gathered<RankDigest>, config: &AnalysisConfig) -> Report {
    let ranks = std::mem::take(&mut gathered.payloads);
    analyze_nodes(&gathered, [NodeDigest::new(ranks)], config)
}

/// The report of the ranks of `nodes`, merged; the world, missing ranks
/// and skipped inputs come from `gathered` (its payloads are not read).
pub fn analyze_nodes<T>(
    gathered: &Gathered<T>,
    nodes: impl IntoIterator<Item = NodeDigest>,
    config: &AnalysisConfig,
) -> Report {
    let mut nodes = nodes.into_iter();
    let mut job = nodes.next().unwrap_or_default();
    for node in nodes {
        job.merge(node);
    }
    job.sort();
    analyze_job(gathered, job, config)
}

/// The report of `job`, the digest of every rank `gathered` accepted.
fn analyze_job<T>(gathered: &Gathered<T>, job: NodeDigest, config: &AnalysisConfig) -> Report {
    let (other_runs, mut skipped) = skipped_inputs(gathered);
    let NodeDigest {
        mut ranks,
        stages: times,
        steps: steps_across,
        refused,
        skipped: skipped_by_leaders,
        skipped_unlisted,
        analysed_under: _,
        representatives: _,
        traced: _,
    } = job;
    skipped.extend(skipped_by_leaders);
    if skipped_unlisted > 0 {
        skipped.push(SkippedInput {
            source: "more inputs the node leaders refused".into(),
            reason: format!("{skipped_unlisted} not listed one by one"),
        });
    }
    let parts = RankParts::take(&mut ranks, &mut skipped);
    skipped.extend(refused.into_iter().map(|(rank, reason)| SkippedInput {
        source: format!("rank {rank} stages"),
        reason,
    }));
    let (gpus, gpu_series) = gpus::gpu_summaries(parts.gpus, &config.bottlenecks);
    let rule = config.stragglers;
    let mut report = assemble_report(
        gathered,
        &ranks,
        Merged {
            other_runs,
            skipped,
            times: &times,
            gpus,
            rule,
        },
        config,
    );
    report.time_account = job_account(&mut ranks, &parts.kernels, &steps_across, &report.events);
    let steps: Vec<(u32, &[f64])> = ranks
        .iter()
        .map(|r| (r.header.rank.rank, r.diffusion.steps_ms()))
        .collect();
    report.series = series::series(&report, &times, parts.timelines, gpu_series, &steps);
    let functions: Vec<(u32, &[python::RankFunction])> = parts
        .python
        .iter()
        .map(|(rank, functions)| (*rank, functions.as_slice()))
        .collect();
    report.python_functions = python::across_ranks(&functions);
    let python_stragglers = python::stragglers(&functions, rule);
    if parts.kernels.is_empty() && python_stragglers.is_empty() {
        recommend::judge(&mut report);
    } else {
        let analysis = kernels::analyze_kernels(parts.kernels, rule);
        add_kernels(&mut report, analysis.with_stragglers(python_stragglers));
    }
    report
}

/// The time account of `ranks` (their accounts taken out of them; their
/// steps side by side in `steps`, their kernel traces `kernels`), the
/// job's one-off `events` beside.
fn job_account(
    ranks: &mut [RankDigest],
    kernels: &[kernels::RankKernels],
    steps: &account::StepsAcross,
    events: &[crate::model::OneOffEvent],
) -> TimeAccount {
    let transfers = account::Transfers::of(steps);
    let gpus: BTreeMap<u32, &account::GpuAccount> =
        kernels.iter().map(|k| (k.rank, &k.gpu)).collect();
    let scope = if ranks.iter().any(|r| r.header.window.is_some()) {
        AccountScope::Window
    } else {
        AccountScope::Session
    };
    let parts = ranks
        .iter_mut()
        .map(|digest| {
            let header = &digest.header;
            let rank = header.rank.rank;
            let from_ns = header.window.as_ref().map_or(0, |w| w.started_ns);
            let start_ns = timeline::aligned_start_ns(header)
                .saturating_add(from_ns.min(i64::MAX as u64) as i64);
            let gpu = gpus.get(&rank).copied();
            let own = std::mem::take(&mut digest.account);
            account::rank_part(rank, own, &transfers, start_ns, gpu)
        })
        .collect();
    account::account(
        scope,
        parts,
        account::JobInputs {
            events,
            delays: steps.delays(),
            waited_for: steps.waited_for(),
            notes: Vec::new(),
        },
    )
}

/// The inputs `gathered` skipped: files of other runs that shared the
/// session id (no fault of this one), and apart from them those refused.
fn skipped_inputs<T>(gathered: &Gathered<T>) -> (Vec<SkippedInput>, Vec<SkippedInput>) {
    let (other_runs, refused): (Vec<&Skipped>, Vec<&Skipped>) = gathered
        .skipped
        .iter()
        .partition(|s| matches!(s.reason, Rejection::OtherRun { .. }));
    let input = |s: &&Skipped| SkippedInput {
        source: s.source.clone(),
        reason: Chain(&s.reason).to_string(),
    };
    (
        other_runs.iter().map(input).collect(),
        refused.iter().map(input).collect(),
    )
}

/// The parts of each digest that are merged across ranks, taken out of
/// the digests, in rank order.
struct RankParts {
    /// The kernel traces of the ranks that recorded any.
    kernels: Vec<kernels::RankKernels>,
    /// Each rank's GPUs and their readings.
    gpus: Vec<Vec<(GpuSummary, GpuSeries)>>,
    /// Each rank's outermost stages over time.
    timelines: Vec<RankTimeline>,
    /// Each rank's traced Python functions.
    python: Vec<(u32, Vec<python::RankFunction>)>,
}

impl RankParts {
    /// Takes the parts out of `ranks`; kernel traces and Python functions
    /// refused are added to `skipped`.
    fn take(ranks: &mut [RankDigest], skipped: &mut Vec<SkippedInput>) -> Self {
        let mut parts = RankParts {
            kernels: Vec::new(),
            gpus: Vec::with_capacity(ranks.len()),
            timelines: Vec::with_capacity(ranks.len()),
            python: Vec::with_capacity(ranks.len()),
        };
        for digest in ranks.iter_mut() {
            let rank = digest.header.rank.rank;
            match std::mem::replace(&mut digest.kernels, Ok(None)) {
                Ok(Some(kernels)) => parts.kernels.push(kernels),
                Ok(None) => {}
                Err(reason) => skipped.push(SkippedInput {
                    source: format!("rank {rank} kernel traces"),
                    reason,
                }),
            }
            match std::mem::replace(&mut digest.python, Ok(Vec::new())) {
                Ok(functions) => parts.python.push((rank, functions)),
                Err(reason) => skipped.push(SkippedInput {
                    source: format!("rank {rank} python_functions"),
                    reason,
                }),
            }
            parts.gpus.push(std::mem::take(&mut digest.gpus));
            parts.timelines.push(std::mem::take(&mut digest.timeline));
        }
        parts
    }
}

/// The timeline's zero: rank 0's session start, else the earliest rank's.
fn reference_start_ns(ranks: &[RankDigest]) -> i64 {
    ranks
        .iter()
        .map(|r| &r.header)
        .find(|h| h.rank.rank == 0)
        .or_else(|| {
            ranks
                .iter()
                .map(|r| &r.header)
                .min_by_key(|h| timeline::aligned_start_ns(h))
        })
        .map_or(0, timeline::aligned_start_ns)
}

/// What was merged across ranks, for [`assemble_report`].
struct Merged<'a> {
    /// Files of other runs that shared the session id.
    other_runs: Vec<SkippedInput>,
    /// The inputs refused, and the ranks' tables refused.
    skipped: Vec<SkippedInput>,
    /// The stage calls of every rank.
    times: &'a StageTimes,
    /// The GPUs of every rank.
    gpus: Vec<GpuSummary>,
    /// What makes a rank a straggler.
    rule: StragglerRule,
}

/// The report of the stages, stragglers, ranks, GPUs and diffusion
/// figures (its series, kernels, verdict and recommendations not yet).
fn assemble_report<T>(
    gathered: &Gathered<T>,
    ranks: &[RankDigest],
    merged: Merged,
    config: &AnalysisConfig,
) -> Report {
    let times = merged.times;
    let durations: Vec<f64> = ranks
        .iter()
        .map(|r| r.header.clock.duration_ns as f64 / 1e9)
        .collect();
    let analysed = Analysed::side_by_side(times, ranks, durations.iter().sum());
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        session: SessionSummary {
            other_runs: merged.other_runs,
            warmup_calls: config.warmup_calls,
            ..session_summary(gathered, ranks, merged.skipped, &durations)
        },
        window: window_summary(ranks),
        windows: Vec::new(),
        ranks: analysed.ranks,
        stages: analysed.stages,
        stragglers: stragglers::stragglers(times, &analysed.lockstep, merged.rule),
        straggler_groups: Vec::new(),
        lockstep: analysed.lockstep,
        gpus: merged.gpus,
        diffusion: analysed.diffusion,
        recommendations: Vec::new(),
        series: Series::default(),
        gpu_time: Vec::new(),
        kernels: Vec::new(),
        cpu_ops: Vec::new(),
        python_functions: Vec::new(),
        stage_kernels: Vec::new(),
        kernel_stragglers: Vec::new(),
        collectives: Vec::new(),
        kernel_traces: Vec::new(),
        events: events::job_events(ranks, reference_start_ns(ranks)),
        time_account: TimeAccount::default(),
        verdict: None,
    };
    add_findings(&mut report, times);
    report
}

/// The parts of the report [`Analysed::side_by_side`] computes.
struct Analysed {
    /// `lockstep[]`.
    lockstep: Vec<LockstepStage>,
    /// `ranks[]`.
    ranks: Vec<RankSummary>,
    /// `diffusion`.
    diffusion: DiffusionSummary,
    /// `stages[]`.
    stages: Vec<StageStats>,
}

impl Analysed {
    /// The per-call analysis, the ranks and the diffusion steps, beside
    /// the per-stage statistics (`session_total_s`: the ranks' durations
    /// summed).
    fn side_by_side(times: &StageTimes, ranks: &[RankDigest], session_total_s: f64) -> Self {
        let reference_start_ns = reference_start_ns(ranks);
        let diffusion: Vec<_> = ranks
            .iter()
            .map(|r| (r.header.rank.rank, &r.diffusion))
            .collect();
        let ((lockstep, rank_summaries, diffusion_stats), stages) = join(
            || {
                (
                    stragglers::lockstep(times),
                    ranks
                        .iter()
                        .map(|r| rank_summary(r, reference_start_ns))
                        .collect(),
                    diffusion::diffusion(&diffusion),
                )
            },
            || stages::stage_stats(times, session_total_s),
        );
        Analysed {
            lockstep,
            ranks: rank_summaries,
            diffusion: diffusion_stats,
            stages,
        }
    }
}

/// Adds what the report's parts say together: the stragglers' causes and
/// host groups (the verdict and recommendations are judged once every part
/// is in: [`recommend::judge`]).
fn add_findings(report: &mut Report, times: &StageTimes) {
    stragglers::attribute(&mut report.stragglers, &report.gpus, &report.ranks);
    report.straggler_groups = stragglers::groups(&report.stragglers, &report.ranks, times);
}

/// The session's header: world, ranks reporting and missing, skipped inputs.
fn session_summary<T>(
    gathered: &Gathered<T>,
    ranks: &[RankDigest],
    skipped: Vec<SkippedInput>,
    durations: &[f64],
) -> SessionSummary {
    let first = ranks.first().map(|r| &r.header);
    let missing = missing_ranks(gathered, ranks);
    SessionSummary {
        id: first.map(|h| h.session.id.clone()).unwrap_or_default(),
        name: first.map(|h| h.session.name.clone()).unwrap_or_default(),
        tags: first
            .map(|h| h.session.tags.iter().cloned().collect())
            .unwrap_or_default(),
        world_size: gathered.world_size,
        ranks_reporting: ranks.iter().map(|r| r.header.rank.rank).collect(),
        ranks_missing: missing.iter().take(MISSING_LISTED).copied().collect(),
        ranks_missing_count: missing.len() as u32,
        launcher: first.map(|h| h.rank.launcher.clone()).unwrap_or_default(),
        transport: first.map(|h| h.transport).unwrap_or_default(),
        clock_sync: first.map(|h| h.clock_sync).unwrap_or_default(),
        endpoint: first.and_then(|h| h.endpoint.clone()),
        run_id: first.and_then(|h| h.session.run_id.clone()),
        duration_s: durations.iter().copied().fold(0.0, f64::max),
        gpu_source: gpu_source(ranks),
        started_unix_s: first.map_or(0.0, |h| h.clock.start_unix_ns as f64 / 1e9),
        skipped,
        other_runs: Vec::new(),
        judged_by_age: judged_by_age(gathered, ranks),
        warmup_calls: 0,
        notices: rankscope_common::gather::notices(ranks.iter().map(Headed::header))
            .into_iter()
            .map(|(message, ranks)| Notice { message, ranks })
            .collect(),
        dropped_rows: dropped_rows(ranks),
        gather_levels: u32::from(gathered.gather_levels),
        nodes: nodes(ranks),
    }
}

/// The ranks of the world with no payload: as `gathered` says, or in a
/// two-level gather (where which ranks of a node its digest holds is
/// known only now) every rank of the world that `ranks` lack.
fn missing_ranks<T>(gathered: &Gathered<T>, ranks: &[RankDigest]) -> Vec<u32> {
    if gathered.nodes.is_empty() {
        return gathered.missing.clone();
    }
    let reporting: std::collections::BTreeSet<u32> =
        ranks.iter().map(|r| r.header.rank.rank).collect();
    (0..gathered.world_size)
        .filter(|rank| !reporting.contains(rank))
        .collect()
}

/// The nodes `ranks` ran on, by host (or node name), each with its leader.
fn nodes(ranks: &[RankDigest]) -> Vec<NodeSummary> {
    let mut by_name: BTreeMap<&str, Vec<(u32, u32)>> = BTreeMap::new();
    for header in ranks.iter().map(|r| &r.header.rank) {
        let on = by_name.entry(header.host.as_str()).or_default();
        on.push((header.local_rank, header.rank));
    }
    by_name
        .into_iter()
        .map(|(name, mut on)| {
            on.sort_unstable_by_key(|&(local_rank, rank)| (local_rank != 0, rank));
            let leader = on[0].1;
            let mut ranks: Vec<u32> = on.into_iter().map(|(_, rank)| rank).collect();
            ranks.sort_unstable();
            NodeSummary {
                name: name.to_string(),
                leader,
                ranks,
            }
        })
        .collect()
}

/// The GPU source of the session: NVML where any rank read it, else
/// simulated where any rank did, else none.
fn gpu_source(ranks: &[RankDigest]) -> GpuSource {
    [GpuSource::Nvml, GpuSource::Simulated]
        .into_iter()
        .find(|source| ranks.iter().any(|r| r.header.gpu_source == *source))
        .unwrap_or(GpuSource::None)
}

/// The files of `ranks` judged this run's by their age alone; empty
/// where the run was told by its identity.
fn judged_by_age<T>(gathered: &Gathered<T>, ranks: &[RankDigest]) -> Vec<String> {
    match gathered.judged_by_age {
        // Rank 0's own payload came from memory, not from a file judged.
        true => ranks
            .iter()
            .zip(&gathered.sources)
            .filter(|(rank, _)| rank.header.rank.rank != 0)
            .map(|(_, source)| source.clone())
            .collect(),
        false => Vec::new(),
    }
}

/// The rows each rank dropped, per table.
fn dropped_rows(ranks: &[RankDigest]) -> Vec<DroppedRows> {
    ranks
        .iter()
        .flat_map(|r| {
            r.header.dropped.iter().map(|d| DroppedRows {
                rank: r.header.rank.rank,
                table: d.table.clone(),
                rows: d.rows,
            })
        })
        .collect()
}

/// The window the payloads cover, as rank 0 (else the first rank) saw it;
/// `None` for a session's own payloads.
fn window_summary(ranks: &[RankDigest]) -> Option<WindowSummary> {
    let windows: Vec<(u32, &WindowMeta)> = ranks
        .iter()
        .filter_map(|r| Some((r.header.rank.rank, r.header.window.as_ref()?)))
        .collect();
    let (_, first) = windows.first()?;
    let ranks_where = |test: &dyn Fn(&WindowMeta) -> bool| {
        windows
            .iter()
            .filter(|(_, w)| test(w))
            .map(|&(rank, _)| rank)
            .collect()
    };
    let plan = |w: &WindowMeta| (w.planned_first_step, w.planned_steps);
    Some(WindowSummary {
        index: first.index,
        trigger: first.trigger.as_str().to_string(),
        first_step: first.planned_first_step,
        steps: first.planned_steps,
        started_s: first.started_ns as f64 / 1e9,
        duration_s: first.duration_ns as f64 / 1e9,
        ranks_opened_late: ranks_where(&|w| w.first_step > w.planned_first_step),
        ranks_cut_short: ranks_where(&|w| {
            w.first_step + w.steps < w.planned_first_step + w.planned_steps
        }),
        ranks_other_plan: ranks_where(&|w| plan(w) != plan(first)),
        cancelled: first.cancelled.clone(),
    })
}

fn rank_summary(digest: &RankDigest, reference_start_ns: i64) -> RankSummary {
    let h = &digest.header;
    RankSummary {
        started_s: (timeline::aligned_start_ns(h).saturating_sub(reference_start_ns)) as f64 / 1e9,
        clock_drift_ns: timeline::drift_ns(h),
        rank: h.rank.rank,
        host: h.rank.host.clone(),
        pid: h.rank.pid,
        local_rank: h.rank.local_rank,
        parallel: digest.parallel.clone(),
        clock_offset_ns: h.clock.offset_to_rank0.map(|o| o.offset_ns),
        clock_round_trip_ns: h.clock.offset_to_rank0.map(|o| o.round_trip_ns),
        clock_offset_spread_ns: None,
        duration_s: h.flushed_until_ns.unwrap_or(h.clock.duration_ns) as f64 / 1e9,
        partial: h.flushed_until_ns.is_some(),
        gpus: h
            .gpus
            .iter()
            .map(|g| RankGpu {
                index: g.index,
                uuid: g.uuid.clone(),
                name: g.name.clone(),
            })
            .collect(),
        gpu_selection: h.gpu_selection.clone(),
        host_telemetry: digest.host.clone(),
        overflow: h.overflow.clone(),
        sampler: h.sampler.clone(),
        rows: digest.rows.clone(),
        overhead: digest.overhead.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::gpus::tests::rank_reading;
    use super::*;
    use crate::model::BottleneckKind;
    use rankscope_common::Config;
    use rankscope_common::Payload;

    /// Every rank of `payloads` reported.
    fn gathered(payloads: Vec<Payload>) -> Gathered {
        Gathered {
            world_size: payloads.len() as u32,
            payloads,
            ..Gathered::default()
        }
    }

    /// The session lists its nodes, each with its leader (its rank of
    /// local rank 0) and ranks, and says the gather had one level.
    #[test]
    fn the_session_names_each_node_with_its_leader_and_ranks() {
        // node-b's local rank 0 is its second rank.
        let placed = [
            (0, "node-a", 0),
            (1, "node-a", 1),
            (2, "node-b", 1),
            (3, "node-b", 0),
        ];
        let payloads = placed
            .iter()
            .map(|&(rank, host, local_rank)| {
                let mut payload = rank_reading(rank, 2, |_, _| {});
                payload.header.rank.host = host.into();
                payload.header.rank.local_rank = local_rank;
                payload
            })
            .collect();
        let session = analyze(&gathered(payloads), &AnalysisConfig::default()).session;
        assert_eq!(session.gather_levels, 1);
        let nodes: Vec<_> = session
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.leader, n.ranks.clone()))
            .collect();
        assert_eq!(
            nodes,
            [("node-a", 0, vec![0, 1]), ("node-b", 3, vec![2, 3])]
        );
    }

    /// Ranks slow in a stage that share a GPU model the other ranks lack,
    /// on several hosts, are one finding about the model; ranks slow on one
    /// host, one about the host.
    #[test]
    fn ranks_slow_on_a_minority_gpu_model_are_one_finding() {
        // 16 ranks, 4 a host; one rank of each host on an A100, the others
        // on H100s; the A100 ranks take half as long again.
        let payloads = (0..16)
            .map(|rank| {
                let a100 = rank % 4 == 3;
                let mut payload = rank_reading(rank, if a100 { 15 } else { 10 }, |_, _| {});
                payload.header.rank.host = format!("node-{}", rank / 4);
                payload.header.gpus[0].name = if a100 { "A100" } else { "H100" }.into();
                payload
            })
            .collect();
        let report = analyze(&gathered(payloads), &AnalysisConfig::default());
        let groups: Vec<_> = report
            .straggler_groups
            .iter()
            .map(|g| (g.gpu_model.as_deref(), g.host.as_deref(), g.ranks.clone()))
            .collect();
        assert_eq!(groups, [(Some("A100"), None, vec![3, 7, 11, 15])]);
        let told: Vec<_> = report
            .recommendations
            .iter()
            .filter(|r| r.category == "straggler")
            .collect();
        assert_eq!(told.len(), 1, "{told:#?}");
        assert!(
            told[0]
                .message
                .starts_with("4 ranks on A100 GPUs (3, 7, 11, 15) hold the job back")
                && told[0]
                    .message
                    .contains("the other ranks run other GPU models"),
            "{}",
            told[0].message
        );
        // One model throughout: no group by model (the same slow ranks on
        // four hosts are four findings' worth of ranks, not a model's).
        let payloads = (0..16)
            .map(|rank| {
                let mut payload =
                    rank_reading(rank, if rank % 4 == 3 { 15 } else { 10 }, |_, _| {});
                payload.header.rank.host = format!("node-{}", rank / 4);
                payload
            })
            .collect();
        let report = analyze(&gathered(payloads), &AnalysisConfig::default());
        assert!(
            report.straggler_groups.is_empty(),
            "{:?}",
            report.straggler_groups
        );
    }

    /// Past 256 ranks the heatmap's columns are runs of ranks, each cell
    /// its slowest rank's, named; past 64 the timeline draws the
    /// stragglers first and counts the ranks it leaves out.
    #[test]
    fn charts_at_scale_bin_ranks_and_name_the_slowest() {
        const RANKS: u32 = 600;
        let payloads = (0..RANKS)
            .map(|rank| rank_reading(rank, if rank == 333 { 20 } else { 10 }, |_, _| {}))
            .collect();
        let report = analyze(&gathered(payloads), &AnalysisConfig::default());
        let series = &report.series;
        // 600 ranks in runs of 3: 200 columns.
        assert_eq!(series.columns.len(), 200);
        let column = series
            .columns
            .iter()
            .position(|c| (c.first..=c.last).contains(&333))
            .unwrap();
        assert_eq!(series.columns[column].ranks, 3);
        assert_eq!(series.stage_totals_s[0][column], Some(20.0));
        assert_eq!(series.stage_slowest[0][column], Some(333));
        assert_eq!(series.stage_totals_s[0][0], Some(10.0));
        assert_eq!(series.timelines.len(), series::DRAWN_RANKS);
        assert_eq!(series.timelines.first().map(|t| t.rank), Some(0));
        assert!(series.timelines.iter().any(|t| t.rank == 333));
        assert_eq!(series.ranks_not_drawn, u64::from(RANKS) - 64);
        // A few ranks: a column each, nothing named apart.
        let small = rank1_slow(|_, _| {});
        assert_eq!(small.series.columns.len(), 3);
        assert!(small.series.stage_slowest.is_empty());
        assert_eq!(small.series.timelines.len(), 3);
        assert_eq!(small.series.ranks_not_drawn, 0);
    }

    /// Three ranks run `denoise` for 10 s, rank 1 for 15 s; `shape_rank1`
    /// shapes rank 1's GPU readings.
    fn rank1_slow(shape_rank1: impl Fn(u64, &mut rankscope_common::table::GpuSampleRow)) -> Report {
        let payloads = vec![
            rank_reading(0, 10, |_, _| {}),
            rank_reading(1, 15, shape_rank1),
            rank_reading(2, 10, |_, _| {}),
        ];
        let gathered = gathered(payloads);
        analyze(&gathered, &AnalysisConfig::default())
    }

    #[test]
    fn a_straggler_is_explained_by_its_gpus_bottleneck() {
        let report = rank1_slow(|_, row| {
            row.throttle_reasons = Some(bottlenecks::THERMAL_REASONS);
            row.temperature_c = Some(89.0);
        });
        assert_eq!(report.stragglers.len(), 1);
        let straggler = &report.stragglers[0];
        assert_eq!((straggler.rank, straggler.slowdown), (1, 1.5));
        assert_eq!(
            report.gpus[1].bottlenecks[0].kind,
            BottleneckKind::ThermalThrottling
        );
        assert_eq!(
            straggler.evidence,
            [
                "its GPU 1 (thermal_throttling): thermally throttled in 100% of 15 readings, 89 °C at most",
                "its GPU 1 (outlier): peak temperature 89 °C against 65 °C ± 0 on its 2 peers",
            ]
        );
        assert_eq!(
            report.recommendations[0].message,
            "rank 1 holds the job back: its work in `denoise` takes 1.50x the other ranks' \
             (+5.000 s); its GPU 1 (thermal_throttling): thermally throttled in 100% of 15 \
             readings, 89 °C at most; it cost the job 5.000 s."
        );
        let verdict = report.verdict.as_ref().unwrap();
        assert_eq!(verdict.kind, crate::model::VerdictKind::Straggler);
        assert_eq!(
            (verdict.ranks.as_slice(), verdict.stage.as_deref()),
            (&[1][..], Some("denoise"))
        );
        assert!((verdict.cost_s - 5.0).abs() < 1e-6, "{verdict:?}");
    }

    /// Ranks slow together on one host are one finding about the host.
    #[test]
    fn stragglers_on_one_host_are_one_finding() {
        let payloads = (0..8)
            .map(|rank| {
                let mut payload = rank_reading(
                    rank,
                    if rank == 4 || rank == 5 { 15 } else { 10 },
                    |_, _| {},
                );
                payload.header.rank.host = if rank < 4 { "node-a" } else { "node-b" }.into();
                payload
            })
            .collect();
        let report = analyze(&gathered(payloads), &AnalysisConfig::default());
        assert_eq!(
            report.stragglers.len(),
            2,
            "each rank still in stragglers[]"
        );
        let findings: Vec<&str> = report
            .recommendations
            .iter()
            .filter(|r| r.category == "straggler")
            .map(|r| r.message.as_str())
            .collect();
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(
            report.straggler_groups[0].ranks,
            [4, 5],
            "one group, its ranks in order"
        );
        // Each call of 15 s against the others' 10 s: 5 s of job time
        // together, none rank by rank (the other is as slow).
        assert!((report.straggler_groups[0].job_time_s - 5.0).abs() < 1e-6);
        assert!(report.stragglers.iter().all(|s| s.job_time_s == 0.0));
        let evidence = &report.recommendations[0].evidence;
        assert!(
            evidence.contains("cost the job 5.000 s of wall-clock time"),
            "{evidence}"
        );
        assert!(
            findings[0].starts_with(
                "2 ranks on host node-b (4-5) hold the job back: their work in `denoise` takes \
                 1.50–1.50x the other ranks' (+10.000 s)"
            ),
            "{}",
            findings[0]
        );
    }

    #[test]
    fn a_straggler_with_healthy_hardware_is_said_to_have_no_explanation() {
        let report = rank1_slow(|_, _| {});
        let straggler = &report.stragglers[0];
        assert_eq!(straggler.rank, 1);
        assert_eq!(straggler.evidence, Vec::<String>::new());
        assert!(report.gpus.iter().all(|g| g.bottlenecks.is_empty()));
        assert!(
            report.recommendations[0].message.contains(
                "no GPU or host bottleneck of its own explains it: check its share of the work \
                 and its input"
            ),
            "{}",
            report.recommendations[0].message
        );
    }

    #[test]
    fn a_gpu_every_rank_shares_is_no_evidence_of_one_ranks_slowness() {
        // Every rank samples the one hot GPU of the host (`gpu_devices: all`,
        // or ranks sharing a device); rank 1 is slow.
        let payloads = [0, 1, 2]
            .map(|rank| {
                let mut payload = rank_reading(rank, if rank == 1 { 15 } else { 10 }, |_, row| {
                    row.temperature_c = Some(90.0)
                });
                payload.header.gpus[0].uuid = "GPU-shared".into();
                payload.header.gpus[0].index = 0;
                payload
            })
            .to_vec();
        let report = analyze(&gathered(payloads), &AnalysisConfig::default());
        assert_eq!(report.gpus.len(), 1);
        assert_eq!(report.stragglers[0].evidence, Vec::<String>::new());
        let verdict = report.verdict.as_ref().unwrap();
        assert_eq!(verdict.ranks, [1]);
        assert!(
            !verdict.sentence.contains("GPU 0")
                && verdict.evidence.iter().all(|e| !e.contains("GPU 0")),
            "{verdict:?}"
        );
        // The GPU's own finding, and the sharing as a finding of its own.
        let gpu: Vec<&str> = report
            .recommendations
            .iter()
            .filter(|r| r.category == "gpu")
            .map(|r| r.message.as_str())
            .collect();
        assert!(
            gpu.contains(&"GPU 0 of rank 0 on node: thermal throttling"),
            "{gpu:?}"
        );
        assert!(
            gpu.iter()
                .any(|m| m.starts_with("ranks 0-2 share GPU 0 on node")),
            "{gpu:?}"
        );
        // Two slow ranks sharing the hot GPU, a third on a cool one of its
        // own: the shared GPU explains them both.
        let payloads = [0, 1, 2]
            .map(|rank| {
                let slow = rank != 0;
                let mut payload = rank_reading(rank, if slow { 15 } else { 10 }, |_, row| {
                    row.temperature_c = Some(if slow { 90.0 } else { 60.0 })
                });
                if slow {
                    payload.header.gpus[0].uuid = "GPU-hot".into();
                    payload.header.gpus[0].index = 1;
                }
                payload
            })
            .to_vec();
        let report = analyze(&gathered(payloads), &AnalysisConfig::default());
        for s in &report.stragglers {
            assert!(
                s.evidence.iter().any(|e| e.starts_with(
                    "GPU 1 on its host (sampled by ranks 1-2, all slow) (thermal_throttling)"
                )),
                "{s:?}"
            );
        }
    }

    #[test]
    fn nested_stages_count_once_in_the_shares() {
        // One rank, 11 s: step 0–10 holds denoise (holding attention) and
        // decode; self times 2 + 3 + 3 + 3 = 11 s.
        let payload = super::times::tests::rank_with_stages(
            0,
            &[
                (1, None, "step", 0.0, 10.0),
                (2, Some(1), "denoise", 1.0, 6.0),
                (3, Some(2), "attention", 2.0, 4.0),
                (4, Some(1), "decode", 6.0, 9.0),
                (5, None, "attention", 10.0, 11.0),
            ],
        );
        let report = analyze(&gathered(vec![payload]), &AnalysisConfig::default());
        let shares: f64 = report.stages.iter().map(|s| s.share_pct).sum();
        assert!((shares - 100.0).abs() < 1e-6, "{shares}");
        let stage = |name: &str| report.stages.iter().find(|s| s.name == name).unwrap();
        assert_eq!(stage("step").total_s.avg, 10.0);
        assert!((stage("step").self_s.avg - 2.0).abs() < 1e-9);
        assert_eq!(stage("denoise").parent.as_deref(), Some("step"));
        assert_eq!(stage("step").parent, None);
        // `step` spans 91 % of the session but does 18 % itself: it is not
        // the place to optimise.
        let hot: Vec<&str> = report
            .recommendations
            .iter()
            .filter(|r| r.category == "stage")
            .map(|r| r.message.as_str())
            .collect();
        assert!(hot.iter().all(|m| !m.contains("`step`")), "{hot:?}");
    }

    #[test]
    fn a_balanced_healthy_job_has_no_straggler_no_bottleneck_and_no_warning() {
        // Four ranks, the same 10 s stage, healthy GPUs that differ a little.
        let payloads = (0..4u32)
            .map(|rank| {
                rank_reading(rank, 10, move |i, row| {
                    let jitter = f64::from((rank * 5 + i as u32) % 4);
                    row.temperature_c = Some(63.0 + jitter);
                    row.util_gpu_pct = Some(88.0 + jitter);
                })
            })
            .collect();
        let report = analyze(&gathered(payloads), &AnalysisConfig::default());
        assert_eq!(report.stragglers, []);
        assert!(report.gpus.iter().all(|g| g.bottlenecks.is_empty()));
        let alarms: Vec<_> = report
            .recommendations
            .iter()
            .filter(|r| r.severity != crate::model::Severity::Info)
            .collect();
        assert_eq!(alarms, Vec::<&crate::model::Recommendation>::new());
    }

    #[test]
    fn a_collective_that_waits_for_a_straggler_is_told_as_that_wait_not_as_work() {
        // Four ranks in lockstep: `attention` then `all_reduce`. Rank 2's
        // attention takes 4 s, the others' 1 s; they then wait in
        // all_reduce until rank 2 arrives, and all finish at 5 s.
        let payloads = (0..4)
            .map(|rank| {
                let attention_end = if rank == 2 { 4.0 } else { 1.0 };
                super::times::tests::rank_with_stages(
                    rank,
                    &[
                        (1, None, "attention", 0.0, attention_end),
                        (2, None, "all_reduce", attention_end, 5.0),
                    ],
                )
            })
            .collect();
        let report = analyze(&gathered(payloads), &AnalysisConfig::default());
        assert_eq!(report.stragglers[0].stage, "attention");
        let stage_advice: Vec<&str> = report
            .recommendations
            .iter()
            .filter(|r| r.category == "stage")
            .map(|r| r.message.as_str())
            .collect();
        let all_reduce = stage_advice
            .iter()
            .find(|m| m.contains("`all_reduce`"))
            .unwrap();
        assert!(
            all_reduce.contains("mostly waiting for rank 2: the wait is that rank's slowness"),
            "{all_reduce}"
        );
        assert!(!all_reduce.contains("place to optimise"), "{all_reduce}");
        // attention is then the first place to optimise.
        assert!(
            stage_advice
                .iter()
                .any(|m| m.contains("`attention`") && m.contains("the first place to optimise")),
            "{stage_advice:?}"
        );
    }

    #[test]
    fn a_stage_only_some_ranks_run_has_their_share_of_the_whole_job() {
        // Rank 0 runs `a` all session long, ranks 1–3 run `b`: 25 % and 75 %.
        let payloads = (0..4)
            .map(|rank| {
                let name = if rank == 0 { "a" } else { "b" };
                super::times::tests::rank_with_stages(rank, &[(1, None, name, 0.0, 10.0)])
            })
            .collect();
        let report = analyze(&gathered(payloads), &AnalysisConfig::default());
        let share = |name: &str| {
            report
                .stages
                .iter()
                .find(|s| s.name == name)
                .unwrap()
                .share_pct
        };
        assert!((share("a") - 25.0).abs() < 1e-9);
        assert!((share("b") - 75.0).abs() < 1e-9);
    }

    #[test]
    fn bottleneck_thresholds_come_from_the_configuration() {
        let gathered = gathered(vec![rank_reading(0, 10, |_, row| {
            row.temperature_c = Some(87.0)
        })]);
        let kinds = |thermal_temp_c: &str| {
            let config = Config::load(None, |name| {
                (name == "RANKSCOPE_GPU_THERMAL_TEMP_C").then(|| thermal_temp_c.to_string())
            })
            .unwrap();
            analyze(&gathered, &AnalysisConfig::from(&config)).gpus[0]
                .bottlenecks
                .iter()
                .map(|b| b.kind)
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds("85"), [BottleneckKind::ThermalThrottling]);
        assert_eq!(kinds("90"), []);
    }

    #[test]
    fn a_bottleneck_on_a_rank_that_keeps_up_is_its_own_recommendation() {
        let payloads = vec![
            rank_reading(0, 10, |_, _| {}),
            rank_reading(1, 10, |_, row| row.throttle_reasons = Some(0x4)),
        ];
        let gathered = gathered(payloads);
        let report = analyze(&gathered, &AnalysisConfig::default());
        assert_eq!(report.stragglers, []);
        let gpu: Vec<_> = report
            .recommendations
            .iter()
            .filter(|r| r.category == "gpu")
            .collect();
        assert_eq!(gpu.len(), 1, "{:?}", report.recommendations);
        assert_eq!(gpu[0].message, "GPU 1 of rank 1 on node: power capped");
    }
}
