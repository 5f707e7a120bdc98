//! Writes the spill files of a synthetic job, for the aggregation benchmark
//! (`scripts/bench-aggregate.sh`): RANKS ranks, each with 30 stage names and
//! 2,000 stages (100 `step`s, each holding 19 inner stages), 300 GPU and 150
//! host readings, encoded by the payload codec the agent uses. Rank 7 (where
//! there is one) is 30 % slower in `stage_07`. The GPUs are labelled
//! simulated.
//!
//! Also writes `stage_rows.csv` (rank, name, start_ns, end_ns: every stage row)
//! so that another engine can compute the same statistics from the same rows.
//!
//! With `--collectives`, each step's last inner stage holds an `all_reduce`
//! recorded on the host.
//!
//! `cargo run --release -p rankscope-coordinator --example gen_payloads -- DIR RANKS [--collectives]`

use std::io::Write;
use std::path::PathBuf;

#[path = "../tests/support/synthetic.rs"]
mod synthetic;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: gen_payloads DIR RANKS [--collectives]";
    let dir = PathBuf::from(args.next().ok_or(usage)?);
    let ranks: u32 = args.next().ok_or(usage)?.parse()?;
    let shape = synthetic::Shape {
        collectives: args.next().as_deref() == Some("--collectives"),
        ..synthetic::BENCH
    };
    std::fs::create_dir_all(&dir)?;
    let mut csv = std::io::BufWriter::new(std::fs::File::create(dir.join("stage_rows.csv"))?);
    writeln!(csv, "rank,name,start_ns,end_ns")?;
    synthetic::write_job(&dir, ranks, &shape, &mut csv)?;
    csv.flush()?;
    Ok(())
}
