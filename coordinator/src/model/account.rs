//! report.json's `time_account`: each rank's time split once into
//! categories that add up to its wall time, and the job's (see
//! docs/verdict.md).

use serde::{Deserialize, Serialize};

/// A category of the account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// From the start to the first step.
    Setup,
    /// Warm-up calls' excess over the steady calls.
    Warmup,
    /// rankscope's own time on the critical path (torch.profiler's start,
    /// stop and export), and what the steps it perturbed lost.
    Profiler,
    /// One-off stalls.
    Stall,
    /// Steady work in the steps.
    Work,
    /// Collectives' own time: the least any rank spent in the same call.
    CollectiveTransfer,
    /// Waiting in collective calls for the last rank to arrive.
    CollectiveWait,
    /// In the session, outside every stage.
    Untracked,
    /// From the last step's end to the end.
    Teardown,
}

impl Category {
    /// Every category, in the order the account lists them.
    pub const ALL: [Category; 9] = [
        Category::Setup,
        Category::Warmup,
        Category::Profiler,
        Category::Stall,
        Category::Work,
        Category::CollectiveTransfer,
        Category::CollectiveWait,
        Category::Untracked,
        Category::Teardown,
    ];

    /// Its name in report.json.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Setup => "setup",
            Category::Warmup => "warmup",
            Category::Profiler => "profiler",
            Category::Stall => "stall",
            Category::Work => "work",
            Category::CollectiveTransfer => "collective_transfer",
            Category::CollectiveWait => "collective_wait",
            Category::Untracked => "untracked",
            Category::Teardown => "teardown",
        }
    }

    /// Its time in words.
    pub fn words(self) -> &'static str {
        match self {
            Category::Setup => "set-up",
            Category::Warmup => "warm-up",
            Category::Profiler => "profiler time",
            Category::Stall => "stalls",
            Category::Work => "work",
            Category::CollectiveTransfer => "collective transfer",
            Category::CollectiveWait => "waiting in collectives",
            Category::Untracked => "untracked time",
            Category::Teardown => "teardown",
        }
    }
}

/// Seconds by category; `null` where the category was not measured (an
/// imported trace has no set-up or teardown).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Categories {
    /// [`Category::Setup`].
    pub setup: Option<f64>,
    /// [`Category::Warmup`].
    pub warmup: Option<f64>,
    /// [`Category::Profiler`].
    pub profiler: Option<f64>,
    /// [`Category::Stall`].
    pub stall: Option<f64>,
    /// [`Category::Work`].
    pub work: Option<f64>,
    /// [`Category::CollectiveTransfer`].
    pub collective_transfer: Option<f64>,
    /// [`Category::CollectiveWait`].
    pub collective_wait: Option<f64>,
    /// [`Category::Untracked`].
    pub untracked: Option<f64>,
    /// [`Category::Teardown`].
    pub teardown: Option<f64>,
}

impl Categories {
    /// The seconds of `category`, where measured.
    pub fn get(&self, category: Category) -> Option<f64> {
        *self.slot(category)
    }

    /// The seconds of `category`, 0 where not measured.
    pub fn seconds(&self, category: Category) -> f64 {
        self.get(category).unwrap_or(0.0)
    }

    /// Sets `category` to `seconds`.
    pub fn set(&mut self, category: Category, seconds: f64) {
        *self.slot_mut(category) = Some(seconds);
    }

    /// The measured categories summed, seconds.
    pub fn sum(&self) -> f64 {
        Category::ALL.iter().map(|&c| self.seconds(c)).sum()
    }

