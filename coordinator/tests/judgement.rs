//! The judgement on generated jobs with the patterns real jobs have: a
//! collective inside a stage, one rank slower, warm-up, a one-off stall,
//! the profiler's own stall, ranks sharing a GPU; at 4 and at 1,024 ranks.
//! Each job is laid out as a lockstep job runs: every step, each rank works,
//! arrives at an all-gather inside `attention` (inside its `cp_all_gather`
//! stage), and leaves when the last rank has arrived and the transfer is
//! done, so that a slow rank's time shows as the others' wait.

use rankscope_common::gather::Gathered;
use rankscope_common::payload::{GpuMeta, GpuSource};
use rankscope_common::table::{
    CollectiveRow, CollectivesBuilder, GpuSampleRow, GpuSamplesBuilder, StageRow, StagesBuilder,
    Table, HOST_WINDOW,
};
use rankscope_common::{Payload, PayloadHeader};
use rankscope_coordinator::analysis::analyze;
use rankscope_coordinator::model::{GpuBusy, GpuIdle, GpuSplit, Report, Severity, VerdictKind};
use rankscope_coordinator::AnalysisConfig;

mod support;
use rankscope_coordinator::model::Category;
use support::assert_costs_add_up;

/// Seconds to nanoseconds.
fn ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

/// What a generated job plants.
#[derive(Clone)]
struct Job {
    ranks: u32,
    steps: u32,
    /// Each rank's work before the all-gather, per step, seconds.
    attention_s: f64,
    /// After it, seconds.
    mlp_s: f64,
    /// The all-gather's own time once every rank has arrived, seconds.
    transfer_s: f64,
    /// A rank whose attention work takes this many times the others'.
    slow: Option<(u32, f64)>,
    /// Step 0's work on every rank takes this many times a steady step's.
    warmup: Option<f64>,
    /// One rank's `mlp` at one step takes this much longer, seconds.
    stall: Option<(u32, u32, f64)>,
    /// Before this step, every rank runs the profiler's own span: rank r
    /// for `base + r * extra` seconds.
    profiler: Option<(u32, f64, f64)>,
    /// Every rank samples one GPU of the host, hot and throttling.
    shared_hot_gpu: bool,
    /// Jitter on every span: up to this share either way.
    jitter: f64,
    /// Every step inside one `train` stage, as a loop wrapped in a stage.
    wrapped: bool,
    /// The first all-gather's own time takes this much longer on every
    /// rank (a communicator's set-up), seconds.
    first_transfer_s: f64,
}

impl Job {
    fn new(ranks: u32) -> Self {
        Job {
            ranks,
            steps: 20,
            attention_s: 0.05,
            mlp_s: 0.03,
            transfer_s: 0.002,
            slow: None,
            warmup: None,
            stall: None,
            profiler: None,
            shared_hot_gpu: false,
            jitter: 0.05,
            wrapped: false,
            first_transfer_s: 0.0,
        }
    }

