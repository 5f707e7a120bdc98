//! Stage durations regrouped from the ranks' stage tables: per stage name,
//! per rank, every call in start order. The stage and straggler analyses
//! both read this.

use std::collections::{BTreeMap, HashMap};

use rankscope_common::table::StagesView;
use rankscope_common::Payload;

/// Every call of every stage, by name, then rank.
#[derive(Debug, Default)]
pub struct StageTimes {
    /// name → rank → call durations in seconds, in start order.
    pub by_name: BTreeMap<String, BTreeMap<u32, Vec<f64>>>,
}

impl StageTimes {
    /// Groups the stage tables of `payloads`; a table that does not match
    /// its schema is reported through `refuse`.
    pub fn from_payloads(payloads: &[Payload], mut refuse: impl FnMut(u32, String)) -> Self {
        let mut by_name: BTreeMap<String, BTreeMap<u32, Vec<(u64, f64)>>> = BTreeMap::new();
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
            // Resolve each distinct name once, then go row by row on keys.
            let mut calls_by_key: HashMap<usize, Vec<(u64, f64)>> = HashMap::new();
            for i in 0..stages.len {
                let seconds = stages.end_ns[i].saturating_sub(stages.start_ns[i]) as f64 / 1e9;
                calls_by_key
                    .entry(stages.name.key(i))
                    .or_default()
                    .push((stages.start_ns[i], seconds));
            }
            for (key, calls) in calls_by_key {
                let name = stages.name.dictionary().value(key).to_string();
                by_name
                    .entry(name)
                    .or_default()
                    .entry(rank)
                    .or_default()
                    .extend(calls);
            }
        }
        let by_name = by_name
            .into_iter()
            .map(|(name, ranks)| {
                let ranks = ranks
                    .into_iter()
                    .map(|(rank, mut calls)| {
                        calls.sort_by_key(|&(start, _)| start);
                        (rank, calls.into_iter().map(|(_, s)| s).collect())
                    })
                    .collect();
                (name, ranks)
            })
            .collect();
        StageTimes { by_name }
    }

    /// Per-rank totals of one stage, seconds.
    pub fn totals(calls: &BTreeMap<u32, Vec<f64>>) -> Vec<(u32, f64)> {
        calls
            .iter()
            .map(|(&rank, calls)| (rank, calls.iter().sum()))
            .collect()
    }
}
