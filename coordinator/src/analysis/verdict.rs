//! The judgement: every explanation of the job's lost time, each with the
//! wall-clock time it cost, in one ranking. The costliest is the verdict;
//! the ranking orders the straggler section and the recommendations, so
//! that none of them can contradict another.
//!
//! - A rank that makes the others wait is blamed once, with the chain:
//!   the collectives where it arrives last in steady state, the stage
//!   where its extra work is (work, not wait: see `steady`), the kernel,
//!   CPU operator or Python function slower there, and what of its own
//!   hardware explains it.
//! - One-off time (warm-up, stalls, the profiler's own) is told apart.
//! - Time in collectives that is no rank's wait, and GPUs idle while no
//!   rank waits, are the job's own shape.

use std::collections::{HashMap, HashSet};

use rankscope_common::table::PROFILER_STAGE_PREFIX;
use rankscope_common::text::{cell, rank_ranges};

use crate::model::{
    Categories, Category, CollectiveStats, GpuSplit, KernelStraggler, OneOffEvent, Report,
    StageStats, Straggler, StragglerGroup, Verdict, VerdictKind,
};

/// A finding costing the job less than this share of its wall-clock time
/// is information, never a warning, percent.
pub const WARNING_PCT: f64 = 1.0;
/// A stage whose ranks spend this share of their time in it waiting is
/// mostly waiting.
pub const WAITING_SHARE: f64 = 0.5;
/// The collectives' transfer, past this share of the job's steady time
/// (its work, transfer and waiting), makes it communication bound, percent.
const COMMUNICATION_PCT: f64 = 20.0;
/// GPUs idle past this share of their ranks' own host work in the traced
/// windows make the job host bound, percent.
const HOST_BOUND_IDLE_PCT: f64 = 50.0;
/// A rank that arrives last at most steady collective calls is blamed,
/// however small a part of the others' time their wait is (a slow
/// transfer dwarfs it), where its lateness is this share of the job's
/// steady time or more, percent: more than a loaded machine's jitter.
const LATE_SHARE_PCT: f64 = 5.0;
/// A second finding at least this share of the verdict's cost is named in
/// the verdict too.
const SECOND_CLAUSE_SHARE: f64 = 1.0 / 3.0;
/// GPUs computing this share of their traced windows make a balanced job
/// GPU bound, percent.
const GPU_BOUND_COMPUTE_PCT: f64 = 70.0;

/// One explanation of lost time, with what it cost: a slice of the job's
/// time account.
#[derive(Debug, Clone, PartialEq)]
pub struct Blame {
    /// The report's category of the finding: `straggler`, `stall`,
    /// `profiler`, `communication`, `gpu`.
    pub category: &'static str,
    /// The verdict it would be.
    pub verdict: Verdict,
    /// The finding in a few words, for another verdict's second clause.
    pub clause: String,
}

/// What of the job's account the findings have not taken yet: each
/// finding's cost is taken out of the category it is a slice of, so that
/// the costs never add up past the job.
struct Room {
    left: Categories,
}

impl Room {
    /// All of `account`.
    fn of(account: &Categories) -> Self {
        Room {
            left: account.clone(),
        }
    }

    /// Takes `wanted` seconds of `category`, as much as is left; returns
    /// what it took.
    fn take(&mut self, category: Category, wanted: f64) -> f64 {
        let left = self.left.seconds(category);
        let took = wanted.clamp(0.0, left);
        self.left.set(category, left - took);
        took
    }

    /// What is left of `category`.
    fn left(&self, category: Category) -> f64 {
        self.left.seconds(category)
    }
}

/// The job's steady time: its work, the collectives' transfer and the
/// waiting in them, seconds.
fn steady_seconds(account: &Categories) -> f64 {
    [
        Category::Work,
        Category::CollectiveTransfer,
        Category::CollectiveWait,
    ]
    .iter()
    .map(|&c| account.seconds(c))
    .sum()
}

/// The job's wall-clock time, seconds: its account's, else its longest
/// rank's session, or, where no rank says (a payload without its clock),
/// the longest any rank spent in one stage.
pub fn job_seconds(report: &Report) -> f64 {
    let account = report.time_account.job.wall_s;
    if account > 0.0 {
        return account;
    }
    let session = report.session.duration_s;
    if session > 0.0 {
        return session;
    }
    report
        .stages
        .iter()
        .map(|s| s.total_s.max)
        .fold(0.0, f64::max)
}

