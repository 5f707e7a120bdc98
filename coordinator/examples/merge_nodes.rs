//! Rank 0's part of a two-level gather, for the merge benchmark
//! (`scripts/bench-merge.sh`): the node digests in DIR (`*.rsnd`, from
//! `gen_node_digests`) each read, decoded and merged on every core, one at
//! a time per core, as a leader's arrives over the network; the job
//! analysed, and with `--write OUT` the report files written (report.json,
//! report.html, summary.txt, stages.csv). Prints each phase's seconds.
//!
//! `cargo run --release -p rankscope-coordinator --example merge_nodes -- DIR [--write OUT]`

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Instant;

use rankscope_common::Gathered;
use rankscope_coordinator::analysis::{analyze_nodes, NodeDigest};
use rankscope_coordinator::report::write_reports;
use rankscope_coordinator::AnalysisConfig;

/// The most bytes one node digest may unpack to.
const LIMIT: usize = 256 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: merge_nodes DIR [--write OUT]";
    let dir = PathBuf::from(args.next().ok_or(usage)?);
    let out = match args.next().as_deref() {
        Some("--write") => Some(PathBuf::from(args.next().ok_or(usage)?)),
        Some(_) => return Err(usage.into()),
        None => None,
    };
    let start = Instant::now();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| p.extension().is_some_and(|e| e == "rsnd"));
    paths.sort();
    let (job, refused) = NodeDigest::decode_all(
        &paths,
        |path| std::fs::read(path).map(Cow::Owned),
        |_, _| Ok(()),
        LIMIT,
    );
    if let Some((at, e)) = refused.first() {
        return Err(format!("{}: {e}", paths[*at].display()).into());
    }
    let merged_s = start.elapsed().as_secs_f64();
    let gathered = Gathered::<()> {
        world_size: job.ranks.len() as u32,
        ..Gathered::default()
    };
    let report = analyze_nodes(&gathered, [job], &AnalysisConfig::default());
    let analysed_s = start.elapsed().as_secs_f64();
    if let Some(out) = out {
        std::fs::create_dir_all(&out)?;
        write_reports(&report, &out)?;
    }
    let written_s = start.elapsed().as_secs_f64();
    println!(
        "nodes {} ranks {} merged {merged_s:.3} analysed {analysed_s:.3} written {written_s:.3}",
        paths.len(),
        report.ranks.len()
    );
    Ok(())
}
