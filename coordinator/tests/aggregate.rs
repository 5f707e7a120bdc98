//! `rankscope aggregate` reduces each rank as it is decoded, on several
//! threads, instead of holding every payload: its report must be the one
//! the in-memory analysis gives for the same files.

use rankscope_common::payload::{self, Compression};
use rankscope_common::spill::{self, SpillName};
use rankscope_common::{gather, Config};
use rankscope_coordinator::aggregate::{aggregate, Outputs};
use rankscope_coordinator::analysis::analyze;

mod support;
use support::synthetic::{rank_payload, BENCH, SLOW_RANK};

/// Writes the spill files of a synthetic job of `ranks` ranks into `dir`.
fn write_job(dir: &std::path::Path, ranks: u32) {
    for rank in 0..ranks {
        let payload = rank_payload(rank, ranks, &BENCH, &mut std::io::sink()).unwrap();
        let name = SpillName {
            rank,
            run_id: None,
            process: u64::from(rank),
        };
        let bytes = payload::encode(&payload, Compression::Zstd).unwrap();
        spill::write(dir, &name, &bytes).unwrap();
    }
}

#[test]
fn the_streamed_report_is_the_in_memory_report() {
    let dir = tempfile::tempdir().unwrap();
    write_job(dir.path(), 24);
    // A rank whose file is cut short: refused and named by both.
    let cut = dir.path().join(
        SpillName {
            rank: 5,
            run_id: None,
            process: 5,
        }
        .file_name(),
    );
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();

    let config = Config::default();
    let out = tempfile::tempdir().unwrap();
    let streamed = aggregate(dir.path(), Some(out.path()), None, Outputs::All, &config)
        .unwrap()
        .report;
    let candidates = spill::read_dir(dir.path(), config.max_data_points).unwrap();
    let in_memory = analyze(&gather::accept(candidates, &Default::default()), &config);

    assert_eq!(
        serde_json::to_value(&streamed).unwrap(),
        serde_json::to_value(&in_memory).unwrap()
    );
    // And the report is about the job: 23 ranks in order, rank 5 missing,
    // the planted straggler found.
    let ranks: Vec<u32> = streamed.ranks.iter().map(|r| r.rank).collect();
    assert_eq!(ranks, (0..24).filter(|&r| r != 5).collect::<Vec<_>>());
    assert_eq!(streamed.session.ranks_missing, [5]);
    assert!(
        streamed
            .stragglers
            .iter()
            .any(|s| s.rank == SLOW_RANK && s.stage == "stage_07"),
        "{:?}",
        streamed.stragglers
    );
}
