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
/// wait from the ranks' steps side by side ([`Transfers`]); `start_ns`:
/// where its account's span starts on the shared timeline.
pub fn rank_part(
    rank: u32,
    account: RankAccount,
    transfers: &Transfers,
    start_ns: i64,
    gpu: Option<&GpuAccount>,
) -> RankPart {
    // Per step name, the least any rank spent in each step's collective
    // calls, over the steps this rank spent any in: the transfer, the rest
    // of its collective time waiting. Of the transfer, its one-off part (a
    // communicator's set-up in the first call) is warm-up, or a stall.
    let mut transfer = 0.0;
    let mut one_off = (0.0, 0.0);
    for (name, runs) in &account.collective_steps {
        let Some(before) = transfers.before.get(name) else {
            continue;
        };
        let at = |k: u32| before[(k as usize).min(before.len().saturating_sub(1))];
        let in_runs = |k: u32| runs.iter().any(|&(first, past)| (first..past).contains(&k));
        transfer += runs
            .iter()
            .map(|&(first, past)| at(past) - at(first))
            .sum::<f64>();
        let flagged = transfers.one_offs.get(name).into_iter().flatten();
        for &(_, excess, first) in flagged.filter(|o| in_runs(o.0)) {
            if first {
                one_off.0 += excess;
            } else {
                one_off.1 += excess;
            }
        }
    }
    // Never -0.0 (an empty sum), never below 0, never past the rank's own
    // collective time.
    let transfer = if transfer > 0.0 {
        transfer.min(account.collective_s)
    } else {
        0.0
    };
    let wait = account.collective_s - transfer;
    let warmup_moved = one_off.0.min(transfer);
    let stall_moved = one_off.1.min(transfer - warmup_moved);
    let transfer = transfer - warmup_moved - stall_moved;
    let (warmup, stall) = (
        account.warmup_s + warmup_moved,
        account.stall_s + stall_moved,
    );
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

/// What the ranks' steps side by side say of each step's transfer, per
/// step stage name, for [`rank_part`].
#[derive(Debug, Clone, Default)]
pub struct Transfers {
    /// [`steps::Sequence::transfer_before`].
    pub before: BTreeMap<String, Vec<f64>>,
    /// [`steps::Sequence::transfer_one_offs`].
    pub one_offs: BTreeMap<String, Vec<(u32, f64, bool)>>,
}

impl Transfers {
    /// Of `steps`.
    pub fn of(steps: &StepsAcross) -> Self {
        let mut transfers = Transfers::default();
        for (name, sequence) in steps.sequences() {
            transfers
                .before
                .insert(name.to_string(), sequence.transfer_before());
            transfers
                .one_offs
                .insert(name.to_string(), sequence.transfer_one_offs());
        }
        transfers
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
    let mut path = Path::of(r, &reference.time.categories);
    // Ranks that came to their first step later: rank r waited for them.
    if let (Some(mine), Some((latest, at))) = (
        reference.first_step_at_ns,
        ranks
            .iter()
            .filter_map(|p| Some((p.time.rank, p.first_step_at_ns?)))
            .max_by_key(|&(rank, at)| (at, std::cmp::Reverse(rank))),
    ) {
        path.move_wait(
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
        path.move_wait(
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
        path.move_wait(
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
    // The rest of its waiting is the work of the ranks it waited for (on
    // the path there is no waiting: a wait is the late rank's time), by
    // the share of the others' wait each rank imposed: ranks late
    // together (two slow ranks, each arriving with the other) included.
    let imposed: Vec<(u32, f64)> = inputs
        .waited_for
        .iter()
        .filter(|&(&rank, &s)| rank != r && s > 0.0)
        .map(|(&rank, &s)| (rank, s))
        .collect();
    let all: f64 = imposed.iter().map(|&(_, s)| s).sum();
    let rest = path.wait;
    if all > 0.0 && rest > 0.0 {
        let mut by_share: Vec<(u32, f64)> = imposed
            .iter()
            .map(|&(rank, s)| (rank, rest * s / all))
            .collect();
        by_share.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let (named, others) = by_share.split_at(by_share.len().min(WAITED_FOR_LISTED));
        for &(rank, s) in named {
            path.move_wait(
                Category::Work,
                s,
                vec![rank],
                format!("rank {rank}'s work, which rank {r} waited for in collectives"),
            );
        }
        let others_s: f64 = others.iter().map(|&(_, s)| s).sum();
        path.move_wait(
            Category::Work,
            others_s,
            others
                .iter()
                .map(|&(rank, _)| rank)
                .take(WAITED_FOR_LISTED)
                .collect(),
            format!(
                "the work of {} more ranks rank {r} waited for",
                others.len()
            ),
        );
    }
    let Path {
        mut categories,
        wait,
        mut slices,
        ..
    } = path;
    categories.set(Category::CollectiveWait, wait);
    if wait > 0.0 {
        slices.push(PathSlice {
            category: Category::CollectiveWait,
            s: wait,
            ranks: vec![r],
            what: format!("rank {r} waiting in collectives for no rank the steps name"),
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

/// The job's critical path while it is built: the reference rank's
/// categories, what of its waiting is not yet put elsewhere, the parts.
struct Path {
    categories: Categories,
    wait: f64,
    slices: Vec<PathSlice>,
}

impl Path {
    /// Rank `r`'s own categories, each a part (its waiting apart).
    fn of(r: u32, own: &Categories) -> Self {
        Path {
            categories: own.clone(),
            wait: own.seconds(Category::CollectiveWait),
            slices: own
                .iter()
                .filter(|&(c, s)| c != Category::CollectiveWait && s.is_some_and(|s| s > 0.0))
                .map(|(category, s)| PathSlice {
                    category,
                    s: s.unwrap_or(0.0),
                    ranks: vec![r],
                    what: format!("rank {r}'s own {}", category.words()),
                })
                .collect(),
        }
    }

    /// Moves up to `amount` seconds of the waiting into `category`, the
    /// time of `ranks`, `what` it is.
    fn move_wait(&mut self, category: Category, amount: f64, ranks: Vec<u32>, what: String) {
        let take = amount.min(self.wait).max(0.0);
        if take <= 0.0 {
            return;
        }
        self.wait -= take;
        self.categories
            .set(category, self.categories.seconds(category) + take);
        self.slices.push(PathSlice {
            category,
            s: take,
            ranks,
            what,
        });
    }
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
