//! The job's one-off events: each rank's ([`super::steady`]) merged across
//! ranks, one event per kind and step, costing the job the most any of its
//! ranks lost there (the others wait for that rank at the next collective).

use std::collections::BTreeMap;

use rankscope_common::table::PROFILER_STAGE_PREFIX;
use rankscope_common::text::{cell, rank_ranges};

use super::digest::RankDigest;
use super::steady::{OneOffKind, RankEvent};
use super::timeline;
use crate::model::OneOffEvent;

/// Events the report lists, the costliest.
pub const LISTED_EVENTS: usize = 50;
/// Ranks an event names; the rest are counted.
const LISTED_RANKS: usize = 64;

/// One event being merged: its ranks with what each lost, the costliest
/// rank's event, and where it began on the shared timeline.
struct Merging<'a> {
    ranks: Vec<(u32, f64)>,
    costliest: (u32, &'a RankEvent),
    started_ns: i64,
}

/// A rank's one-off at the step of a costlier one counts as the same event
/// where it cost this share of the costliest's time; less is another
/// rank's noise beside it.
const SAME_EVENT_SHARE: f64 = 0.25;

/// The events of `ranks`, merged by kind and step, the costliest first
/// (at most [`LISTED_EVENTS`]); times on the timeline that starts at
/// `zero_ns`.
pub fn job_events(ranks: &[RankDigest], zero_ns: i64) -> Vec<OneOffEvent> {
    let mut merged: BTreeMap<(OneOffKind, &str, u64), Merging> = BTreeMap::new();
    for digest in ranks {
        let rank = digest.header.rank.rank;
        let start = timeline::aligned_start_ns(&digest.header);
        for event in &digest.events {
            let started_ns = start.saturating_add(event.start_ns.min(i64::MAX as u64) as i64);
            let key = (event.kind, event.step_stage.as_str(), event.step);
            let entry = merged.entry(key).or_insert(Merging {
                ranks: Vec::new(),
                costliest: (rank, event),
                started_ns,
            });
            // A rank's stall between two steps and in the next one is one.
            match entry.ranks.last_mut() {
                Some((last, cost)) if *last == rank => *cost += event.cost_s,
                _ => entry.ranks.push((rank, event.cost_s)),
            }
            entry.started_ns = entry.started_ns.min(started_ns);
            if event.cost_s > entry.costliest.1.cost_s {
                entry.costliest = (rank, event);
            }
        }
    }
    let mut events: Vec<OneOffEvent> = merged
        .into_values()
        .map(|m| {
            let (_, event) = m.costliest;
            let (rank, cost_s) =
                m.ranks.iter().copied().fold(
                    (0, 0.0),
                    |most, (r, c)| if c > most.1 { (r, c) } else { most },
                );
            let mut ranks: Vec<u32> = m
                .ranks
                .iter()
                .filter(|&&(_, cost)| cost >= SAME_EVENT_SHARE * cost_s)
                .map(|&(rank, _)| rank)
                .collect();
            ranks.sort_unstable();
            ranks.dedup();
            let rank_count = ranks.len() as u32;
            let evidence = evidence(&ranks, rank, event, cost_s);
            ranks.truncate(LISTED_RANKS);
            OneOffEvent {
                kind: event.kind.as_str().to_string(),
                ranks,
                rank_count,
                step: event.step,
                step_stage: event.step_stage.clone(),
                stage: event.stage.clone(),
                started_s: m.started_ns.saturating_sub(zero_ns) as f64 / 1e9,
                cost_s,
                profiler_s: event.profiler_s,
                evidence,
            }
        })
        .collect();
    events.sort_by(|a, b| {
        b.cost_s
            .total_cmp(&a.cost_s)
            .then(a.started_s.total_cmp(&b.started_s))
    });
    events.truncate(LISTED_EVENTS);
    events
}

/// What an event's ranks lost (the most, `cost_s`: rank `costliest`'s), in
/// words.
fn evidence(ranks: &[u32], costliest: u32, event: &RankEvent, cost_s: f64) -> Vec<String> {
    let whose = if ranks.len() == 1 {
        format!("rank {costliest}")
    } else {
        format!("ranks {} (the most: rank {costliest})", rank_ranges(ranks))
    };
    let what = match (&event.stage, event.kind) {
        (Some(stage), OneOffKind::Profiler) if stage.starts_with(PROFILER_STAGE_PREFIX) => {
            format!(
                "the profiler's own `{}` at `{}` call {} ({:.3} s)",
                cell(stage, 60),
                cell(&event.step_stage, 60),
                event.step,
                event.profiler_s
            )
        }
        (Some(stage), _) => format!(
            "`{}` in `{}` call {}",
            cell(stage, 60),
            cell(&event.step_stage, 60),
            event.step
        ),
        (None, _) => format!(
            "the gap before `{}` call {}",
            cell(&event.step_stage, 60),
            event.step
        ),
    };
    vec![format!(
        "{whose}: {what}, {cost_s:.3} s past the rank's steady time"
    )]
}
