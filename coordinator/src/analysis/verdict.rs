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
    CollectiveStats, KernelStraggler, OneOffEvent, Report, StageStats, Straggler, StragglerGroup,
    Verdict, VerdictKind,
};

/// A finding costing the job less than this share of its wall-clock time
/// is information, never a warning, percent.
pub const WARNING_PCT: f64 = 1.0;
/// A stage whose ranks spend this share of their time in it waiting is
/// mostly waiting.
pub const WAITING_SHARE: f64 = 0.5;
/// Time in collective calls that is no rank's wait, past this share of
/// the job, makes it communication bound, percent.
const COMMUNICATION_PCT: f64 = 20.0;
/// GPUs idle, their ranks not waiting, past this share of their traced
/// windows make the job host bound, percent.
const HOST_BOUND_IDLE_PCT: f64 = 50.0;
/// GPUs computing this share of their traced windows make a balanced job
/// GPU bound, percent.
const GPU_BOUND_COMPUTE_PCT: f64 = 70.0;

/// One explanation of lost time, with what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Blame {
    /// The report's category of the finding: `straggler`, `stall`,
    /// `profiler`, `communication`, `gpu`.
    pub category: &'static str,
    /// The verdict it would be.
    pub verdict: Verdict,
}

/// The job's wall-clock time, seconds: its longest rank's session, or,
/// where no rank says (a report of imported traces, a payload without its
/// clock), the longest any rank spent in one stage.
pub fn job_seconds(report: &Report) -> f64 {
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

/// Every explanation of lost time in `report`, the costliest first.
pub fn blames(report: &Report) -> Vec<Blame> {
    let job_s = job_seconds(report);
    let arrivals = Arrivals::new(report);
    let mut found = stragglers(report, &arrivals);
    found.extend(late_ranks(report, &arrivals, &found));
    for kind in [OneOff::Stalls, OneOff::Warmup, OneOff::Profiler] {
        found.extend(one_off_time(report, kind));
    }
    found.extend(communication(report));
    found.extend(idle_hosts(report));
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
/// ([`judges_the_job`]), where it cost the job [`WARNING_PCT`] of its time;
/// else the job is balanced (GPU bound where its GPUs compute most of their
/// traced time).
pub fn verdict(report: &Report, blames: &[Blame]) -> Verdict {
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
        verdict.evidence.extend(profiler);
        return verdict;
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
    Verdict {
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
    }
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

/// The stragglers that do not merely wait: one blame per rank (or per
/// straggler group of ranks), with its chain.
fn stragglers(report: &Report, arrivals: &Arrivals) -> Vec<Blame> {
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
        found.push(straggler_blame(arrivals, report, &ranks, &entries, group));
    }
    found
}

/// The blame of `ranks` (one, or a straggler group's), slow in the
/// stages of `entries`.
fn straggler_blame(
    arrivals: &Arrivals,
    report: &Report,
    ranks: &[u32],
    entries: &[&Straggler],
    group: Option<&StragglerGroup>,
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
    let cost_s = stage_cost.max(collective_cost);
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
        waited.map(|w| format!(" ({w})")).unwrap_or_default(),
        cell(&at.stage, 60),
    );
    Blame {
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
/// the others wait most of their time there, that no stage straggler
/// already blames (an imported trace has no stages).
fn late_ranks(report: &Report, arrivals: &Arrivals, blamed: &[Blame]) -> Vec<Blame> {
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
        if last * 2 <= c.steady_compared || imposed_s < WAITING_SHARE * arrivals.others_s(c) {
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
        let cost_s = c.delay_imposed_s.unwrap_or(0.0);
        found.push(Blame {
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
                     and the others wait for it{}; speed up rank {}, not the collective; it \
                     cost the job {cost_s:.3} s.",
                    c.rank,
                    c.steady_compared,
                    cell(&c.kind, 40),
                    kernel
                        .map(|k| format!(
                            " ({} `{}` takes {:.1}x the others' time on it)",
                            kind_of(&k.category),
                            cell(&k.kernel, 80),
                            k.slowdown
                        ))
                        .unwrap_or_default(),
                    c.rank
                ),
                evidence,
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
}

/// One-off time of `kind` as one blame (its category the kind's name).
fn one_off_time(report: &Report, kind: OneOff) -> Option<Blame> {
    let event_kind = kind.name();
    let events: Vec<&OneOffEvent> = report
        .events
        .iter()
        .filter(|e| e.kind == event_kind)
        .collect();
    let cost_s: f64 = events.iter().map(|e| e.cost_s).sum();
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
    Some(Blame {
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

/// Time in collective calls that is no rank's wait (the ranks' average),
/// where it is a large share of the job.
fn communication(report: &Report) -> Option<Blame> {
    let compared: Vec<&CollectiveStats> = report
        .collectives
        .iter()
        .filter(|c| c.own_s.is_some())
        .collect();
    let mut ranks: Vec<u32> = compared.iter().map(|c| c.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    if ranks.is_empty() {
        return None;
    }
    let own_s: f64 = compared.iter().filter_map(|c| c.own_s).sum::<f64>() / ranks.len() as f64;
    if percent(own_s, job_seconds(report)) < COMMUNICATION_PCT {
        return None;
    }
    let busiest = report
        .collectives
        .iter()
        .max_by(|a, b| a.total_s.total_cmp(&b.total_s))?;
    Some(Blame {
        category: "communication",
        verdict: Verdict {
            kind: VerdictKind::CommunicationBound,
            ranks: Vec::new(),
            stage: None,
            kernel: None,
            collective: Some(busiest.kind.clone()),
            cost_s: own_s,
            cost_pct: 0.0,
            sentence: format!(
                "The job is communication bound: each rank spends {own_s:.3} s in collective \
                 calls that no rank waits in (`{}` the most); overlap them with compute, or \
                 move less data.",
                cell(&busiest.kind, 40)
            ),
            evidence: vec![format!(
                "{own_s:.3} s per rank in collectives past the waits, of {:.3} s",
                job_seconds(report)
            )],
        },
    })
}

/// GPUs idle most of their traced windows while their ranks were not
/// waiting in a collective: the hosts do not keep them busy.
fn idle_hosts(report: &Report) -> Option<Blame> {
    let idle: Vec<f64> = report
        .gpu_time
        .iter()
        .filter(|g| g.window_s > 0.0)
        .map(|g| {
            let waiting = g.waiting_s.unwrap_or(0.0).min(g.idle_s);
            percent(g.idle_s - waiting, g.window_s)
        })
        .collect();
    let pct = average(idle.iter().copied())?;
    if pct < HOST_BOUND_IDLE_PCT {
        return None;
    }
    let cost_s = pct / 100.0 * job_seconds(report);
    Some(Blame {
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
                "The GPUs are idle {pct:.0}% of their traced time while their ranks do not \
                 wait: the hosts do not keep them busy (launch overhead, synchronisation, data \
                 loading)."
            ),
            evidence: vec![format!(
                "{} GPU(s) traced; idle time while a rank waited in a collective is not counted",
                idle.len()
            )],
        },
    })
}
