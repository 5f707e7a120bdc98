//! A two-level gather's report is the one-level report: the digests of
//! each node's ranks merged on the node ([`NodeDigest`]), then the nodes
//! merged, give what one merge of every rank gives — exactly for counts,
//! ranks and names, to the last bits of a sum for sums taken in another
//! order, and the same percentiles whether they are exact or sketched;
//! a node digest that is damaged or forged is refused with its reason,
//! and never panics the analysis.

use std::borrow::Cow;

use rankscope_common::gather::NodeSent;
use rankscope_common::parallel::ParallelCoord;
use rankscope_common::{gather, Gathered, Payload};
use rankscope_coordinator::analysis::{
    analyze, analyze_nodes, leader_digest, DigestError, NodeDigest, RankDigest,
};
use rankscope_coordinator::AnalysisConfig;
use serde_json::Value;

mod support;
use support::json::{assert_same, trace_process_names};
use support::synthetic::{rank_payload, Shape, BENCH};

/// Ranks per simulated node.
const PER_NODE: u32 = 4;
/// The most bytes a node digest may unpack to here.
const LIMIT: usize = 64 << 20;

/// A job of `ranks` ranks of `shape`, on nodes of [`PER_NODE`], each node
/// a tensor-parallel group (its ranks' coordinates `tp k/4`); the ranks
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
            payload.header.parallel = vec![ParallelCoord {
                dim: "tp".into(),
                index: rank % PER_NODE,
                size: PER_NODE,
            }];
            payload
        })
        .collect()
}

/// `payloads` as rank 0 gathers them in one level, every one taken.
fn gathered_in_one_level(payloads: Vec<Payload>) -> Gathered {
    let world_size = payloads.len();
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
    assert_eq!(gathered.payloads.len(), world_size);
    gathered
}

/// The one-level report of `payloads` and the two-level one (their
/// digests merged per node first, then across nodes), as JSON.
fn both_reports(payloads: Vec<Payload>, config: &AnalysisConfig) -> (Value, Value) {
    let gathered = gathered_in_one_level(payloads);
    let one_level = analyze(&gathered, config);
    // Each node's digest as its leader sends it, the last node first.
    let sent: Vec<Vec<u8>> = gathered
        .payloads
        .chunks(PER_NODE as usize)
        .rev()
        .map(|node| {
            let digests: Vec<RankDigest> = node
                .iter()
                .map(|payload| RankDigest::new(payload, config))
                .collect();
            let mut node = NodeDigest::new(digests);
            node.bucket_for_job();
            node.encode().unwrap()
        })
        .collect();
    // As rank 0 reads them.
    let (merged, refused) =
        NodeDigest::decode_all(&sent, |b| Ok(Cow::Borrowed(b)), |_, _| Ok(()), LIMIT);
    assert!(refused.is_empty(), "{refused:?}");
    let rest = Gathered::<()> {
        world_size: gathered.world_size,
        sources: gathered.sources.clone(),
        ..Gathered::default()
    };
    let two_level = analyze_nodes(&rest, [merged], config);
    (
        serde_json::to_value(&one_level).unwrap(),
        serde_json::to_value(&two_level).unwrap(),
    )
}

