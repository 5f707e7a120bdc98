//! The real runs in `tests/data/` (copied from the project's shared
//! fixtures): their known answers, as the report's judgement must give
//! them.
//!
//! `h200-cp4-balanced`: four context-parallel ranks sharing one H200, the
//! steady step bound by a gloo all_gather of CUDA tensors (through host
//! memory), no rank slowed; step 0 is CUDA warm-up, step 3 the
//! torch.profiler window's start (about 5.8 s). Its payloads were written
//! by an earlier agent (payload format 5, no span of the profiler's own).

use std::path::PathBuf;

use arrow_array::cast::AsArray;
use arrow_array::Array;

use rankscope_coordinator::aggregate::{aggregate, Outputs};
use rankscope_coordinator::import::{import, ImportOptions};
use rankscope_coordinator::model::{AccountScope, Category, Report, VerdictKind};
use rankscope_coordinator::AnalysisConfig;

mod support;
use support::assert_costs_add_up;

/// The fixture's folder.
fn fixture(part: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/h200-cp4-balanced")
        .join(part)
}

/// Asserts the judgement the fixture's truth asks of a report of it: the
/// accounts add up, the costs too; the steady step is bound by the
/// all_gather's transfer over gloo; no rank is blamed; the GPUs idle
/// inside collective calls are no host-bound finding.
fn assert_judged_as_the_run_was(report: &Report) {
    assert_costs_add_up(report);
    let verdict = report.verdict.as_ref().expect("a verdict");
    assert_eq!(
        verdict.kind,
        VerdictKind::CommunicationBound,
        "{}",
        verdict.sentence
    );
    assert_eq!(
        verdict.collective.as_deref(),
        Some("all_gather"),
        "{}",
        verdict.sentence
    );
    assert!(verdict.ranks.is_empty(), "{}", verdict.sentence);
    assert!(
        verdict.sentence.contains("gloo"),
        "the backend named: {}",
        verdict.sentence
    );
    let findings: Vec<&str> = report
        .recommendations
        .iter()
        .filter(|r| r.cost_s.is_some())
        .map(|r| r.message.as_str())
        .collect();
    assert!(
        findings.iter().all(|m| !m.contains("holds the job back")),
        "no rank is blamed: {findings:#?}"
    );
    assert!(
        report
            .recommendations
            .iter()
            .all(|r| !r.message.contains("host-bound")
                && !r.message.contains("the host does not keep")),
        "GPU idle inside collectives is not host-bound: {:#?}",
        report.recommendations
    );
    // The GPUs sat idle mostly inside the collective calls, not in the
    // ranks' own host work.
    for rank in &report.time_account.ranks {
        let gpu = rank.gpu.as_ref().expect("each rank traced a window");
        let in_collectives = gpu.idle.collective_transfer + gpu.idle.collective_wait;
        assert!(
            in_collectives > 5.0 * gpu.idle.host_work,
            "rank {}: {gpu:?}",
            rank.rank
        );
        let busy = gpu.busy.compute + gpu.busy.communication + gpu.busy.memory;
        let idle = gpu.idle.host_work + in_collectives;
        assert!(
            (busy + idle - gpu.window_s).abs() < 1e-6,
            "rank {}: {gpu:?}",
            rank.rank
        );
    }
}

#[test]
fn the_h200_run_gathered_is_bound_by_its_gloo_all_gather_and_blames_no_rank() {
    let out = tempfile::tempdir().unwrap();
    let aggregated = aggregate(
        &fixture("payloads"),
        Some(out.path()),
        None,
        Outputs::All,
        &AnalysisConfig::default(),
    )
    .unwrap();
    let report = &aggregated.report;
    assert_judged_as_the_run_was(report);
    let account = &report.time_account;
    assert_eq!(account.scope, AccountScope::Session);
    assert_eq!(account.ranks.len(), 4);
    let job = &account.job.categories;
    // The torch.profiler start at step 3 (about 5.8 s on the slowest rank)
    // is the profiler's, though these payloads' agent recorded no span of
    // its own; the warm-up of steps 0 and 3 is warm-up.
    assert!(job.seconds(Category::Profiler) > 5.5, "{job:?}");
    assert!(job.seconds(Category::Stall) < 0.1, "{job:?}");
    let warmup = job.seconds(Category::Warmup);
    assert!((0.3..1.0).contains(&warmup), "{job:?}");
    // The steady step: the all_gather's own time is most of it (0.08–0.10
    // s of 0.10–0.12), the waiting apart.
    let steady = job.seconds(Category::Work)
        + job.seconds(Category::CollectiveTransfer)
        + job.seconds(Category::CollectiveWait);
    let transfer = job.seconds(Category::CollectiveTransfer);
    assert!(transfer / steady > 0.6, "{job:?}");
    // Each rank's transfer is the least any rank spent in each step's
    // all_gather: the same on every rank, which calls all 20 steps.
    let transfers: Vec<f64> = account
        .ranks
        .iter()
        .map(|r| r.categories.seconds(Category::CollectiveTransfer))
        .collect();
    assert!(
        transfers.iter().all(|t| (t - transfers[0]).abs() < 1e-6),
        "{transfers:?}"
    );
    // The costs: the profiler's 5.8 s and the transfer's 1.8 s are most of
    // the 8.8 s; together the findings stay within it.
    let verdict = report.verdict.as_ref().unwrap();
    assert!(
        verdict.cost_pct > 15.0 && verdict.cost_pct < 30.0,
        "{verdict:?}"
    );
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e.contains("the profiler itself cost the job")),
        "{verdict:?}"
    );
    // raw/time_account.arrow holds the same account, a row per rank (null
    // for the job) and category.
    let file = std::fs::File::open(out.path().join("raw/time_account.arrow")).unwrap();
    let reader = arrow_ipc::reader::FileReader::try_new(file, None).unwrap();
    let mut sums: std::collections::BTreeMap<Option<u32>, f64> = Default::default();
    for batch in reader {
        let batch = batch.unwrap();
        let ranks = batch
            .column(0)
            .as_primitive::<arrow_array::types::UInt32Type>();
        let seconds = batch
            .column(2)
            .as_primitive::<arrow_array::types::Float64Type>();
        for i in 0..batch.num_rows() {
            let rank = ranks.is_valid(i).then(|| ranks.value(i));
            *sums.entry(rank).or_default() += seconds.value(i);
        }
    }
    assert_eq!(sums.len(), 5, "{sums:?}");
    for rank in &account.ranks {
        assert!(
            (sums[&Some(rank.rank)] - rank.wall_s).abs() < 1e-6,
            "{sums:?}"
        );
    }
    assert!((sums[&None] - account.job.wall_s).abs() < 1e-6, "{sums:?}");
}

#[test]
fn the_h200_run_imported_from_its_traces_is_judged_the_same() {
    let out = tempfile::tempdir().unwrap();
    let imported = import(
        &[fixture("traces")],
        out.path(),
        &ImportOptions::default(),
        &AnalysisConfig::default(),
    )
    .unwrap();
    let report = &imported.report;
    assert_judged_as_the_run_was(report);
    let account = &report.time_account;
    assert_eq!(account.scope, AccountScope::Traces);
    for rank in &account.ranks {
        for absent in [Category::Setup, Category::Teardown, Category::Stall] {
            assert_eq!(rank.categories.get(absent), None, "rank {}", rank.rank);
        }
    }
    assert!(
        account.notes.iter().any(|n| n.contains("set-up, teardown")),
        "{:?}",
        account.notes
    );
}