    /// Each category with its seconds, in the account's order.
    pub fn iter(&self) -> impl Iterator<Item = (Category, Option<f64>)> + '_ {
        Category::ALL.iter().map(|&c| (c, self.get(c)))
    }

    fn slot(&self, category: Category) -> &Option<f64> {
        match category {
            Category::Setup => &self.setup,
            Category::Warmup => &self.warmup,
            Category::Profiler => &self.profiler,
            Category::Stall => &self.stall,
            Category::Work => &self.work,
            Category::CollectiveTransfer => &self.collective_transfer,
            Category::CollectiveWait => &self.collective_wait,
            Category::Untracked => &self.untracked,
            Category::Teardown => &self.teardown,
        }
    }

    fn slot_mut(&mut self, category: Category) -> &mut Option<f64> {
        match category {
            Category::Setup => &mut self.setup,
            Category::Warmup => &mut self.warmup,
            Category::Profiler => &mut self.profiler,
            Category::Stall => &mut self.stall,
            Category::Work => &mut self.work,
            Category::CollectiveTransfer => &mut self.collective_transfer,
            Category::CollectiveWait => &mut self.collective_wait,
            Category::Untracked => &mut self.untracked,
            Category::Teardown => &mut self.teardown,
        }
    }
}

/// What the account covers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountScope {
    /// A session, start to end.
    #[default]
    Session,
    /// A window of a session.
    Window,
    /// Imported traces: their traced window alone (no set-up, teardown or
    /// steps to tell stalls by).
    Traces,
}

/// One stage's seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageSeconds {
    /// The stage.
    pub stage: String,
    /// Seconds.
    pub s: f64,
}

/// Steady work by stage, the most first (the rest in one entry).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkByStage {
    /// By top-level stage.
    pub top: Vec<StageSeconds>,
    /// By innermost stage.
    pub innermost: Vec<StageSeconds>,
}

/// What a rank's GPU did in its traced windows, seconds: busy (computing,
/// else communicating, else copying memory) or idle, and idle by what the
/// host did meanwhile. The two parts add up to `window_s`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSplit {
    /// The windows' time (HTA's: first activity to last).
    pub window_s: f64,
    /// The GPU busy.
    pub busy: GpuBusy,
    /// The GPU idle.
    pub idle: GpuIdle,
    /// The host in collective calls within the windows.
    pub host_collective_s: f64,
    /// The GPU computing while the host was in collective calls.
    pub compute_in_collective_s: f64,
}

impl GpuSplit {
    /// The share of the host's own work (in no collective call) in which
    /// the GPU was idle: how launch-bound the rank is, 0 to 1; `None`
    /// without host work.
    pub fn launch_bound_share(&self) -> Option<f64> {
        let work = self.window_s - self.host_collective_s;
        (work > 0.0).then(|| (self.idle.host_work / work).clamp(0.0, 1.0))
    }

    /// The share of the host's collective time that GPU compute overlaps,
    /// 0 to 1; `None` without collective time.
    pub fn overlap_share(&self) -> Option<f64> {
        (self.host_collective_s > 0.0)
            .then(|| (self.compute_in_collective_s / self.host_collective_s).clamp(0.0, 1.0))
    }
}

/// A GPU's busy time, disjoint parts, seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuBusy {
    /// Computing.
    pub compute: f64,
    /// Communicating, not computing.
    pub communication: f64,
    /// Copying or setting memory, neither computing nor communicating.
    pub memory: f64,
}

/// A GPU's idle time by what its host did, seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuIdle {
    /// The host's own work (launch-bound).
    pub host_work: f64,
    /// The host in a collective's transfer.
    pub collective_transfer: f64,
    /// The host waiting in a collective for another rank.
    pub collective_wait: f64,
}

/// One rank's account.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankTime {
    /// The rank.
    pub rank: u32,
    /// Its session (or window, or traced window), seconds.
    pub wall_s: f64,
    /// Its time by category: they add up to `wall_s`.
    pub categories: Categories,
    /// Its steady work by stage (the first few).
    pub work_by_stage: WorkByStage,
    /// Its GPU in its traced windows; `null` without kernel traces.
    pub gpu: Option<GpuSplit>,
}