#[test]
fn the_report_of_nodes_merged_is_the_report_of_every_rank() {
    let config = AnalysisConfig {
        warmup_calls: 1,
        ..AnalysisConfig::default()
    };
    let (one_level, two_level) = both_reports(job(16, &BENCH), &config);
    assert_same(&one_level, &two_level, 1e-9, "report");
    // Each rank's parallel coordinates, through its node's digest too.
    assert_eq!(
        two_level["ranks"][5]["parallel"],
        serde_json::json!([{"dim": "tp", "index": 1, "size": 4}])
    );
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

/// Collective calls inside the stages: waits, work, one-off events and the
/// verdict come out of node digests as they do from every rank's payload.
#[test]
fn waits_events_and_the_verdict_are_the_same_through_node_digests() {
    let shape = Shape {
        collectives: true,
        ..BENCH
    };
    let (one_level, two_level) = both_reports(job(16, &shape), &AnalysisConfig::default());
    assert_same(&one_level, &two_level, 1e-9, "report");
    let measured = one_level["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !s["wait_s"].is_null())
        .count();
    assert!(measured > 0, "some stage holds the collective calls");
    assert!(two_level["verdict"]["sentence"].is_string());
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
    // And the summary and the page say so.
    let report: rankscope_coordinator::model::Report = serde_json::from_value(one_level).unwrap();
    let summary = rankscope_coordinator::report::summary(&report);
    assert!(
        summary.contains("p50, p95 and p99 of 1 stage(s) past 65536 calls across ranks are from a quantile sketch: within 1%"),
        "{summary}"
    );
    let dir = tempfile::tempdir().unwrap();
    rankscope_coordinator::report::write_reports(&report, dir.path()).unwrap();
    let page = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(page.contains("of 1 stage(s) with more than 65536 calls across ranks come from a quantile sketch: each within 1 %"));
}

/// The encoded digest of node 1 of a 16-rank job.
fn node_bytes() -> Vec<u8> {
    let config = AnalysisConfig::default();
    let digests = job(16, &BENCH)
        .iter()
        .filter(|p| p.header.rank.rank / PER_NODE == 1)
        .map(|payload| RankDigest::new(payload, &config))
        .collect();
    NodeDigest::new(digests).encode().unwrap()
}

#[test]
fn damaged_digests_are_refused_with_their_reason() {
    let bytes = node_bytes();
    let refused = |bytes: &[u8], limit: usize| NodeDigest::decode(bytes, limit).unwrap_err();
    assert!(matches!(refused(b"RSN", LIMIT), DigestError::NotADigest));
    assert!(matches!(
        refused(&bytes[1..], LIMIT),
        DigestError::NotADigest
    ));
    let mut other_version = bytes.clone();
    other_version[4] = 9;
    assert_eq!(
        refused(&other_version, LIMIT).to_string(),
        "node digest version 9; this build reads version 4"
    );
    assert!(matches!(
        refused(&bytes[..bytes.len() / 2], LIMIT),
        DigestError::Unpack(_)
    ));
    assert!(matches!(
        refused(&bytes, 1_000),
        DigestError::TooLarge { limit: 1_000 }
    ));
    // Among good ones, refused by position; the others merged.
    let (merged, rejected) = NodeDigest::decode_all(
        &[bytes.clone(), b"RSND".to_vec(), bytes.clone()],
        |b| Ok(Cow::Borrowed(b)),
        |_, _| Ok(()),
        LIMIT,
    );
    assert_eq!(merged.ranks.len(), 2 * PER_NODE as usize);
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].0, 1);
    // Well packed, but not a digest inside.
    let mut garbage = bytes[..6].to_vec();
    garbage.extend(zstd::bulk::compress(&[0xff; 64], 1).unwrap());
    assert!(matches!(refused(&garbage, LIMIT), DigestError::Decode(_)));
}

#[test]
fn no_damage_to_a_digest_panics_the_analysis() {
    // Each time a few bytes of the unpacked digest changed at random
    // (packed again, so the damage reaches the decoder): refused, or
    // analysed without a panic.
    let bytes = node_bytes();
    let body = zstd::stream::decode_all(&bytes[6..]).unwrap();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut refused, mut analysed) = (0, 0);
    for _ in 0..300 {
        let mut damaged = body.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % damaged.len() as u64) as usize;
            damaged[at] = next() as u8;
        }
        let mut packed = bytes[..6].to_vec();
        packed.extend(zstd::bulk::compress(&damaged, 1).unwrap());
        match NodeDigest::decode(&packed, LIMIT) {
            Err(_) => refused += 1,
            Ok(node) => {
                let rest = Gathered::<()> {
                    world_size: 16,
                    ..Gathered::default()
                };
                let report = analyze_nodes(&rest, [node], &AnalysisConfig::default());
                serde_json::to_string(&report).unwrap();
                analysed += 1;
            }
        }
    }
    assert!(
        refused > 0 && analysed > 0,
        "{refused} refused, {analysed} analysed"
    );
}

