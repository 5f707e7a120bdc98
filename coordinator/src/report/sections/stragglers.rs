//! Stragglers: the ranks blamed by what they cost the job, each slow
//! stage of each rank with its evidence; the one-off events kept out of
//! the statistics; lockstep, call by call, who the others waited for.

use std::fmt::Write;

use super::{Part, Section};
use crate::model::{LockstepStage, Recommendation, Report};
use crate::report::html::table::{Cell, Table};
use crate::report::summary::lines::{write_listed, write_wrapped, LISTED, NAME_WIDTH};
use rankscope_common::text::{cell, rank_ranges};

pub(super) const SECTION: Section = Section {
    id: "stragglers",
    link: "Stragglers",
    title: "Stragglers",
    fields: &["stragglers", "straggler_groups", "events", "lockstep"],
    summary: write_summary,
    values: super::no_values,
    parts: &[
        Part::Html(
            r#"<p class="hint">A rank whose work in a stage (its time there less its waits in collective calls, one-off calls counted at its steady time) is past the threshold over the median of the other ranks; the findings above blame each rank once, the costliest first.</p>"#,
        ),
        Part::Table("straggler-table", stragglers),
        Part::Html(
            r#"<h3>One-off events</h3>
  <p class="hint">Warm-up, stalls and steps the profiler perturbed: calls, or gaps between top-level calls, far outside a rank's steady time. They are left out of the straggler statistics; each costs the job the most any of its ranks lost there.</p>"#,
        ),
        Part::Table("event-table", events),
        Part::Html(
            r#"<h3>Lockstep: who the others waited for</h3>
  <p class="hint">Call by call, the slowest rank of each stage and the time the other ranks waited for it.</p>"#,
        ),
        Part::Table("lockstep-table", lockstep),
    ],
};

/// The stragglers, the one-off events, then the lockstep waits.
fn write_summary(out: &mut String, report: &Report) -> std::fmt::Result {
    write_stragglers(out, report)?;
    write_events(out, report)?;
    write_lockstep(out, report)
}

/// The stragglers: the ranks blamed, by what they cost the job (the
/// ranking the verdict and the recommendations share), then each slow
/// stage of each rank with its evidence.
fn write_stragglers(out: &mut String, report: &Report) -> std::fmt::Result {
    // The blamed ranks are findings: told there, referred to here.
    let blamed: Vec<(usize, &Recommendation)> = report
        .recommendations
        .iter()
        .enumerate()
        .filter(|(_, r)| r.category == "straggler" && r.cost_s.is_some())
        .collect();
    if blamed.is_empty() && report.stragglers.is_empty() {
        return writeln!(out, "Stragglers: none");
    }
    if !blamed.is_empty() {
        let numbers: Vec<String> = blamed
            .iter()
            .take(LISTED)
            .map(|(k, r)| format!("{} ({:.3} s)", k + 1, r.cost_s.unwrap_or(0.0)))
            .collect();
        write_wrapped(
            out,
            "",
            &format!(
                "Stragglers, by what they cost the job: findings {}{}",
                numbers.join(", "),
                if blamed.len() > LISTED { ", ..." } else { "" }
            ),
        )?;
    }
    if report.stragglers.is_empty() {
        return Ok(());
    }
    writeln!(out, "Slow stages (work: waits and one-off calls left out):")?;
    write_listed(out, &report.stragglers, LISTED, "stragglers", |out, st| {
        write_wrapped(
            out,
            "  ",
            &format!(
                "rank {} in {}: work {:.2}x the others' median (+{:.3} s{}); job +{:.3} s, \
                 others idle {:.3} rank-s",
                st.rank,
                cell(&st.stage, NAME_WIDTH),
                st.slowdown,
                st.excess_s,
                st.out_of_spread(),
                st.job_time_s,
                st.wait_s
            ),
        )?;
        // The evidence of a blamed rank is its finding's.
        match blamed
            .iter()
            .find(|(_, r)| r.message.starts_with(&format!("rank {} ", st.rank)))
        {
            Some((k, _)) if !st.evidence.is_empty() => {
                writeln!(out, "    its evidence: finding {}", k + 1)?;
            }
            _ => {
                for evidence in &st.evidence {
                    write_wrapped(out, "    ", evidence)?;
                }
            }
        }
        Ok(())
    })
}

/// The one-off events: the costliest, then a count of the rest.
fn write_events(out: &mut String, report: &Report) -> std::fmt::Result {
    if report.events.is_empty() {
        return Ok(());
    }
    let cost: f64 = report.events.iter().map(|e| e.cost_s).sum();
    writeln!(
        out,
        "One-off events (kept out of the straggler statistics): {}, costing {cost:.3} s",
        report.events.len()
    )?;
    write_listed(out, &report.events, EVENTS_LISTED, "events", |out, e| {
        let ranks = if e.rank_count == 1 {
            format!("rank {}", e.ranks.first().copied().unwrap_or(0))
        } else {
            format!("ranks {}", cell(&rank_ranges(&e.ranks), 40))
        };
        write_wrapped(
            out,
            "  ",
            &format!(
                "{} at {} #{} on {ranks}{}: +{:.3} s",
                e.kind,
                cell(&e.step_stage, NAME_WIDTH),
                e.step,
                e.stage
                    .as_deref()
                    .map(|s| format!(" in {}", cell(s, NAME_WIDTH)))
                    .unwrap_or_else(|| " between steps".into()),
                e.cost_s
            ),
        )
    })
}

/// One-off events listed in the summary; the rest are counted.
const EVENTS_LISTED: usize = 5;

