//! A two-level gather's report is the one-level report: the digests of
//! each node's ranks merged on the node ([`NodeDigest`]), then the nodes
//! merged, give what one merge of every rank gives — exactly for counts,
//! ranks and names, to the last bits of a sum for sums taken in another
//! order, and the same percentiles whether they are exact or sketched.

use rankscope_common::{gather, Gathered, Payload};
use rankscope_coordinator::analysis::{analyze, analyze_nodes, NodeDigest, RankDigest};
use rankscope_coordinator::AnalysisConfig;
use serde_json::Value;

mod support;
use support::synthetic::{rank_payload, Shape, BENCH};

/// Ranks per simulated node.
const PER_NODE: u32 = 4;

/// A job of `ranks` ranks of `shape`, on nodes of [`PER_NODE`]; the ranks
/// of node 2 are 30 % slower in `stage_07` (a slow node, found as a group).
fn job(ranks: u32, shape: &Shape) -> Vec<Payload> {
    let shape = Shape {
        slow_ranks: (2 * PER_NODE, 3 * PER_NODE),
        ..*shape
    };
    (0..ranks)
        .map(|rank| {
            let mut payload = rank_payload(rank, ranks, &shape, &mut std::io::sink()).unwrap();
            payload.header.rank.host = format!("node-{}", rank / PER_NODE);
            payload.header.rank.local_rank = rank % PER_NODE;
            payload
        })
        .collect()
}

/// The one-level report of `payloads` and the two-level one (their
/// digests merged per node first, then across nodes), as JSON.
fn both_reports(payloads: Vec<Payload>, config: &AnalysisConfig) -> (Value, Value) {
    let world_size = payloads.len() as u32;
    let gathered = gather::accept(
        payloads
            .into_iter()
            .map(|payload| gather::Candidate {
                source: format!("rank {}", payload.header.rank.rank),
                payload: Ok(payload),
            })
            .collect(),
        &Default::default(),
    );
    assert_eq!(gathered.payloads.len(), world_size as usize);
    let one_level = analyze(&gathered, config);
    let nodes: Vec<NodeDigest> = gathered
        .payloads
        .chunks(PER_NODE as usize)
        .map(|node| {
            let digests: Vec<RankDigest> = node
                .iter()
                .map(|payload| RankDigest::new(payload, config))
                .collect();
            NodeDigest::new(digests)
        })
        .collect();
    let rest = Gathered::<()> {
        world_size: gathered.world_size,
        sources: gathered.sources.clone(),
        ..Gathered::default()
    };
    // Merged in reverse, for good measure: the order of nodes is no part
    // of the result.
    let two_level = analyze_nodes(&rest, nodes.into_iter().rev(), config);
    (
        serde_json::to_value(&one_level).unwrap(),
        serde_json::to_value(&two_level).unwrap(),
    )
}

/// Asserts `a` and `b` equal, numbers within `relative` of each other.
fn assert_same(a: &Value, b: &Value, relative: f64, at: &str) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            let scale = x.abs().max(y.abs()).max(1e-12);
            assert!((x - y).abs() / scale <= relative, "{at}: {x} against {y}");
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_same(x, y, relative, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys = |o: &serde_json::Map<String, Value>| o.keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(x), keys(y), "{at}: keys");
            for (key, x) in x {
                assert_same(x, &y[key], relative, &format!("{at}.{key}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

#[test]
fn the_report_of_nodes_merged_is_the_report_of_every_rank() {
    let config = AnalysisConfig {
        warmup_calls: 1,
        ..AnalysisConfig::default()
    };
    let (one_level, two_level) = both_reports(job(16, &BENCH), &config);
    assert_same(&one_level, &two_level, 1e-9, "report");
    // And the report is about the job: the slow node found as one group.
    let groups = one_level["straggler_groups"].as_array().unwrap();
    let node2 = groups
        .iter()
        .find(|g| g["host"] == "node-2" && g["stage"] == "stage_07")
        .unwrap_or_else(|| panic!("{groups:?}"));
    assert_eq!(node2["ranks"], serde_json::json!([8, 9, 10, 11]));
    assert!(node2["job_time_s"].as_f64().unwrap() > 0.0);
    assert!(one_level["lockstep"].as_array().unwrap().len() > 1);
}

#[test]
fn sketched_percentiles_are_the_same_and_say_their_bound() {
    // 24 ranks of 3,000 steps: 72,000 calls of `step`, past the 65,536
    // kept one by one.
    let many = Shape {
        steps: 3_000,
        inner_per_step: 1,
        ..BENCH
    };
    let (one_level, two_level) = both_reports(job(24, &many), &AnalysisConfig::default());
    assert_same(&one_level, &two_level, 1e-9, "report");
    let step = one_level["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "step")
        .unwrap();
    assert_eq!(step["count"], 24 * 3_000);
    assert_eq!(step["per_call_ms"]["relative_error"], 0.01);
}