/// What rank 0 of a 16-rank job gathers in two levels: node 0's payloads
/// and, for each of `sent` (leader, the payloads of the ranks its digest
/// holds), a leader's digest.
fn gathered_in_two_levels(payloads: &[Payload], sent: &[(u32, &[Payload])]) -> Gathered {
    let config = AnalysisConfig::default();
    let nodes = sent
        .iter()
        .map(|&(leader, held)| {
            let node = Gathered {
                world_size: 16,
                payloads: held.to_vec(),
                ..Gathered::default()
            };
            NodeSent {
                source: format!("node digest of rank {leader}"),
                leader,
                ranks: leader..leader + PER_NODE,
                bytes: leader_digest(&node, &config).unwrap(),
            }
        })
        .collect();
    let mut gathered = Gathered {
        world_size: 16,
        payloads: payloads[..PER_NODE as usize].to_vec(),
        missing: (PER_NODE..16).collect(),
        ..Gathered::default()
    };
    gathered.add_nodes(nodes);
    assert!(gathered.missing.is_empty(), "each node answered for");
    gathered
}

#[test]
fn rank_0_takes_its_nodes_digests_and_refuses_forged_ones() {
    let payloads = job(16, &BENCH);
    let node = |k: usize| &payloads[k * 4..k * 4 + 4];
    // Node 3's leader sends node 1's ranks as its own; another leader
    // sends ranks of another session.
    let mut other_session = node(2).to_vec();
    for payload in &mut other_session {
        payload.header.session.id = "another".into();
    }
    let gathered = gathered_in_two_levels(
        &payloads,
        &[
            (4, node(1)),
            (8, node(2)),
            (12, node(1)),
            (8, &other_session),
        ],
    );
    let report = analyze(&gathered, &AnalysisConfig::default());
    assert_eq!(report.session.gather_levels, 2);
    assert_eq!(
        report.session.ranks_reporting,
        (0..12).collect::<Vec<u32>>()
    );
    assert_eq!(report.session.ranks_missing, [12, 13, 14, 15]);
    let refused: Vec<(&str, &str)> = report
        .session
        .skipped
        .iter()
        .map(|s| (s.source.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(
        refused,
        [
            (
                "node digest of rank 8",
                "node digest refused: rank 8 is of another session"
            ),
            (
                "node digest of rank 12",
                "node digest refused: it holds rank 4, not of its leader's node (ranks 12..16)"
            ),
        ]
    );
    // The report of the ranks taken is the one-level report of their
    // payloads (but for how it was gathered and what was refused, which
    // is also told as a recommendation each).
    let one_level = analyze(
        &Gathered {
            world_size: 16,
            payloads: payloads[..12].to_vec(),
            missing: (12..16).collect(),
            ..Gathered::default()
        },
        &AnalysisConfig::default(),
    );
    let mut two_level = serde_json::to_value(&report).unwrap();
    let mut one_level = serde_json::to_value(&one_level).unwrap();
    for report in [&mut two_level, &mut one_level] {
        let session = report["session"].as_object_mut().unwrap();
        session.remove("gather_levels");
        session.remove("skipped");
        // What the refused digests are told as.
        let recommendations = report["recommendations"].as_array_mut().unwrap();
        recommendations.retain(|r| !r["evidence"].as_str().unwrap().starts_with("node digest"));
    }
    assert_same(&one_level, &two_level, 1e-9, "report");
}

/// The trace names each rank's process with its parallel coordinates, and
/// report.html's table of ranks shows them.
#[test]
fn the_trace_labels_each_rank_with_its_parallel_coordinates() {
    let gathered = gathered_in_one_level(job(8, &BENCH));
    let dir = tempfile::tempdir().unwrap();
    rankscope_coordinator::report::report(&gathered, dir.path(), &AnalysisConfig::default())
        .unwrap();
    let names = trace_process_names(&dir.path().join("trace.json.gz"));
    assert!(
        names.iter().any(|n| n == "rank 5 @ node-1 · tp 1/4"),
        "{names:?}"
    );
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains(">Parallel<"), "a column");
    // Escaped as the page escapes every cell (`/` as `&#x2F;`).
    assert!(html.contains(">tp 1&#x2F;4<"), "rank 5's cell");
}
