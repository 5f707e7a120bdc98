//! Writes the node digests of a synthetic job, for the two-level merge
//! benchmark (`scripts/bench-merge.sh`): RANKS ranks of the aggregation
//! benchmark's shape (`gen_payloads`: the same payloads, rank by rank),
//! PER_NODE to a node, each node's ranks digested and merged as its
//! leader would, into `DIR/node-NNNNN.rsnd`.
//!
//! `cargo run --release -p rankscope-coordinator --example gen_node_digests -- DIR RANKS PER_NODE`

use std::path::PathBuf;

use rankscope_coordinator::analysis::{NodeDigest, RankDigest};
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
    let config = AnalysisConfig::default();
    let nodes: Vec<u32> = (0..ranks.div_ceil(per_node)).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for share in nodes.chunks(nodes.len().div_ceil(threads).max(1)) {
            let dir = &dir;
            let config = &config;
            scope.spawn(move || {
                for &node in share {
                    let first = node * per_node;
                    let digests: Vec<RankDigest> = (first..(first + per_node).min(ranks))
                        .map(|rank| {
                            let mut payload = synthetic::rank_payload(
                                rank,
                                ranks,
                                &synthetic::BENCH,
                                &mut std::io::sink(),
                            )
                            .expect("synthetic payload");
                            payload.header.rank.host = format!("node-{node:05}");
                            payload.header.rank.local_rank = rank - first;
                            RankDigest::new(&payload, config)
                        })
                        .collect();
                    let mut digest = NodeDigest::new(digests);
                    digest.bucket_for_job();
                    let bytes = digest.encode().expect("encodes");
                    std::fs::write(dir.join(format!("node-{node:05}.rsnd")), bytes)
                        .expect("writes");
                }
            });
        }
    });
    Ok(())
}
