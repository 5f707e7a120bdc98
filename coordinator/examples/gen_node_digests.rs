//! Writes the node digests of a synthetic job, for the two-level merge
//! benchmark (`scripts/bench-merge.sh`): RANKS ranks of the aggregation
//! benchmark's shape (`gen_payloads`: the same payloads, rank by rank),
//! PER_NODE to a node, each node's digest made by its leader's own code
//! (`leader_digest`, its busiest rank's payload with it), into
//! `DIR/node-NNNNN.rsnd`. Prints a leader's time for its
//! node: its ranks' payloads (as they arrive, encoded) decoded and
//! digested, merged, and encoded to send.
//!
//! `cargo run --release -p rankscope-coordinator --example gen_node_digests -- DIR RANKS PER_NODE`

use std::path::{Path, PathBuf};
use std::time::Instant;

use rankscope_common::payload::{self, Compression};

use rankscope_common::Gathered;
use rankscope_coordinator::analysis::leader_digest;
use rankscope_coordinator::AnalysisConfig;

#[path = "../tests/support/synthetic.rs"]
mod synthetic;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: gen_node_digests DIR RANKS PER_NODE";
    let dir = PathBuf::from(args.next().ok_or(usage)?);
    let ranks: u32 = args.next().ok_or(usage)?.parse()?;
    let per_node: u32 = args.next().ok_or(usage)?.parse()?;
    std::fs::create_dir_all(&dir)?;
    let nodes: Vec<u32> = (0..ranks.div_ceil(per_node)).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut leader_s: Vec<f64> = std::thread::scope(|scope| {
        let spawned: Vec<_> = nodes
            .chunks(nodes.len().div_ceil(threads).max(1))
            .map(|share| {
                let dir = &dir;
                scope.spawn(move || {
                    share
                        .iter()
                        .map(|&node| write_node(dir, node, per_node, ranks))
                        .collect::<Vec<f64>>()
                })
            })
            .collect();
        spawned
            .into_iter()
            .flat_map(|thread| thread.join().expect("generator thread"))
            .collect()
    });
    leader_s.sort_by(f64::total_cmp);
    println!(
        "leader of {per_node} ranks: median {:.1} ms, max {:.1} ms",
        leader_s[leader_s.len() / 2] * 1e3,
        leader_s[leader_s.len() - 1] * 1e3
    );
    Ok(())
}

/// Writes the digest of node `node` of a job of `ranks`; returns the
/// seconds its leader's part took: its ranks' payloads, encoded as they
/// arrive, decoded and digested, merged, and encoded to send.
fn write_node(dir: &Path, node: u32, per_node: u32, ranks: u32) -> f64 {
    let first = node * per_node;
    let arrived: Vec<Vec<u8>> = (first..(first + per_node).min(ranks))
        .map(|rank| {
            let mut payload =
                synthetic::rank_payload(rank, ranks, &synthetic::BENCH, &mut std::io::sink())
                    .expect("synthetic payload");
            payload.header.rank.host = format!("node-{node:05}");
            payload.header.rank.local_rank = rank - first;
            payload::encode(&payload, Compression::Zstd).expect("encodes")
        })
        .collect();
    let start = Instant::now();
    let gathered = Gathered {
        world_size: ranks,
        payloads: arrived
            .iter()
            .map(|bytes| payload::decode(bytes).expect("decodes"))
            .collect(),
        ..Gathered::default()
    };
    let bytes = leader_digest(&gathered, &AnalysisConfig::default()).expect("encodes");
    let leader_s = start.elapsed().as_secs_f64();
    std::fs::write(dir.join(format!("node-{node:05}.rsnd")), bytes).expect("writes");
    leader_s
}