    /// The ranks' payloads, as they would gather them.
    fn payloads(&self) -> Vec<Payload> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut jitter = move |share: f64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            1.0 + share * ((state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
        };
        let n = self.ranks as usize;
        let mut ranks: Vec<RankRows> = (0..n).map(|_| RankRows::default()).collect();
        let mut clock = vec![0.01f64; n];
        for k in 0..self.steps {
            if let Some((at, base, extra)) = self.profiler {
                if k == at {
                    for (r, t) in clock.iter_mut().enumerate() {
                        let span = base + r as f64 * extra;
                        ranks[r].stage("rankscope:torch.profiler", None, 0, *t, *t + span);
                        *t += span;
                    }
                }
            }
            let factor = |r: usize| {
                let mut f = 1.0;
                if let Some((slow, times)) = self.slow {
                    if slow as usize == r {
                        f *= times;
                    }
                }
                if k == 0 {
                    f *= self.warmup.unwrap_or(1.0);
                }
                f
            };
            let step_start = clock.clone();
            let arrive: Vec<f64> = (0..n)
                .map(|r| step_start[r] + 0.001 + self.attention_s * factor(r) * jitter(self.jitter))
                .collect();
            let set_up = if k == 0 { self.first_transfer_s } else { 0.0 };
            let done = arrive.iter().copied().fold(f64::MIN, f64::max) + self.transfer_s + set_up;
            for r in 0..n {
                let mut mlp = self.mlp_s
                    * jitter(self.jitter)
                    * if k == 0 {
                        self.warmup.unwrap_or(1.0)
                    } else {
                        1.0
                    };
                if let Some((rank, step, extra)) = self.stall {
                    if rank as usize == r && step == k {
                        mlp += extra;
                    }
                }
                let end = done + 0.0005 + mlp;
                // Rows are written as the stages end: the innermost first.
                let rows = &mut ranks[r];
                let gather_start = arrive[r] - 0.0002;
                rows.calls.append(&CollectiveRow {
                    window: HOST_WINDOW,
                    kind: "all_gather".into(),
                    group: Some("0".into()),
                    bytes: Some(1 << 20),
                    start_ns: ns(arrive[r]),
                    dur_ns: ns(done) - ns(arrive[r]),
                });
                let (attention_id, step_id) = (rows.next_id + 2, rows.next_id + 4);
                rows.stage(
                    "cp_all_gather",
                    Some(attention_id),
                    2,
                    gather_start,
                    done + 0.0001,
                );
                rows.stage(
                    "attention",
                    Some(step_id),
                    1,
                    step_start[r] + 0.0005,
                    done + 0.0002,
                );
                rows.stage("mlp", Some(step_id), 1, done + 0.0003, end);
                let (wrapper, depth) = if self.wrapped {
                    (Some(TRAIN_ID), 1)
                } else {
                    (None, 0)
                };
                rows.stage("step", wrapper, depth, step_start[r], end + 0.0001);
                clock[r] = end + 0.0002;
            }
            // The ranks meet at the next step's collective; between steps
            // each goes on at once.
        }
        ranks
            .into_iter()
            .enumerate()
            .map(|(r, mut rows)| {
                if self.wrapped {
                    rows.stages.append(&StageRow {
                        name: "train".into(),
                        thread: 0,
                        thread_name: "main".into(),
                        stage_id: TRAIN_ID,
                        parent_id: None,
                        depth: 0,
                        start_ns: ns(0.005),
                        end_ns: ns(clock[r] + 0.001),
                        call_index: 0,
                        metadata: None,
                    });
                }
                let mut header = PayloadHeader::new("s", "job", r as u32, self.ranks);
                header.clock.duration_ns = ns(clock[r] + 0.01);
                let mut payload = Payload {
                    header,
                    tables: Default::default(),
                };
                payload
                    .tables
                    .insert(Table::Stages, rows.stages.finish().unwrap());
                payload
                    .tables
                    .insert(Table::Collectives, rows.calls.finish().unwrap());
                if self.shared_hot_gpu {
                    add_shared_hot_gpu(&mut payload, clock[r]);
                }
                payload
            })
            .collect()
    }

    fn report(&self) -> Report {
        let gathered = Gathered {
            world_size: self.ranks,
            payloads: self.payloads(),
            ..Gathered::default()
        };
        analyze(&gathered, &AnalysisConfig::default())
    }
}

/// The id of the `train` stage around every step of a wrapped job.
const TRAIN_ID: u64 = 1 << 40;

/// The rows of one rank being laid out.
#[derive(Default)]
struct RankRows {
    stages: StagesBuilder,
    calls: CollectivesBuilder,
    next_id: u64,
}