/// Every explanation of lost time in `report`, the costliest first, each
/// costing a slice of the job's time account: one-off time its events'
/// costs, a straggler the job time its lateness cost, the collectives'
/// transfer that compute does not overlap, the GPUs idle in the ranks' own
/// host work over the steady steps.
pub fn blames(report: &Report) -> Vec<Blame> {
    let job_s = job_seconds(report);
    let mut room = Room::of(&report.time_account.job.categories);
    let arrivals = Arrivals::new(report);
    let mut found = Vec::new();
    for kind in [OneOff::Stalls, OneOff::Warmup, OneOff::Profiler] {
        found.extend(one_off_time(report, kind, &mut room));
    }
    let late = stragglers(report, &arrivals, &mut room);
    let more = late_ranks(report, &arrivals, &late, &mut room);
    found.extend(late);
    found.extend(more);
    found.extend(communication(report, &mut room));
    found.extend(host_bound(report, &mut room));
    for blame in &mut found {
        blame.verdict.cost_pct = percent(blame.verdict.cost_s, job_s);
    }
    found.sort_by(|a, b| b.verdict.cost_s.total_cmp(&a.verdict.cost_s));
    found
}

/// Whether a blame's category can be the verdict (and a warning): not the
/// profiler's own time (a finding about the measurement, told beside the
/// verdict) and not warm-up (time a job spends once, told apart).
pub fn judges_the_job(category: &str) -> bool {
    !matches!(category, "profiler" | "warmup")
}

/// The verdict: the costliest blame that judges the job
/// ([`judges_the_job`]), where it cost the job [`WARNING_PCT`] of its time
/// (with that blame's position in `blames`), with a second clause for the
/// next where that is a third as costly or a straggler;
/// else the job is balanced (GPU bound where its GPUs compute most of their
/// traced time).
pub fn verdict(report: &Report, blames: &[Blame]) -> (Verdict, Option<usize>) {
    let profiler = blames
        .iter()
        .find(|b| b.category == "profiler" && b.verdict.cost_pct >= WARNING_PCT)
        .map(|b| {
            format!(
                "beside it, the profiler itself cost the job {:.3} s ({:.1}%): not the job's \
                 own time (events[] of kind profiler)",
                b.verdict.cost_s, b.verdict.cost_pct
            )
        });
    let own: Vec<&Blame> = blames
        .iter()
        .filter(|b| judges_the_job(b.category))
        .collect();
    if let Some(first) = own.first().filter(|b| b.verdict.cost_pct >= WARNING_PCT) {
        let mut verdict = first.verdict.clone();
        let at = blames.iter().position(|b| std::ptr::eq(b, *first));
        let second = own[1..].iter().find(|b| {
            b.verdict.cost_pct >= WARNING_PCT
                && (b.verdict.cost_s >= SECOND_CLAUSE_SHARE * first.verdict.cost_s
                    || b.category == "straggler")
        });
        if let Some(second) = second {
            let sentence = verdict.sentence.trim_end_matches('.');
            verdict.sentence = format!("{sentence}; {}.", second.clause);
            verdict
                .evidence
                .push(format!("the next finding: {}", second.verdict.sentence));
        }
        verdict.evidence.extend(profiler);
        return (verdict, at);
    }
    let compute = average(report.gpu_time.iter().map(|g| g.compute_pct));
    let (kind, sentence) = match compute {
        Some(pct) if pct >= GPU_BOUND_COMPUTE_PCT => (
            VerdictKind::GpuBound,
            format!(
                "The ranks are balanced and the GPUs busy: they compute {pct:.0}% of their \
                 traced time; nothing costs the job {WARNING_PCT:.0}% of its time."
            ),
        ),
        _ => (
            VerdictKind::Balanced,
            format!(
                "The ranks are balanced: no straggler, stall or wait costs the job \
                 {WARNING_PCT:.0}% of its time."
            ),
        ),
    };
    let balanced = Verdict {
        kind,
        ranks: Vec::new(),
        stage: None,
        kernel: None,
        collective: None,
        cost_s: 0.0,
        cost_pct: 0.0,
        sentence,
        evidence: own
            .first()
            .map(|b| format!("the costliest finding: {}", b.verdict.sentence))
            .into_iter()
            .chain(profiler)
            .collect(),
        finding: None,
    };
    (balanced, None)
}

/// `part` of `whole`, percent; 0 for an empty whole.
fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}

