//! Stage durations regrouped from the ranks' stage tables: per stage name,
//! per rank, every call in start order, the self time (nested stages
//! excluded) and the enclosing stage. The stage and straggler analyses both
//! read this.

use std::collections::{BTreeMap, HashMap};

use rankscope_common::table::StagesView;
use rankscope_common::Payload;

/// Every call of every stage, by name, then rank.
#[derive(Debug, Default)]
pub struct StageTimes {
    /// name → rank → call durations in seconds, in start order.
    pub by_name: BTreeMap<String, BTreeMap<u32, Vec<f64>>>,
    /// name → rank → self time in seconds: the calls' durations less the
    /// durations of the stages directly inside them.
    pub self_by_name: BTreeMap<String, BTreeMap<u32, f64>>,
    /// name → the name of the stage its calls run inside most often; absent
    /// for a stage most often run at the top.
    pub parents: BTreeMap<String, String>,
}

/// One call of a stage: start (ns), duration and self time (s).
type Call = (u64, f64, f64);

impl StageTimes {
    /// Groups the stage tables of `payloads`, leaving out the first
    /// `warmup_calls` calls of each stage name on each rank; a table that
    /// does not match its schema is reported through `refuse`.
    pub fn from_payloads(
        payloads: &[Payload],
        warmup_calls: u32,
        mut refuse: impl FnMut(u32, String),
    ) -> Self {
        let mut calls_by_name: BTreeMap<String, BTreeMap<u32, Vec<Call>>> = BTreeMap::new();
        // name → enclosing name (None: the top) → calls.
        let mut parent_counts: BTreeMap<String, BTreeMap<Option<String>, u64>> = BTreeMap::new();
        for payload in payloads {
            let rank = payload.header.rank.rank;
            let stages = match payload.view::<StagesView>() {
                Ok(Some(stages)) => stages,
                Ok(None) => continue,
                Err(e) => {
                    refuse(rank, e.to_string());
                    continue;
                }
            };
            let duration_ns = |i: usize| stages.end_ns[i].saturating_sub(stages.start_ns[i]);
            // Each row's enclosing row (stage ids are unique within a rank),
            // and the time its direct children took.
            let row_of: HashMap<u64, usize> =
                (0..stages.len).map(|i| (stages.stage_id[i], i)).collect();
            let parent_row = |i: usize| {
                stages
                    .parent_id
                    .get(i)
                    .and_then(|p| row_of.get(&p).copied())
            };
            let mut nested_ns = vec![0u64; stages.len];
            for i in 0..stages.len {
                if let Some(parent) = parent_row(i) {
                    nested_ns[parent] = nested_ns[parent].saturating_add(duration_ns(i));
                }
            }
            // Resolve each distinct name once, then go row by row on keys.
            let mut calls_by_key: HashMap<usize, Vec<Call>> = HashMap::new();
            let mut parents_by_key: HashMap<(usize, Option<usize>), u64> = HashMap::new();
            for (i, nested) in nested_ns.iter().enumerate() {
                let key = stages.name.key(i);
                let seconds = duration_ns(i) as f64 / 1e9;
                let self_seconds = duration_ns(i).saturating_sub(*nested) as f64 / 1e9;
                calls_by_key.entry(key).or_default().push((
                    stages.start_ns[i],
                    seconds,
                    self_seconds,
                ));
                *parents_by_key
                    .entry((key, parent_row(i).map(|p| stages.name.key(p))))
                    .or_default() += 1;
            }
            let name_of = |key: usize| stages.name.dictionary().value(key).to_string();
            for (key, calls) in calls_by_key {
                calls_by_name
                    .entry(name_of(key))
                    .or_default()
                    .entry(rank)
                    .or_default()
                    .extend(calls);
            }
            for ((key, parent), calls) in parents_by_key {
                *parent_counts
                    .entry(name_of(key))
                    .or_default()
                    .entry(parent.map(name_of))
                    .or_default() += calls;
            }
        }
        let parents = parent_counts
            .into_iter()
            .filter_map(|(name, counts)| {
                // The most frequent enclosing name; on a tie, the top.
                let (parent, _) = counts
                    .into_iter()
                    .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
                // A stage inside a call of its own name has no other parent.
                Some((name.clone(), parent.filter(|p| *p != name)?))
            })
            .collect();
        let mut by_name: BTreeMap<String, BTreeMap<u32, Vec<f64>>> = BTreeMap::new();
        let mut self_by_name: BTreeMap<String, BTreeMap<u32, f64>> = BTreeMap::new();
        for (name, ranks) in calls_by_name {
            for (rank, mut calls) in ranks {
                calls.sort_by_key(|&(start, _, _)| start);
                let kept = calls.get(warmup_calls as usize..).unwrap_or_default();
                if kept.is_empty() {
                    continue;
                }
                let self_s = kept.iter().map(|&(_, _, s)| s).sum();
                self_by_name
                    .entry(name.clone())
                    .or_default()
                    .insert(rank, self_s);
                by_name
                    .entry(name.clone())
                    .or_default()
                    .insert(rank, kept.iter().map(|&(_, s, _)| s).collect());
            }
        }
        StageTimes {
            by_name,
            self_by_name,
            parents,
        }
    }