impl RankRows {
    /// A stage row (the next id), from `s` to `e` seconds.
    fn stage(&mut self, name: &str, parent: Option<u64>, depth: u32, s: f64, e: f64) {
        self.next_id += 1;
        self.stages.append(&StageRow {
            name: name.into(),
            thread: 0,
            thread_name: "main".into(),
            stage_id: self.next_id,
            parent_id: parent,
            depth,
            start_ns: ns(s),
            end_ns: ns(e),
            call_index: 0,
            metadata: None,
        });
    }
}

/// One simulated GPU every rank of the host samples, running hot.
fn add_shared_hot_gpu(payload: &mut Payload, until_s: f64) {
    payload.header.gpu_source = GpuSource::Simulated;
    payload.header.gpus = vec![GpuMeta {
        index: 0,
        uuid: "SIMULATED-GPU-node-0".into(),
        name: "Simulated GPU (not real hardware)".into(),
        pci_bus_id: "simulated".into(),
        memory_total_bytes: Some(80 << 30),
        max_sm_clock_mhz: Some(1980),
        max_mem_clock_mhz: Some(2619),
    }];
    let mut rows = GpuSamplesBuilder::default();
    let readings = (until_s / 0.05) as u64;
    for i in 0..readings {
        rows.append(&GpuSampleRow {
            ts_ns: i * 50_000_000,
            gpu: 0,
            memory_used_bytes: Some(40 << 30),
            memory_total_bytes: Some(80 << 30),
            memory_reserved_bytes: None,
            util_gpu_pct: Some(30.0),
            util_mem_pct: Some(20.0),
            temperature_c: Some(89.0),
            power_w: Some(400.0),
            power_limit_w: Some(700.0),
            sm_clock_mhz: Some(1410),
            mem_clock_mhz: Some(2619),
            throttle_reasons: Some(0x20 | 0x40),
            pcie_tx_kbps: None,
            pcie_rx_kbps: None,
        });
    }
    payload
        .tables
        .insert(Table::GpuSamples, rows.finish().unwrap());
}

/// The job's seconds of `category` in `report`'s time account.
fn job_s(report: &Report, category: Category) -> f64 {
    report.time_account.job.categories.seconds(category)
}

/// Rank `rank`'s seconds of `category`.
fn rank_s(report: &Report, rank: u32, category: Category) -> f64 {
    report.time_account.ranks[rank as usize]
        .categories
        .seconds(category)
}

/// Whether `value` is within `share` of `expected`.
fn near(value: f64, expected: f64, share: f64) -> bool {
    (value - expected).abs() <= share * expected.abs()
}

/// The warnings of a report.
fn warnings(report: &Report) -> Vec<&str> {
    report
        .recommendations
        .iter()
        .filter(|r| r.severity != Severity::Info)
        .map(|r| r.message.as_str())
        .collect()
}

/// No recommendation advises optimising a stage that mostly waits.
fn assert_no_wait_to_optimise(report: &Report) {
    for r in &report.recommendations {
        assert!(
            !(r.message.contains("`cp_all_gather`") && r.message.contains("place to optimise")),
            "{}",
            r.message
        );
    }
}