/// The mean of `values`; `None` for none.
fn average(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The rank `stage`'s time mostly waits for, where it does: measured (its
/// ranks wait in collectives most of their time in it: the rank that waits
/// least), or, where no collective is recorded, a rank that spends far
/// less in it than the others and is a straggler elsewhere (it arrives
/// last, so it waits least).
pub fn mostly_waiting_for(report: &Report, stage: &StageStats) -> Option<u32> {
    if let Some(wait) = &stage.wait_s {
        return (wait.avg >= WAITING_SHARE * stage.total_s.avg && stage.total_s.avg > 0.0)
            .then_some(wait.min_rank);
    }
    if stage.self_s.min >= WAITING_SHARE * stage.self_s.avg {
        return None;
    }
    report
        .stragglers
        .iter()
        .find(|s| s.rank == stage.self_s.min_rank && s.stage != stage.name)
        .map(|s| s.rank)
}

/// Whether straggler `s` is only slower waiting, in a stage that mostly
/// waits for another rank.
pub fn waits_for_another(report: &Report, s: &Straggler) -> Option<u32> {
    let stage = report.stages.iter().find(|stage| stage.name == s.stage)?;
    mostly_waiting_for(report, stage).filter(|&late| late != s.rank)
}

/// The report's collective statistics looked up by rank, and each kind
/// and group's time summed over the ranks (once, not once per finding).
struct Arrivals<'a> {
    /// Each rank's rows.
    by_rank: HashMap<u32, Vec<&'a CollectiveStats>>,
    /// Per kind and group, the time of every rank in the calls, seconds.
    total_s: HashMap<(&'a str, Option<&'a str>), f64>,
}

impl<'a> Arrivals<'a> {
    fn new(report: &'a Report) -> Self {
        let mut arrivals = Arrivals {
            by_rank: HashMap::new(),
            total_s: HashMap::new(),
        };
        for c in &report.collectives {
            arrivals.by_rank.entry(c.rank).or_default().push(c);
            *arrivals
                .total_s
                .entry((c.kind.as_str(), c.group.as_deref()))
                .or_default() += c.total_s;
        }
        arrivals
    }

    /// The time the other ranks spent in the calls of `c`'s kind and group.
    fn others_s(&self, c: &CollectiveStats) -> f64 {
        let all = self.total_s[&(c.kind.as_str(), c.group.as_deref())];
        (all - c.total_s).max(0.0)
    }

    /// The collective where `rank` arrives last at most of the steady
    /// calls compared (the one where it imposed the most wait), if any.
    fn late_at(&self, rank: u32) -> Option<&'a CollectiveStats> {
        self.by_rank
            .get(&rank)?
            .iter()
            .copied()
            .filter(|c| c.last_to_arrive.unwrap_or(0) * 2 > c.steady_compared)
            .max_by(|a, b| {
                a.wait_imposed_s
                    .unwrap_or(0.0)
                    .total_cmp(&b.wait_imposed_s.unwrap_or(0.0))
            })
    }

    /// The others' wait for a rank at collective `c`, in words.
    fn evidence(&self, c: &CollectiveStats) -> String {
        format!(
            "it arrives last at {} of {} steady `{}` calls{}: the other ranks waited {:.3} \
             rank-seconds for it, of {:.3} s they spent in them; the calls ended {:.3} s later \
             for it",
            c.last_to_arrive.unwrap_or(0),
            c.steady_compared,
            cell(&c.kind, 40),
            c.group
                .as_deref()
                .map(|g| format!(" (group {})", cell(g, 40)))
                .unwrap_or_default(),
            c.wait_imposed_s.unwrap_or(0.0),
            self.others_s(c),
            c.delay_imposed_s.unwrap_or(0.0)
        )
    }
}

/// The job time the lateness of `ranks` cost, seconds, as the account
/// measured it at the steady steps' collectives (their arrival less the
/// next-latest, summed; 0 for a rank never last); `None` where the account
/// compares no arrivals (no collective time in the steps).
fn delay_of(report: &Report, ranks: &[u32]) -> Option<f64> {
    let waited_for = &report.time_account.job.waited_for;
    if !waited_for.iter().any(|w| w.steps_last > 0) {
        return None;
    }
    Some(
        waited_for
            .iter()
            .filter(|w| ranks.contains(&w.rank))
            .fold(0.0, |sum, w| sum + w.delay_s),
    )
}