    /// Per-rank totals of one stage, seconds.
    pub fn totals(calls: &BTreeMap<u32, Vec<f64>>) -> Vec<(u32, f64)> {
        calls
            .iter()
            .map(|(&rank, calls)| (rank, calls.iter().sum()))
            .collect()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use rankscope_common::payload::PayloadHeader;
    use rankscope_common::table::{StageRow, StagesBuilder, Table};

    /// A rank whose stages are `(id, parent, name, start, end)` in seconds.
    pub(in crate::analysis) fn rank_with_stages(
        rank: u32,
        stages: &[(u64, Option<u64>, &str, f64, f64)],
    ) -> Payload {
        let mut builder = StagesBuilder::default();
        for &(stage_id, parent_id, name, start, end) in stages {
            builder.append(&StageRow {
                name: name.into(),
                thread: 0,
                thread_name: "main".into(),
                stage_id,
                parent_id,
                depth: u32::from(parent_id.is_some()),
                start_ns: (start * 1e9) as u64,
                end_ns: (end * 1e9) as u64,
                call_index: 0,
                metadata: None,
            });
        }
        let mut header = PayloadHeader::new("s", "n", rank, 1);
        header.clock.duration_ns = stages.iter().map(|s| (s.4 * 1e9) as u64).max().unwrap_or(0);
        let mut payload = Payload {
            header,
            tables: Default::default(),
        };
        payload
            .tables
            .insert(Table::Stages, builder.finish().unwrap());
        payload
    }

    #[test]
    fn self_time_leaves_out_the_stages_directly_inside() {
        // step 0–10 s holds denoise 1–6 (which holds attention 2–4) and
        // decode 6–9; a second attention at the top, 10–11.
        let payload = rank_with_stages(
            0,
            &[
                (1, None, "step", 0.0, 10.0),
                (2, Some(1), "denoise", 1.0, 6.0),
                (3, Some(2), "attention", 2.0, 4.0),
                (4, Some(1), "decode", 6.0, 9.0),
                (5, None, "attention", 10.0, 11.0),
                (6, Some(5), "attention", 10.2, 10.4),
            ],
        );
        let times = StageTimes::from_payloads(&[payload], 0, |_, e| panic!("{e}"));
        let self_s = |name: &str| times.self_by_name[name][&0];
        assert!((self_s("step") - 2.0).abs() < 1e-9, "10 − 5 − 3");
        assert!((self_s("denoise") - 3.0).abs() < 1e-9, "5 − 2");
        assert!((self_s("decode") - 3.0).abs() < 1e-9);
        assert!(
            (self_s("attention") - 3.0).abs() < 1e-9,
            "2 + (1 − 0.2) + 0.2"
        );
        assert_eq!(times.by_name["attention"][&0], [2.0, 1.0, 0.2]);
        assert_eq!(
            times.parents.get("denoise").map(String::as_str),
            Some("step")
        );
        assert_eq!(
            times.parents.get("decode").map(String::as_str),
            Some("step")
        );
        // attention: inside denoise once, at the top once, inside itself
        // once: a tie between denoise and the top goes to the top.
        assert_eq!(times.parents.get("attention"), None);
        assert_eq!(times.parents.get("step"), None);
    }

    #[test]
    fn warm_up_calls_are_left_out_of_every_statistic() {
        // The first step compiles (5 s), the next two run (1 s each), with
        // a 0.5 s decode inside the second.
        let payload = rank_with_stages(
            0,
            &[
                (1, None, "step", 0.0, 5.0),
                (2, None, "step", 5.0, 6.0),
                (3, Some(2), "decode", 5.0, 5.5),
                (4, None, "step", 6.0, 7.0),
            ],
        );
        let times =
            StageTimes::from_payloads(std::slice::from_ref(&payload), 1, |_, e| panic!("{e}"));
        assert_eq!(times.by_name["step"][&0], [1.0, 1.0]);
        assert!((times.self_by_name["step"][&0] - 1.5).abs() < 1e-9);
        // decode's one call is its warm-up: nothing of it is left.
        assert!(!times.by_name.contains_key("decode"));
        assert!(!times.self_by_name.contains_key("decode"));
        let none = StageTimes::from_payloads(&[payload], 0, |_, e| panic!("{e}"));
        assert_eq!(none.by_name["step"][&0], [5.0, 1.0, 1.0]);
    }

    #[test]
    fn a_parent_missing_from_the_table_leaves_the_stage_at_the_top() {
        // The enclosing stage was still open at the flush: not in the table.
        let payload = rank_with_stages(0, &[(7, Some(99), "decode", 0.0, 1.0)]);
        let times = StageTimes::from_payloads(&[payload], 0, |_, e| panic!("{e}"));
        assert_eq!(times.parents.get("decode"), None);
        assert!((times.self_by_name["decode"][&0] - 1.0).abs() < 1e-9);
    }
}