#[test]
fn a_slow_rank_behind_a_collective_inside_a_stage_is_blamed_once_with_its_stage() {
    let report = Job {
        slow: Some((3, 3.0)),
        ..Job::new(4)
    }
    .report();
    let verdict = report.verdict.as_ref().unwrap();
    assert_eq!(verdict.kind, VerdictKind::Straggler, "{verdict:?}");
    assert_eq!(verdict.ranks, [3]);
    assert_eq!(verdict.stage.as_deref(), Some("attention"), "{verdict:?}");
    assert_eq!(verdict.collective.as_deref(), Some("all_gather"));
    assert!(verdict.cost_pct > 20.0, "{verdict:?}");
    // The others wait in the all-gather: measured, and never a straggler.
    let gather = report
        .stages
        .iter()
        .find(|s| s.name == "cp_all_gather")
        .unwrap();
    let wait = gather.wait_s.unwrap();
    assert!(wait.avg > 0.5 * gather.total_s.avg, "{gather:?}");
    assert_eq!(wait.min_rank, 3, "the late rank waits least");
    assert!(
        report.stragglers.iter().all(|s| s.rank == 3),
        "{:?}",
        report.stragglers
    );
    // One finding for rank 3, not one per nested stage.
    let told: Vec<_> = report
        .recommendations
        .iter()
        .filter(|r| r.category == "straggler" && r.severity == Severity::Warning)
        .collect();
    assert_eq!(told.len(), 1, "{told:#?}");
    assert!(
        told[0]
            .message
            .starts_with("rank 3 holds the job back (arrives last at 20 of 20 `all_gather` calls)"),
        "{}",
        told[0].message
    );
    assert_no_wait_to_optimise(&report);
    // The account: the others wait about 0.1 s a step for rank 3 (its
    // attention 0.15 s against their 0.05 s, ±5 %), the all-gather's own
    // time is 2 ms a step on every rank; the job's path runs through
    // rank 3's extra work, which is the verdict's cost.
    assert_costs_add_up(&report);
    for rank in 0..3 {
        let wait = rank_s(&report, rank, Category::CollectiveWait);
        assert!(near(wait, 20.0 * 0.1, 0.15), "rank {rank} waits {wait}");
    }
    assert!(rank_s(&report, 3, Category::CollectiveWait) < 0.05);
    for rank in 0..4 {
        let transfer = rank_s(&report, rank, Category::CollectiveTransfer);
        assert!(near(transfer, 20.0 * 0.002, 0.2), "rank {rank}: {transfer}");
    }
    assert!(near(verdict.cost_s, 19.0 * 0.1, 0.15), "{verdict:?}");
    assert!(job_s(&report, Category::CollectiveWait) < 0.1 * verdict.cost_s);
    // The recommendations are ordered by what they cost.
    let costs: Vec<f64> = report
        .recommendations
        .iter()
        .filter_map(|r| r.cost_s)
        .collect();
    assert!(costs.windows(2).all(|w| w[0] >= w[1]), "{costs:?}");
}

#[test]
fn a_balanced_job_with_one_stall_blames_no_rank_and_tells_the_stall_apart() {
    let report = Job {
        stall: Some((1, 7, 0.4)),
        ..Job::new(4)
    }
    .report();
    assert_eq!(report.stragglers, [], "{:?}", report.stragglers);
    assert!(
        report
            .recommendations
            .iter()
            .all(|r| r.category != "straggler" || r.severity == Severity::Info),
        "{:#?}",
        report.recommendations
    );
    let stall = report
        .events
        .iter()
        .find(|e| e.kind == "stall")
        .unwrap_or_else(|| panic!("{:?}", report.events));
    assert_eq!((stall.ranks.as_slice(), stall.step), (&[1][..], 7));
    assert_eq!(stall.stage.as_deref(), Some("mlp"));
    assert!((stall.cost_s - 0.4).abs() < 0.05, "{stall:?}");
    let verdict = report.verdict.as_ref().unwrap();
    assert_eq!(verdict.kind, VerdictKind::Stalls, "{verdict:?}");
    assert!(verdict.ranks.contains(&1));
    assert_no_wait_to_optimise(&report);
    // The others' wait behind the stall is no collective's own time.
    assert!(
        report
            .recommendations
            .iter()
            .all(|r| r.category != "communication"),
        "{:#?}",
        report.recommendations
    );
    // The one warning is the stall's.
    assert_eq!(warnings(&report).len(), 1, "{:?}", warnings(&report));
    // The account: rank 1's own stall, the others' wait for it; the job's
    // stall is it, its cost the verdict's.
    assert_costs_add_up(&report);
    assert!(near(rank_s(&report, 1, Category::Stall), 0.4, 0.1));
    for rank in [0, 2, 3] {
        assert!(rank_s(&report, rank, Category::Stall) < 0.02, "rank {rank}");
        assert!(
            rank_s(&report, rank, Category::CollectiveWait) > 0.35,
            "rank {rank}"
        );
    }
    assert!(near(job_s(&report, Category::Stall), 0.4, 0.1));
    assert!(near(verdict.cost_s, 0.4, 0.1), "{verdict:?}");
}