/// One part of the job's critical path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathSlice {
    /// Its category.
    pub category: Category,
    /// Seconds.
    pub s: f64,
    /// The ranks whose time it is.
    pub ranks: Vec<u32>,
    /// What it is, in words.
    pub what: String,
}

/// A rank the others waited for in collective calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitedFor {
    /// The rank that arrived last.
    pub rank: u32,
    /// The other ranks' wait for it, rank-seconds.
    pub rank_s: f64,
    /// How much later the steady steps' collectives ended because of it
    /// (its arrival less the next-latest, summed): the job time it cost,
    /// seconds.
    pub delay_s: f64,
    /// The steady steps at which it arrived last.
    pub steps_last: u64,
}

/// The job's account: the reference rank's time (its session spans the
/// job), each second of its waiting put where the job spent it — in the
/// one-off time, set-up or extra work of the rank it waited for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobTime {
    /// The job's wall time, seconds (the longest rank's).
    pub wall_s: f64,
    /// Its time by category: they add up to `wall_s`.
    pub categories: Categories,
    /// Its steady work by stage.
    pub work_by_stage: WorkByStage,
    /// The reference rank (the one whose span is the job's), and the
    /// parts of the path, which add up to `wall_s`.
    pub critical_path: CriticalPath,
    /// The ranks the others waited for in collective calls, the costliest
    /// first (the first 8).
    pub waited_for: Vec<WaitedFor>,
}

/// The job's path through its ranks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CriticalPath {
    /// The rank whose span is the job's; `null` for no rank.
    pub rank: Option<u32>,
    /// Its parts, the largest first.
    pub slices: Vec<PathSlice>,
}

/// One category's spread across ranks, for jobs of many ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategorySpread {
    /// The category.
    pub category: Category,
    /// The least of any rank, seconds.
    pub min_s: f64,
    /// Its rank.
    pub min_rank: u32,
    /// The median rank's, seconds.
    pub p50_s: f64,
    /// The most of any rank, seconds.
    pub max_s: f64,
    /// Its rank.
    pub max_rank: u32,
}

/// report.json's `time_account`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeAccount {
    /// What it covers.
    pub scope: AccountScope,
    /// Each rank's, in rank order.
    pub ranks: Vec<RankTime>,
    /// The job's.
    pub job: JobTime,
    /// Each measured category's spread across the ranks.
    pub spread: Vec<CategorySpread>,
    /// What the account could not measure, and what it estimated, in
    /// words.
    pub notes: Vec<String>,
}

impl TimeAccount {
    /// Whether each rank's categories, and the job's, add up to its wall
    /// time (within 0.1 % or a millisecond), none negative, and the job's
    /// critical path to the job's wall; else which does not.
    pub fn adds_up(&self) -> Result<(), String> {
        let close = |sum: f64, wall: f64| (sum - wall).abs() <= (wall * 1e-3).max(1e-3);
        let whole = |what: &str, categories: &Categories, wall: f64| {
            if let Some((c, s)) = categories
                .iter()
                .find(|(_, s)| s.is_some_and(|s| !(s.is_finite() && s >= 0.0)))
            {
                return Err(format!("{what}: {} is {s:?}", c.as_str()));
            }
            match close(categories.sum(), wall) {
                true => Ok(()),
                false => Err(format!(
                    "{what}: its categories add up to {:.6} s of its {wall:.6} s",
                    categories.sum()
                )),
            }
        };
        for rank in &self.ranks {
            whole(
                &format!("rank {}", rank.rank),
                &rank.categories,
                rank.wall_s,
            )?;
        }
        whole("the job", &self.job.categories, self.job.wall_s)?;
        let path: f64 = self.job.critical_path.slices.iter().map(|s| s.s).sum();
        if !self.ranks.is_empty() && !close(path, self.job.wall_s) {
            return Err(format!(
                "the job's critical path adds up to {path:.6} s of its {:.6} s",
                self.job.wall_s
            ));
        }
        Ok(())
    }
}
