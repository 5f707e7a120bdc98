//! The time account: each rank's wall time split once into categories
//! that add up to it, and the job's, from which every finding takes its
//! cost (see docs/verdict.md).
//!
//! - [`rank`]: one rank's stage table, on its own, as it is digested:
//!   set-up, teardown, the profiler's spans, stalls and warm-up, steady work
//!   by stage, and each step's time in collective calls;
//! - [`steps`]: the ranks' steps side by side, merged as node digests are:
//!   the least time a rank spent in each step's collectives is their
//!   transfer, the rest is waiting, and who arrived last;
//! - [`gpu`]: what the GPU did in the traced windows beside the host;
//! - here: the ranks' accounts finished with the transfer and wait, and
//!   the job's: the reference rank's (its span is the job's), each second
//!   of its waiting put where the job spent it.

pub mod gpu;
pub mod rank;
pub mod steps;

use std::collections::BTreeMap;

use rankscope_common::text::rank_ranges;

pub use gpu::GpuAccount;
pub use rank::RankAccount;
pub use steps::{Delay, StepsAcross};

use crate::model::{
    AccountScope, Categories, Category, CategorySpread, CollectiveStats, CriticalPath, GpuBusy,
    GpuIdle, GpuSplit, JobTime, OneOffEvent, PathSlice, RankTime, StageSeconds, TimeAccount,
    WaitedFor, WorkByStage,
};

/// Ranks of a job whose lateness [`JobTime::waited_for`] lists: the
/// costliest, enough for the stragglers and straggler groups the findings
/// cost by it.
const WAITED_FOR_LISTED: usize = 64;
/// Stages a rank's entry lists its work by, per list, the last holding
/// the rest (the job lists [`rank::WORK_STAGES`]).
const RANK_WORK_STAGES: usize = 4;

/// What a rank's time account reads of its kernel trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TracedRank {
    /// The rank.
    pub rank: u32,
    /// Its time in collective calls (their union), seconds.
    pub collective_s: f64,
    /// Of that, waiting for the last rank to arrive in the calls compared
    /// across ranks, seconds.
    pub wait_s: f64,
    /// What its GPUs did beside its host.
    pub gpu: GpuAccount,
}

/// One rank as the job's account reads it.
#[derive(Debug, Clone)]
pub struct RankPart {
    /// The rank's account.
    pub time: RankTime,
    /// Its first step's start on the shared timeline, ns; `None` without
    /// steps.
    pub first_step_at_ns: Option<i64>,
}

/// One rank of a job's payloads: its own account with its transfer and
/// wait from the ranks' steps (`transfer_before`:
/// [`StepsAcross::transfer_before`]); `start_ns`: where its account's span
/// starts on the shared timeline.
pub fn rank_part(
    rank: u32,
    account: RankAccount,
    transfers: &Transfers,
    start_ns: i64,
    gpu: Option<&GpuAccount>,
) -> RankPart {
    let transfer_before = &transfers.before;
    let at = |k: u32| transfer_before[(k as usize).min(transfer_before.len().saturating_sub(1))];
    let transfer: f64 = account
        .collective_steps
        .iter()
        .map(|&(first, past)| at(past) - at(first))
        .sum::<f64>()
        .min(account.collective_s);
    // Never -0.0 (an empty sum), never below 0.
    let transfer = if transfer > 0.0 { transfer } else { 0.0 };
    let wait = account.collective_s - transfer;
    // The collectives' one-off own time (a communicator's set-up in the
    // first call) is warm-up, or a stall: not the steady transfer.
    let in_runs = |k: u32| {
        account
            .collective_steps
            .iter()
            .any(|&(first, past)| (first..past).contains(&k))
    };
    let (mut warmup, mut stall, mut transfer) = (account.warmup_s, account.stall_s, transfer);
    for &(_, excess, first) in transfers.one_offs.iter().filter(|o| in_runs(o.0)) {
        let moved = excess.min(transfer);
        transfer -= moved;
        if first {
            warmup += moved;
        } else {
            stall += moved;
        }
    }
    let mut categories = Categories::default();
    for (category, seconds) in [
        (Category::Setup, account.setup_s),
        (Category::Warmup, warmup),
        (Category::Profiler, account.profiler_s),
        (Category::Stall, stall),
        (Category::Work, account.work_s),
        (Category::CollectiveTransfer, transfer),
        (Category::CollectiveWait, wait),
        (Category::Untracked, account.untracked_s),
        (Category::Teardown, account.teardown_s),
    ] {
        categories.set(category, seconds);
    }
    let listed = |list: Vec<(String, f64)>| {
        list.into_iter()
            .map(|(stage, s)| StageSeconds { stage, s })
            .collect()
    };
    RankPart {
        time: RankTime {
            rank,
            wall_s: account.wall_s,
            categories,
            work_by_stage: WorkByStage {
                top: listed(account.work_top),
                innermost: listed(account.work_innermost),
            },
            gpu: gpu.and_then(|g| gpu_split(g, wait_share(transfer, wait))),
        },
        first_step_at_ns: account
            .first_step_ns
            .map(|ns| start_ns.saturating_add(ns.min(i64::MAX as u64) as i64)),
    }
}