#[test]
fn a_loop_wrapped_in_one_stage_is_judged_step_by_step() {
    let report = Job {
        slow: Some((3, 3.0)),
        warmup: Some(6.0),
        stall: Some((1, 15, 0.4)),
        wrapped: true,
        ..Job::new(4)
    }
    .report();
    let verdict = report.verdict.as_ref().unwrap();
    assert_eq!(
        (verdict.kind, verdict.ranks.as_slice()),
        (VerdictKind::Straggler, &[3][..]),
        "{verdict:?}"
    );
    assert_eq!(verdict.stage.as_deref(), Some("attention"));
    let kinds: Vec<(&str, &[u32], u64)> = report
        .events
        .iter()
        .map(|e| (e.kind.as_str(), e.ranks.as_slice(), e.step))
        .collect();
    assert!(kinds.contains(&("stall", &[1][..], 15)), "{kinds:?}");
    assert!(
        kinds
            .iter()
            .any(|&(kind, ranks, step)| kind == "warmup" && step == 0 && ranks.len() == 4),
        "{kinds:?}"
    );
    assert!(
        report.stragglers.iter().all(|s| s.rank == 3),
        "{:?}",
        report.stragglers
    );
    let late = report.collectives.iter().find(|c| c.rank == 3).unwrap();
    assert!(late.steady_compared >= 15, "{late:?}");
    // The account reads the steps inside `train`: its time between them
    // is its work, not untracked; the set-up ends at the first step.
    assert_costs_add_up(&report);
    let account = &report.time_account;
    for rank in &account.ranks {
        let untracked = rank.categories.seconds(Category::Untracked);
        assert!(untracked < 0.01, "rank {}: {untracked}", rank.rank);
        let top: Vec<&str> = rank
            .work_by_stage
            .top
            .iter()
            .map(|s| s.stage.as_str())
            .collect();
        assert_eq!(top, ["train"], "rank {}", rank.rank);
    }
    assert!(near(job_s(&report, Category::Stall), 0.4, 0.15));
}

/// The first collective call takes a second on every rank (a
/// communicator's set-up, as NCCL's and gloo's first calls do): warm-up,
/// not the steady transfer, and no communication-bound job.
#[test]
fn a_communicators_set_up_in_the_first_call_is_warm_up_not_transfer() {
    let report = Job {
        first_transfer_s: 1.0,
        ..Job::new(4)
    }
    .report();
    assert_costs_add_up(&report);
    let verdict = report.verdict.as_ref().unwrap();
    assert_ne!(verdict.kind, VerdictKind::CommunicationBound, "{verdict:?}");
    assert!(near(job_s(&report, Category::Warmup), 1.0, 0.05));
    for rank in 0..4 {
        let transfer = rank_s(&report, rank, Category::CollectiveTransfer);
        assert!(
            near(transfer, 20.0 * 0.002, 0.25),
            "rank {rank}: {transfer}"
        );
    }
}