/// The stragglers that do not merely wait: one blame per rank (or per
/// straggler group of ranks), with its chain, its cost taken from the
/// job's work.
fn stragglers(report: &Report, arrivals: &Arrivals, room: &mut Room) -> Vec<Blame> {
    let working: Vec<&Straggler> = report
        .stragglers
        .iter()
        .filter(|s| waits_for_another(report, s).is_none())
        .collect();
    let mut by_rank: HashMap<u32, Vec<&Straggler>> = HashMap::new();
    for &s in &working {
        by_rank.entry(s.rank).or_default().push(s);
    }
    let mut told: HashSet<u32> = HashSet::new();
    let mut found = Vec::new();
    for s in &working {
        if told.contains(&s.rank) {
            continue;
        }
        let group = report
            .straggler_groups
            .iter()
            .find(|g| g.stage == s.stage && g.ranks.binary_search(&s.rank).is_ok());
        let ranks = group.map_or_else(|| vec![s.rank], |g| g.ranks.clone());
        told.extend(&ranks);
        let entries: Vec<&Straggler> = ranks
            .iter()
            .filter_map(|r| by_rank.get(r))
            .flatten()
            .copied()
            .collect();
        found.push(straggler_blame(
            arrivals, report, &ranks, &entries, group, room,
        ));
    }
    found
}