/// What the ranks' steps side by side say of each step's transfer, for
/// [`rank_part`].
#[derive(Debug, Clone, Default)]
pub struct Transfers {
    /// [`StepsAcross::transfer_before`].
    pub before: Vec<f64>,
    /// [`StepsAcross::transfer_one_offs`].
    pub one_offs: Vec<(u32, f64, bool)>,
}

impl Transfers {
    /// Of `steps`.
    pub fn of(steps: &StepsAcross) -> Self {
        Transfers {
            before: steps.transfer_before(),
            one_offs: steps.transfer_one_offs(),
        }
    }
}

/// The share of collective time that is waiting, 0 to 1 (0 without any).
pub fn wait_share(transfer: f64, wait: f64) -> f64 {
    let all = transfer + wait;
    if all > 0.0 {
        (wait / all).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// A rank's GPU split, its idle time in collective calls split into
/// transfer and wait by `wait_share`; `None` for no window.
pub fn gpu_split(gpu: &GpuAccount, wait_share: f64) -> Option<GpuSplit> {
    (gpu.window_s > 0.0).then(|| GpuSplit {
        window_s: gpu.window_s,
        busy: GpuBusy {
            compute: gpu.compute_s,
            communication: gpu.communication_s,
            memory: gpu.memory_s,
        },
        idle: GpuIdle {
            host_work: gpu.idle_in_host_work_s(),
            collective_transfer: gpu.idle_in_collective_s * (1.0 - wait_share),
            collective_wait: gpu.idle_in_collective_s * wait_share,
        },
        host_collective_s: gpu.collective_s,
        compute_in_collective_s: gpu.compute_in_collective_s,
    })
}

/// The account of imported traces: each rank's traced window (`walls`,
/// seconds by rank) its time in collective calls (`traced`: transfer and
/// the wait measured across ranks) and the rest its work; the arrivals
/// compared in `collectives` say who the others waited for. Set-up,
/// teardown, untracked time, stalls, warm-up and the profiler's own are
/// not known in a traced window (`null`).
pub fn of_traces(
    walls: &BTreeMap<u32, f64>,
    traced: &[TracedRank],
    collectives: &[CollectiveStats],
) -> TimeAccount {
    let by_rank: BTreeMap<u32, &TracedRank> = traced.iter().map(|t| (t.rank, t)).collect();
    let parts = walls
        .iter()
        .map(|(&rank, &wall_s)| {
            let trace = by_rank.get(&rank).copied();
            let collective = trace.map_or(0.0, |t| t.collective_s).min(wall_s);
            let wait = trace.map_or(0.0, |t| t.wait_s).min(collective);
            let mut categories = Categories::default();
            categories.set(Category::Work, wall_s - collective);
            categories.set(Category::CollectiveTransfer, collective - wait);
            categories.set(Category::CollectiveWait, wait);
            RankPart {
                time: RankTime {
                    rank,
                    wall_s,
                    categories,
                    work_by_stage: WorkByStage::default(),
                    gpu: trace.and_then(|t| gpu_split(&t.gpu, wait_share(collective - wait, wait))),
                },
                first_step_at_ns: None,
            }
        })
        .collect();
    let mut delays: BTreeMap<u32, Delay> = BTreeMap::new();
    let mut waited_for: BTreeMap<u32, f64> = BTreeMap::new();
    for c in collectives {
        let delay = delays.entry(c.rank).or_default();
        delay.seconds += c.delay_imposed_s.unwrap_or(0.0);
        delay.steps += c.last_to_arrive.unwrap_or(0);
        *waited_for.entry(c.rank).or_default() += c.wait_imposed_s.unwrap_or(0.0);
    }
    account(
        AccountScope::Traces,
        parts,
        JobInputs {
            events: &[],
            delays,
            waited_for,
            notes: vec![
                "Imported traces cover their traced window alone: set-up, teardown, untracked \
                 time, stalls, warm-up and the profiler's own time are not measured (null); each \
                 rank's window is its time in collective calls (transfer and waiting, matched \
                 call by call across ranks) and its work."
                    .into(),
            ],
        },
    )
}

/// What the job's account takes from beside the ranks' own accounts.
#[derive(Debug, Default)]
pub struct JobInputs<'a> {
    /// The job's one-off events (their costs are the most any rank lost).
    pub events: &'a [OneOffEvent],
    /// Per rank, how much later the steady collectives ended for it.
    pub delays: BTreeMap<u32, Delay>,
    /// Per rank, the others' wait for it, rank-seconds.
    pub waited_for: BTreeMap<u32, f64>,
    /// What the account could not measure, or estimated, in words.
    pub notes: Vec<String>,
}

/// The account of `ranks` (in rank order) over `scope`.
pub fn account(scope: AccountScope, ranks: Vec<RankPart>, inputs: JobInputs<'_>) -> TimeAccount {
    let job = job_time(&ranks, &inputs);
    let spread = spread(&ranks);
    let ranks = ranks
        .into_iter()
        .map(|mut part| {
            for list in [
                &mut part.time.work_by_stage.top,
                &mut part.time.work_by_stage.innermost,
            ] {
                fold_past(list, RANK_WORK_STAGES);
            }
            part.time
        })
        .collect();
    TimeAccount {
        scope,
        ranks,
        job,
        spread,
        notes: inputs.notes,
    }
}

/// The job's account: the reference rank's (the longest span, the lowest
/// on a tie), its waiting in collective calls moved to where the job spent
/// it, as far as its waiting reaches: the set-up of ranks that reached
/// their first step after it, the one-off time of other ranks (the job's
/// events cost the most any rank lost), the lateness of the ranks that
/// arrived last at steady steps (the critical path runs through their
/// work).
fn job_time(ranks: &[RankPart], inputs: &JobInputs<'_>) -> JobTime {
    let Some(reference) = ranks.iter().max_by(|a, b| {
        a.time
            .wall_s
            .total_cmp(&b.time.wall_s)
            .then(b.time.rank.cmp(&a.time.rank))
    }) else {
        return JobTime::default();
    };
    let r = reference.time.rank;
    let mut categories = reference.time.categories.clone();
    let mut wait = categories.seconds(Category::CollectiveWait);
    let mut slices: Vec<PathSlice> = categories
        .iter()
        .filter(|&(c, s)| c != Category::CollectiveWait && s.is_some_and(|s| s > 0.0))
        .map(|(category, s)| PathSlice {
            category,
            s: s.unwrap_or(0.0),
            ranks: vec![r],
            what: format!("rank {r}'s own {}", category.words()),
        })
        .collect();
    let mut moved = |category: Category, amount: f64, ranks: Vec<u32>, what: String| {
        let take = amount.min(wait).max(0.0);
        if take <= 0.0 {
            return;
        }
        wait -= take;
        categories.set(category, categories.seconds(category) + take);
        slices.push(PathSlice {
            category,
            s: take,
            ranks,
            what,
        });
    };
    // Ranks that came to their first step later: rank r waited for them.
    if let (Some(mine), Some((latest, at))) = (
        reference.first_step_at_ns,
        ranks
            .iter()
            .filter_map(|p| Some((p.time.rank, p.first_step_at_ns?)))
            .max_by_key(|&(rank, at)| (at, std::cmp::Reverse(rank))),
    ) {
        moved(
            Category::Setup,
            at.saturating_sub(mine) as f64 / 1e9,
            vec![latest],
            format!("rank {latest}'s set-up, which rank {r} waited for"),
        );
    }
    for (category, kind) in [
        (Category::Stall, "stall"),
        (Category::Warmup, "warmup"),
        (Category::Profiler, "profiler"),
    ] {
        let of_kind: Vec<&OneOffEvent> = inputs.events.iter().filter(|e| e.kind == kind).collect();
        let cost: f64 = of_kind.iter().map(|e| e.cost_s).sum();
        let mut whose: Vec<u32> = of_kind
            .iter()
            .flat_map(|e| e.ranks.iter().copied())
            .collect();
        whose.sort_unstable();
        whose.dedup();
        whose.retain(|&rank| rank != r);
        moved(
            category,
            cost - reference.time.categories.seconds(category),
            whose.clone(),
            format!(
                "{} of rank{} {} past rank {r}'s own, which it waited for",
                category.words(),
                if whose.len() == 1 { "" } else { "s" },
                rank_ranges(&whose)
            ),
        );
    }
    let mut late: Vec<(u32, Delay)> = inputs
        .delays
        .iter()
        .filter(|(&rank, _)| rank != r)
        .map(|(&rank, &d)| (rank, d))
        .collect();
    late.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds).then(a.0.cmp(&b.0)));
    for (rank, delay) in late {
        moved(
            Category::Work,
            delay.seconds,
            vec![rank],
            format!(
                "rank {rank}'s work past the next-latest rank's, at the {} steady steps it arrived \
                 last at",
                delay.steps
            ),
        );
    }
    categories.set(Category::CollectiveWait, wait);
    if wait > 0.0 {
        slices.push(PathSlice {
            category: Category::CollectiveWait,
            s: wait,
            ranks: vec![r],
            what: format!("rank {r} waiting in collectives for arrivals spread across the ranks"),
        });
    }
    slices.sort_by(|a, b| b.s.total_cmp(&a.s));
    let mut waited_for: Vec<WaitedFor> = inputs
        .waited_for
        .keys()
        .chain(inputs.delays.keys())
        .copied()
        .collect::<std::collections::BTreeSet<u32>>()
        .into_iter()
        .map(|rank| {
            let delay = inputs.delays.get(&rank).copied().unwrap_or_default();
            WaitedFor {
                rank,
                rank_s: inputs.waited_for.get(&rank).copied().unwrap_or(0.0),
                delay_s: delay.seconds,
                steps_last: delay.steps,
            }
        })
        .filter(|w| w.rank_s > 0.0 || w.delay_s > 0.0)
        .collect();
    waited_for.sort_by(|a, b| {
        b.delay_s
            .total_cmp(&a.delay_s)
            .then(b.rank_s.total_cmp(&a.rank_s))
            .then(a.rank.cmp(&b.rank))
    });
    waited_for.truncate(WAITED_FOR_LISTED);
    JobTime {
        wall_s: reference.time.wall_s,
        categories,
        work_by_stage: reference.time.work_by_stage.clone(),
        critical_path: CriticalPath {
            rank: Some(r),
            slices,
        },
        waited_for,
    }
}

/// `list` (the most first) cut to `most` entries, the rest in the last,
/// named [`rank::OTHER_STAGES`]: it still adds up to the work.
fn fold_past(list: &mut Vec<StageSeconds>, most: usize) {
    if list.len() <= most {
        return;
    }
    let rest: f64 = list[most - 1..].iter().map(|e| e.s).sum();
    list.truncate(most - 1);
    list.push(StageSeconds {
        stage: rank::OTHER_STAGES.to_string(),
        s: rest,
    });
}

/// Each measured category's spread across `ranks`.
fn spread(ranks: &[RankPart]) -> Vec<CategorySpread> {
    Category::ALL
        .iter()
        .filter_map(|&category| {
            let mut values: Vec<(f64, u32)> = ranks
                .iter()
                .filter_map(|p| Some((p.time.categories.get(category)?, p.time.rank)))
                .collect();
            if values.is_empty() {
                return None;
            }
            values.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let (min_s, min_rank) = values[0];
            let (max_s, max_rank) = values[values.len() - 1];
            Some(CategorySpread {
                category,
                min_s,
                min_rank,
                p50_s: values[values.len() / 2].0,
                max_s,
                max_rank,
            })
        })
        .collect()
}