#[test]
fn a_warm_up_step_is_an_event_and_no_rank_is_blamed_for_it() {
    let report = Job {
        warmup: Some(8.0),
        ..Job::new(4)
    }
    .report();
    assert_eq!(report.stragglers, [], "{:?}", report.stragglers);
    let warmup: Vec<_> = report
        .events
        .iter()
        .filter(|e| e.kind == "warmup")
        .collect();
    assert_eq!(warmup.len(), 1, "{:?}", report.events);
    assert_eq!((warmup[0].step, warmup[0].rank_count), (0, 4));
    assert_eq!(warmup[0].step_stage, "step");
    // Told, but no warning: warm-up is time a job spends once.
    assert_eq!(warnings(&report), Vec::<&str>::new());
    assert_eq!(report.verdict.as_ref().unwrap().kind, VerdictKind::Balanced);
    assert!(report
        .recommendations
        .iter()
        .any(|r| r.category == "warmup" && r.severity == Severity::Info));
    // The account: step 0's work takes 8x a steady step's 0.08 s: 0.56 s
    // of warm-up on every rank and in the job, the rest steady work.
    assert_costs_add_up(&report);
    for rank in 0..4 {
        let warmup = rank_s(&report, rank, Category::Warmup);
        assert!(near(warmup, 7.0 * 0.08, 0.15), "rank {rank}: {warmup}");
        let work = rank_s(&report, rank, Category::Work);
        assert!(near(work, 20.0 * 0.08, 0.1), "rank {rank}: {work}");
    }
    assert!(near(job_s(&report, Category::Warmup), 0.56, 0.15));
}

#[test]
fn the_profilers_own_stall_is_its_cost_not_a_ranks() {
    // Before step 3 every rank starts the profiler: 0.8 s, rank 3 1.2 s
    // more than rank 0; the others then wait for rank 3.
    let report = Job {
        profiler: Some((3, 0.8, 0.4)),
        ..Job::new(4)
    }
    .report();
    assert_eq!(report.stragglers, [], "{:?}", report.stragglers);
    let profiler: Vec<_> = report
        .events
        .iter()
        .filter(|e| e.kind == "profiler")
        .collect();
    assert_eq!(profiler.len(), 1, "{:?}", report.events);
    assert_eq!(profiler[0].step, 3);
    assert_eq!(
        profiler[0].stage.as_deref(),
        Some("rankscope:torch.profiler")
    );
    assert!((profiler[0].cost_s - 2.0).abs() < 0.1, "{:?}", profiler[0]);
    // A warning, first of the findings by its cost; but the verdict judges
    // the job, and the job is balanced.
    let warning = &report.recommendations[0];
    assert_eq!(
        (warning.severity, warning.category.as_str()),
        (Severity::Warning, "profiler")
    );
    assert!(
        warning
            .message
            .starts_with("The profiler itself cost the job"),
        "{warning:?}"
    );
    let verdict = report.verdict.as_ref().unwrap();
    assert_eq!(verdict.kind, VerdictKind::Balanced, "{verdict:?}");
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e.contains("the profiler itself cost the job 2.")),
        "{verdict:?}"
    );
    // Its time counts as the profiler's, in the overhead: not in stages.
    assert!(report
        .stages
        .iter()
        .all(|s| !s.name.starts_with("rankscope:")));
    // The all-gather after it, where the others waited for rank 3, is
    // no steady arrival.
    let late = report
        .collectives
        .iter()
        .map(|c| c.last_to_arrive.unwrap_or(0))
        .max()
        .unwrap();
    assert!(late < 15, "{:?}", report.collectives);
    // The account: each rank's own profiler span (0.8 s + 0.4 s a rank);
    // the job's path runs through rank 3's 2.0 s, the others' wait for it
    // the profiler's.
    assert_costs_add_up(&report);
    for rank in 0..4 {
        let own = rank_s(&report, rank, Category::Profiler);
        assert!(
            near(own, 0.8 + 0.4 * f64::from(rank), 0.05),
            "rank {rank}: {own}"
        );
    }
    assert!(near(job_s(&report, Category::Profiler), 2.0, 0.05));
}

#[test]
fn a_gpu_every_rank_shares_explains_no_ranks_slowness_and_is_a_finding() {
    let report = Job {
        slow: Some((2, 2.5)),
        shared_hot_gpu: true,
        ..Job::new(4)
    }
    .report();
    let verdict = report.verdict.as_ref().unwrap();
    assert_eq!(verdict.ranks, [2]);
    assert!(
        verdict.evidence.iter().all(|e| !e.contains("GPU 0"))
            && !verdict.sentence.contains("GPU 0"),
        "{verdict:?}"
    );
    assert!(
        report
            .recommendations
            .iter()
            .any(|r| r.message.starts_with("ranks 0-3 share GPU 0")),
        "{:#?}",
        report.recommendations
    );
}