/// The blame of `ranks` (one, or a straggler group's), slow in the
/// stages of `entries`: its cost the job time its lateness cost (the
/// account's; where the account compares no arrivals, the delay its calls
/// of the stage imposed), out of the job's work in `room`.
fn straggler_blame(
    arrivals: &Arrivals,
    report: &Report,
    ranks: &[u32],
    entries: &[&Straggler],
    group: Option<&StragglerGroup>,
    room: &mut Room,
) -> Blame {
    let first = ranks[0];
    // Where the extra work is: the stage with the most extra self work
    // (the innermost that holds it), of the first rank.
    let own: Vec<&&Straggler> = entries.iter().filter(|s| s.rank == first).collect();
    let at = own
        .iter()
        .max_by(|a, b| {
            a.self_excess_s
                .total_cmp(&b.self_excess_s)
                .then(b.excess_s.total_cmp(&a.excess_s))
        })
        .copied()
        .copied()
        .unwrap_or(entries[0]);
    let stage_cost = match group {
        Some(g) => g.job_time_s,
        None => own.iter().map(|s| s.job_time_s).fold(0.0, f64::max),
    };
    let late = arrivals.late_at(first);
    let collective_cost = late.map_or(0.0, |c| c.delay_imposed_s.unwrap_or(0.0));
    let kernel = slower_kernel(report, first, &at.stage);
    let mut evidence = Vec::new();
    if let Some(c) = late {
        evidence.push(arrivals.evidence(c));
    }
    let enclosing: Vec<&str> = own
        .iter()
        .filter(|s| s.stage != at.stage)
        .map(|s| s.stage.as_str())
        .collect();
    evidence.push(format!(
        "its work in `{}` is {:.2}x the other ranks' median (+{:.3} s{}, of which +{:.3} s in \
         `{}` itself{})",
        cell(&at.stage, 60),
        at.slowdown,
        at.excess_s,
        at.out_of_spread(),
        at.self_excess_s.max(0.0),
        cell(&at.stage, 60),
        if enclosing.is_empty() {
            String::new()
        } else {
            format!(
                "; the same time shows in {}",
                enclosing
                    .iter()
                    .map(|s| format!("`{}`", cell(s, 40)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ));
    if let Some(k) = kernel {
        evidence.push(format!(
            "there, {} `{}` takes {:.2}x the others' time (+{:.6} s)",
            kind_of(&k.category),
            cell(&k.kernel, 80),
            k.slowdown,
            k.excess_s
        ));
    }
    let own_evidence: Vec<&String> =
        entries
            .iter()
            .flat_map(|s| &s.evidence)
            .fold(Vec::new(), |mut seen, line| {
                if !seen.contains(&line) {
                    seen.push(line);
                }
                seen
            });
    evidence.extend(own_evidence.iter().map(|line| line.to_string()));
    let whose = match group {
        Some(g) if ranks.len() > 1 => format!(
            "{} ranks {} ({})",
            ranks.len(),
            match (&g.gpu_model, &g.host) {
                (Some(model), _) => format!("on {} GPUs", cell(model, 40)),
                (None, Some(host)) => format!("on host {}", cell(host, 40)),
                (None, None) => "together".into(),
            },
            rank_ranges(ranks)
        ),
        _ => format!("rank {first}"),
    };
    let waited = late.map(|c| {
        format!(
            "arrives last at {} of {} `{}` calls",
            c.last_to_arrive.unwrap_or(0),
            c.steady_compared,
            cell(&c.kind, 40)
        )
    });
    let why = match (own_evidence.first(), kernel) {
        (Some(line), _) => format!("; {line}"),
        (None, Some(k)) => format!(
            "; there {} `{}` takes {:.1}x the others' time",
            kind_of(&k.category),
            cell(&k.kernel, 80),
            k.slowdown
        ),
        (None, None) if group.is_some_and(|g| g.gpu_model.is_some()) => {
            "; the other ranks run other GPU models: give these ranks less of the work".into()
        }
        (None, None) => {
            "; no GPU or host bottleneck of its own explains it: check its share of the \
             work and its input"
                .into()
        }
    };
    // A rank's lateness at the steady steps, as the account measured it,
    // and at least the delay its stage calls imposed (the slowest against
    // the slowest of the rest): ranks late together arrive with one
    // another, and a rank slow after the last collective (its decode at
    // the end) makes the job end later without a wait in any step.
    let wanted = match delay_of(report, ranks) {
        Some(delay) => delay.max(stage_cost),
        None => stage_cost.max(collective_cost),
    };
    let cost_s = room.take(Category::Work, wanted);
    let in_stage: Vec<&&Straggler> = entries.iter().filter(|s| s.stage == at.stage).collect();
    let (least, most) = in_stage.iter().fold((f64::MAX, f64::MIN), |(lo, hi), s| {
        (lo.min(s.slowdown), hi.max(s.slowdown))
    });
    let excess: f64 = in_stage.iter().map(|s| s.excess_s).sum();
    let (verb, their, slowdown) = if ranks.len() > 1 {
        ("hold", "their", format!("{least:.2}–{most:.2}x"))
    } else {
        ("holds", "its", format!("{most:.2}x"))
    };
    let sentence = format!(
        "{whose} {verb} the job back{}: {their} work in `{}` takes {slowdown} the other \
         ranks' (+{excess:.3} s){why}; it cost the job {cost_s:.3} s.",
        waited
            .as_ref()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default(),
        cell(&at.stage, 60),
    );
    let clause = format!(
        "{whose} also {}{}: {their} work in `{}` takes {slowdown} the others'{}",
        waited.unwrap_or_else(|| format!("{} the job back", verb)),
        format_cost(cost_s, job_seconds(report)),
        cell(&at.stage, 60),
        kernel
            .map(|k| format!(
                "; there {} `{}` takes {:.1}x the others' time",
                kind_of(&k.category),
                cell(&k.kernel, 80),
                k.slowdown
            ))
            .unwrap_or_default()
    );
    Blame {
        clause,
        category: "straggler",
        verdict: Verdict {
            kind: VerdictKind::Straggler,
            ranks: ranks.to_vec(),
            stage: Some(at.stage.clone()),
            kernel: kernel.map(|k| k.kernel.clone()),
            collective: late.map(|c| c.kind.clone()),
            cost_s,
            cost_pct: 0.0,
            sentence,
            evidence,
            finding: None,
        },
    }
}

/// The kernel (or CPU operator) slower on `rank`, launched in `stage`
/// where one is, else its slowest.
fn slower_kernel<'a>(report: &'a Report, rank: u32, stage: &str) -> Option<&'a KernelStraggler> {
    let of_rank = report.kernel_stragglers.iter().filter(|k| k.rank == rank);
    of_rank
        .clone()
        .filter(|k| k.stage.as_deref() == Some(stage))
        .chain(of_rank)
        .next()
}

/// What a kernel straggler's category calls the thing that is slow.
pub fn kind_of(category: &str) -> String {
    if category == rankscope_common::kineto::KernelCategory::CpuOp.as_str() {
        "CPU operator".into()
    } else if category == super::python::PYTHON_FUNCTION {
        "Python function".into()
    } else {
        format!("{category} kernel")
    }
}

/// Ranks that arrive last at most steady calls of a collective, for whom
/// the others wait most of their time there or whose lateness costs the
/// job [`WARNING_PCT`] and [`LATE_SHARE_PCT`] of its steady time, that no
/// stage straggler already blames (an imported trace has no stages).
fn late_ranks(
    report: &Report,
    arrivals: &Arrivals,
    blamed: &[Blame],
    room: &mut Room,
) -> Vec<Blame> {
    let mut told: HashSet<u32> = blamed
        .iter()
        .flat_map(|b| b.verdict.ranks.iter().copied())
        .collect();
    let mut found: Vec<Blame> = Vec::new();
    for c in &report.collectives {
        if told.contains(&c.rank) {
            continue;
        }
        let (Some(last), Some(imposed_s)) = (c.last_to_arrive, c.wait_imposed_s) else {
            continue;
        };
        // Last at most steady calls, and either the others' time in them
        // mostly waits for it, or its lateness costs the job a warning's
        // share (a slow transfer, gloo's say, leaves the wait a small part
        // of the others' time however late the rank is).
        let steady = steady_seconds(&report.time_account.job.categories);
        let costly = delay_of(report, &[c.rank])
            .or(c.delay_imposed_s)
            .is_some_and(|d| {
                percent(d, job_seconds(report)) >= WARNING_PCT
                    && percent(d, steady) >= LATE_SHARE_PCT
            });
        // Or, last at fewer calls, its lateness there is twice that share
        // of the steady time (an `eval` or a checkpoint every few steps on
        // one rank, which the others wait for).
        let periodic =
            delay_of(report, &[c.rank]).is_some_and(|d| percent(d, steady) >= 2.0 * LATE_SHARE_PCT);
        let mostly_last = last * 2 > c.steady_compared
            && (imposed_s >= WAITING_SHARE * arrivals.others_s(c) || costly);
        if !mostly_last && !periodic {
            continue;
        }
        told.insert(c.rank);
        let kernel = report.kernel_stragglers.iter().find(|k| k.rank == c.rank);
        let mut evidence = vec![arrivals.evidence(c)];
        evidence.extend(kernel.map(|k| {
            format!(
                "{} `{}` takes {:.2}x the others' time on it (+{:.6} s)",
                kind_of(&k.category),
                cell(&k.kernel, 80),
                k.slowdown,
                k.excess_s
            )
        }));
        let wanted = delay_of(report, &[c.rank]).unwrap_or(c.delay_imposed_s.unwrap_or(0.0));
        let cost_s = room.take(Category::Work, wanted);
        let kernel_words = kernel
            .map(|k| {
                format!(
                    " ({} `{}` takes {:.1}x the others' time on it)",
                    kind_of(&k.category),
                    cell(&k.kernel, 80),
                    k.slowdown
                )
            })
            .unwrap_or_default();
        found.push(Blame {
            clause: format!(
                "rank {} also arrives last at {last} of {} `{}` calls{}{kernel_words}",
                c.rank,
                c.steady_compared,
                cell(&c.kind, 40),
                format_cost(cost_s, job_seconds(report)),
            ),
            category: "straggler",
            verdict: Verdict {
                kind: VerdictKind::Straggler,
                ranks: vec![c.rank],
                stage: kernel.and_then(|k| k.stage.clone()),
                kernel: kernel.map(|k| k.kernel.clone()),
                collective: Some(c.kind.clone()),
                cost_s,
                cost_pct: 0.0,
                sentence: format!(
                    "rank {} holds the job back: it arrives last at {last} of {} `{}` calls \
                     and the others wait for it{kernel_words}; speed up rank {}, not the \
                     collective; it cost the job {cost_s:.3} s.",
                    c.rank,
                    c.steady_compared,
                    cell(&c.kind, 40),
                    c.rank
                ),
                evidence,
                finding: None,
            },
        });
    }
    found
}

/// The kinds of one-off time, each told as one finding.
#[derive(Clone, Copy, PartialEq)]
enum OneOff {
    /// Stalls: a job's own lost time.
    Stalls,
    /// Warm-up: time a job spends once, told but not blamed.
    Warmup,
    /// The profiler's own: a finding about the measurement.
    Profiler,
}

impl OneOff {
    /// The kind of `events[]` it tells, which is its finding's category.
    fn name(self) -> &'static str {
        match self {
            OneOff::Stalls => "stall",
            OneOff::Warmup => "warmup",
            OneOff::Profiler => "profiler",
        }
    }

    /// The account's category it is a slice of.
    fn category(self) -> Category {
        match self {
            OneOff::Stalls => Category::Stall,
            OneOff::Warmup => Category::Warmup,
            OneOff::Profiler => Category::Profiler,
        }
    }
}

/// One-off time of `kind` as one blame (its category the kind's name):
/// its events' costs, out of the account's time of its kind in `room`.
fn one_off_time(report: &Report, kind: OneOff, room: &mut Room) -> Option<Blame> {
    let event_kind = kind.name();
    let events: Vec<&OneOffEvent> = report
        .events
        .iter()
        .filter(|e| e.kind == event_kind)
        .collect();
    let wanted: f64 = events.iter().map(|e| e.cost_s).sum();
    let cost_s = room.take(kind.category(), wanted);
    if events.is_empty() || cost_s <= 0.0 {
        return None;
    }
    let told: Vec<String> = events.iter().take(3).map(|e| describe(e)).collect();
    let more = events.len().saturating_sub(told.len());
    let list = format!(
        "{}{}",
        told.join("; "),
        if more > 0 {
            format!("; and {more} more (events[])")
        } else {
            String::new()
        }
    );
    let ranks = {
        let mut ranks: Vec<u32> = events.iter().flat_map(|e| e.ranks.clone()).collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    };
    let sentence = match kind {
        OneOff::Profiler => format!(
            "The profiler itself cost the job {cost_s:.3} s: {list}. Start torch.profiler's \
             windows outside the steps that matter, or fewer of them."
        ),
        OneOff::Warmup => format!(
            "Warm-up took {cost_s:.3} s past the steady steps: {list}; kept out of the \
             comparison of ranks."
        ),
        OneOff::Stalls => {
            format!("One-off stalls cost the job {cost_s:.3} s, outside its steady state: {list}.")
        }
    };
    let stage = events.first().and_then(|e| e.stage.clone());
    let clause = format!(
        "{}{}",
        match kind {
            OneOff::Stalls => "one-off stalls",
            OneOff::Warmup => "warm-up",
            OneOff::Profiler => "the profiler itself",
        },
        format_cost(cost_s, job_seconds(report))
    );
    Some(Blame {
        clause,
        category: event_kind,
        verdict: Verdict {
            kind: VerdictKind::Stalls,
            ranks,
            stage: stage
                .filter(|s| !s.starts_with(PROFILER_STAGE_PREFIX) || kind == OneOff::Profiler),
            kernel: None,
            collective: None,
            cost_s,
            cost_pct: 0.0,
            sentence,
            evidence: events.iter().flat_map(|e| e.evidence.clone()).collect(),
            finding: None,
        },
    })
}

/// An event in a few words.
fn describe(e: &OneOffEvent) -> String {
    let kind = match e.kind.as_str() {
        "warmup" => "warm-up",
        "profiler" => "the profiler",
        _ => "a stall",
    };
    let whose = if e.rank_count == 1 {
        format!("rank {}", e.ranks.first().copied().unwrap_or(0))
    } else {
        format!("ranks {}", rank_ranges(&e.ranks))
    };
    let place = match &e.stage {
        Some(stage) => format!("in `{}` ", cell(stage, 40)),
        None => "between steps ".into(),
    };
    format!(
        "{kind} {place}at `{}` call {} on {whose} ({:.3} s)",
        cell(&e.step_stage, 40),
        e.step,
        e.cost_s
    )
}

/// The collectives' transfer on the critical path that no compute
/// overlaps (the overlap from the kernel traces, where traced), where it is
/// [`COMMUNICATION_PCT`] of the job's steady time or more.
fn communication(report: &Report, room: &mut Room) -> Option<Blame> {
    let account = &report.time_account;
    let categories = &account.job.categories;
    let transfer = categories.seconds(Category::CollectiveTransfer);
    let steady = steady_seconds(categories);
    let share = percent(transfer, steady);
    if transfer <= 0.0 || share < COMMUNICATION_PCT {
        return None;
    }
    let traced: Vec<&GpuSplit> = account
        .ranks
        .iter()
        .filter_map(|r| r.gpu.as_ref())
        .filter(|g| g.host_collective_s > 0.0)
        .collect();
    let overlap = average(traced.iter().filter_map(|g| g.overlap_share()));
    let cost_s = room.take(
        Category::CollectiveTransfer,
        transfer * (1.0 - overlap.unwrap_or(0.0)),
    );
    let busiest = report
        .collectives
        .iter()
        .max_by(|a, b| a.total_s.total_cmp(&b.total_s))
        .map(|c| c.kind.clone());
    let what = busiest.as_deref().map_or_else(
        || "collective calls".to_string(),
        |k| format!("`{}`", cell(k, 40)),
    );
    let backend = backend(&traced);
    let overlapped = match overlap {
        Some(o) if o >= 0.005 => format!(", compute overlapping {:.0}% of it", o * 100.0),
        Some(_) => ", no compute overlapping it".to_string(),
        None => String::new(),
    };
    let mut evidence = vec![format!(
        "the collectives' own time (the least any rank spent in the same step's calls) is \
         {transfer:.3} s of the job's {steady:.3} s of steady steps; the rest of the ranks' time \
         in them is waiting, told apart"
    )];
    evidence.push(match overlap {
        Some(o) => format!(
            "in the traced windows GPU compute overlaps {:.0}% of the ranks' collective time",
            o * 100.0
        ),
        None => "no kernel trace measures how much compute overlaps it".into(),
    });
    if let Some((_, why)) = backend {
        evidence.push(why.to_string());
    }
    Some(Blame {
        clause: format!(
            "{share:.0}% of each steady step is {what}'s transfer{}",
            backend.map(|b| b.0).unwrap_or_default()
        ),
        category: "communication",
        verdict: Verdict {
            kind: VerdictKind::CommunicationBound,
            ranks: Vec::new(),
            stage: None,
            kernel: None,
            collective: busiest,
            cost_s,
            cost_pct: 0.0,
            sentence: format!(
                "The job is communication-bound: {share:.0}% of each steady step is {what}'s \
                 transfer{}{overlapped}; overlap it with compute, or move less data.",
                backend.map(|b| b.0).unwrap_or_default()
            ),
            evidence,
            finding: None,
        },
    })
}

/// The collectives' backend as the traced windows show it, in a few
/// words and with what it implies; `None` where no window traced a
/// collective call.
fn backend(traced: &[&GpuSplit]) -> Option<(&'static str, &'static str)> {
    if traced.is_empty() {
        return None;
    }
    Some(if traced.iter().any(|g| g.busy.communication > 0.0) {
        (
            " over NCCL",
            "communication kernels ran on the GPUs (NCCL): the data stays on the GPU",
        )
    } else {
        (
            " over a host backend (gloo: through host memory)",
            "no communication kernel ran in the traced windows: a host backend such as gloo \
             moves the data, CUDA tensors through host memory (copied out and back each call); \
             NCCL would keep it on the GPU",
        )
    })
}

/// GPUs idle most of their ranks' own host work in the traced windows
/// (idle while a rank was in a collective call is the collective's, not
/// the host's): the share applied to the job's steady work, out of what
/// is left of it in `room`.
fn host_bound(report: &Report, room: &mut Room) -> Option<Blame> {
    let traced: Vec<&GpuSplit> = report
        .time_account
        .ranks
        .iter()
        .filter_map(|r| r.gpu.as_ref())
        .collect();
    let share = average(traced.iter().filter_map(|g| g.launch_bound_share()))?;
    if share * 100.0 < HOST_BOUND_IDLE_PCT {
        return None;
    }
    let cost_s = room.take(Category::Work, share * room.left(Category::Work));
    let pct = share * 100.0;
    let in_collectives: f64 = traced
        .iter()
        .map(|g| g.idle.collective_transfer + g.idle.collective_wait)
        .sum();
    Some(Blame {
        clause: format!(
            "the GPUs are idle {pct:.0}% of the ranks' own host work{}",
            format_cost(cost_s, job_seconds(report))
        ),
        category: "gpu",
        verdict: Verdict {
            kind: VerdictKind::HostBound,
            ranks: Vec::new(),
            stage: None,
            kernel: None,
            collective: None,
            cost_s,
            cost_pct: 0.0,
            sentence: format!(
                "The job is host-bound: its GPUs are idle {pct:.0}% of the time their ranks' \
                 hosts do their own work (launch overhead, synchronisation, data loading); over \
                 the steady steps that is {cost_s:.3} s."
            ),
            evidence: vec![format!(
                "{} GPU(s) traced; their idle time while the host was in a collective call \
                 ({in_collectives:.3} s) is the collective's, not counted",
                traced.len()
            )],
            finding: None,
        },
    })
}

/// A cost in words: ` (x.x% of the job)`.
fn format_cost(cost_s: f64, job_s: f64) -> String {
    format!(" ({:.1}% of the job)", percent(cost_s, job_s))
}