/// Stages in the lockstep section, those with the most wait first.
const LOCKSTEP_STAGES: usize = 10;
/// Ranks named per lockstep stage, those that imposed the most wait first.
const LOCKSTEP_RANKS: usize = 3;

/// Per stage, call by call: which ranks were slowest and the wait they
/// imposed on the others (the number that matters most for
/// tensor-parallel jobs).
fn write_lockstep(out: &mut String, report: &Report) -> std::fmt::Result {
    let total_wait = |l: &LockstepStage| l.ranks.iter().map(|r| r.wait_imposed_s).sum::<f64>();
    let mut stages: Vec<&LockstepStage> = report
        .lockstep
        .iter()
        .filter(|l| total_wait(l) > 0.0)
        .collect();
    if stages.is_empty() {
        return Ok(());
    }
    stages.sort_by(|a, b| total_wait(b).total_cmp(&total_wait(a)));
    writeln!(
        out,
        "Lockstep waits (per call k: the slowest rank, and how long the others waited for it):"
    )?;
    write_listed(out, &stages, LOCKSTEP_STAGES, "stages", |out, stage| {
        let mut ranks: Vec<_> = stage.ranks.iter().filter(|r| r.slowest_calls > 0).collect();
        ranks.sort_by(|a, b| b.wait_imposed_s.total_cmp(&a.wait_imposed_s));
        let named: Vec<String> = ranks
            .iter()
            .take(LOCKSTEP_RANKS)
            .map(|r| {
                format!(
                    "r{} slowest in {} ({:.3} s waited)",
                    r.rank, r.slowest_calls, r.wait_imposed_s
                )
            })
            .collect();
        let more = ranks.len().saturating_sub(LOCKSTEP_RANKS);
        write_wrapped(
            out,
            &format!(
                "  {} ({} call{}): ",
                cell(&stage.stage, NAME_WIDTH),
                stage.calls,
                if stage.calls == 1 { "" } else { "s" }
            ),
            &format!(
                "{}{}",
                named.join("; "),
                if more > 0 {
                    format!("; {more} more rank{}", if more == 1 { "" } else { "s" })
                } else {
                    String::new()
                }
            ),
        )
    })
}

/// The stragglers, each with its evidence.
fn stragglers(report: &Report) -> Table<'_> {
    let rows = report.stragglers.iter().map(|s| {
        let evidence = if s.evidence.is_empty() {
            "none found".to_string()
        } else {
            s.evidence.join("; ")
        };
        vec![
            Cell::number(Some(f64::from(s.rank)), 0),
            Cell::text(s.stage.clone()),
            Cell {
                text: format!("{:.2}×", s.slowdown),
                sort: Some(s.slowdown),
                ..Cell::default()
            },
            Cell::number(Some(s.excess_s), 3),
            Cell::number(Some(s.self_excess_s), 3),
            Cell::number(Some(s.job_time_s), 3),
            Cell::number(Some(s.wait_s), 3),
            Cell::text(evidence),
        ]
    });
    Table::new(
        &[
            ("Rank", true),
            ("Stage", false),
            ("Slowdown", true),
            ("Excess work s", true),
            ("Of it, self s", true),
            ("Job time cost s", true),
            ("Others idle rank-s", true),
            ("Evidence", false),
        ],
        rows,
    )
}

/// The one-off events, the costliest first.
fn events(report: &Report) -> Table<'_> {
    let rows = report.events.iter().map(|e| {
        let ranks = if e.rank_count as usize > e.ranks.len() {
            format!(
                "{} (of {})",
                rankscope_common::text::rank_ranges(&e.ranks),
                e.rank_count
            )
        } else {
            rankscope_common::text::rank_ranges(&e.ranks)
        };
        vec![
            Cell::text(e.kind.clone()),
            Cell::text(ranks),
            Cell::text(format!("{} #{}", e.step_stage, e.step)),
            Cell::text(e.stage.clone().unwrap_or_else(|| "(between steps)".into())),
            Cell::number(Some(e.started_s), 3),
            Cell::number(Some(e.cost_s), 3),
            Cell::text(e.evidence.join("; ")),
        ]
    });
    Table::new(
        &[
            ("Kind", false),
            ("Ranks", false),
            ("Step", false),
            ("Stage", false),
            ("At s", true),
            ("Job time cost s", true),
            ("Evidence", false),
        ],
        rows,
    )
}

/// The lockstep waits by stage.
fn lockstep(report: &Report) -> Table<'_> {
    let rows = report.lockstep.iter().filter_map(|stage| {
        let worst = stage.ranks.iter().max_by(|a, b| {
            a.wait_imposed_s
                .total_cmp(&b.wait_imposed_s)
                .then(b.rank.cmp(&a.rank))
        })?;
        let total: f64 = stage.ranks.iter().map(|r| r.wait_imposed_s).sum();
        Some(vec![
            Cell::text(stage.stage.clone()),
            Cell::number(Some(stage.calls as f64), 0),
            Cell::number(Some(f64::from(worst.rank)), 0),
            Cell::number(Some(worst.slowest_calls as f64), 0),
            Cell::number(Some(worst.wait_imposed_s), 3),
            Cell::number(Some(total), 3),
        ])
    });
    Table::new(
        &[
            ("Stage", false),
            ("Calls compared", true),
            ("Most often slowest: rank", true),
            ("Its slowest calls", true),
            ("Wait it caused s", true),
            ("Wait, all ranks s", true),
        ],
        rows,
    )
}