#[test]
fn at_1024_ranks_the_slow_rank_is_blamed_and_a_balanced_job_gets_no_warning() {
    let slow = Job {
        slow: Some((700, 2.0)),
        warmup: Some(5.0),
        steps: 12,
        ..Job::new(1_024)
    }
    .report();
    let verdict = slow.verdict.as_ref().unwrap();
    assert_eq!(
        (verdict.kind, verdict.ranks.as_slice()),
        (VerdictKind::Straggler, &[700][..]),
        "{verdict:?}"
    );
    assert_eq!(verdict.stage.as_deref(), Some("attention"));
    // Rank 700's attention 0.1 s against 0.05 s: the job's path runs
    // through its 0.05 s a step, the verdict's cost.
    assert_costs_add_up(&slow);
    assert_eq!(slow.time_account.ranks.len(), 1_024);
    assert!(near(verdict.cost_s, 11.0 * 0.05, 0.2), "{verdict:?}");
    let balanced = Job {
        warmup: Some(5.0),
        stall: Some((17, 6, 0.3)),
        steps: 12,
        ..Job::new(1_024)
    }
    .report();
    assert_eq!(balanced.stragglers, [], "{:?}", balanced.stragglers);
    let blamed: Vec<&str> = warnings(&balanced)
        .into_iter()
        .filter(|w| w.contains("holds the job back"))
        .collect();
    assert_eq!(blamed, Vec::<&str>::new());
    assert!(balanced
        .events
        .iter()
        .any(|e| e.kind == "stall" && e.ranks == [17]));
    assert_costs_add_up(&balanced);
    assert!(near(job_s(&balanced, Category::Stall), 0.3, 0.15));
    assert!(near(rank_s(&balanced, 17, Category::Stall), 0.3, 0.1));
}

#[test]
fn a_gpu_idle_while_its_rank_waits_is_told_as_waiting() {
    let mut report = Job {
        slow: Some((3, 3.0)),
        ..Job::new(4)
    }
    .report();
    // Rank 0's GPU idle 86 % of a 1 s traced window, 0.8 s of it while
    // rank 0 waited in the all-gather; rank 1's idle in its own host work.
    let gpu = |waiting_s: f64| GpuSplit {
        window_s: 1.0,
        busy: GpuBusy {
            compute: 0.1,
            communication: 0.0,
            memory: 0.04,
        },
        idle: GpuIdle {
            host_work: 0.86 - waiting_s,
            collective_transfer: 0.0,
            collective_wait: waiting_s,
        },
        host_collective_s: waiting_s,
        compute_in_collective_s: 0.0,
    };
    let ranks = &mut report.time_account.ranks;
    ranks[0].gpu = Some(gpu(0.8));
    ranks[1].gpu = Some(gpu(0.0));
    rankscope_coordinator::analysis::recommend::judge(&mut report);
    let idle: Vec<&str> = report
        .recommendations
        .iter()
        .filter(|r| r.message.contains("was idle"))
        .map(|r| r.message.as_str())
        .collect();
    assert!(
        idle.contains(
            &"rank 0's GPU was idle 86% of its traced windows (80 points waiting in collective \
              calls for rank 3, 6 points in the host's own work): the wait for rank 3, not the \
              host, leaves it idle"
        ),
        "{idle:#?}"
    );
    assert!(
        idle.iter().any(|m| m.starts_with(
            "rank 1's GPU was idle 86% of its traced windows (86 points \
                in the host's own work): the host does not keep it busy"
        )),
        "{idle:#?}"
    );
}
