//! `rankscope aggregate` reduces each rank as it is decoded, on several
//! threads, instead of holding every payload: its report must be the one
//! the in-memory analysis gives for the same files.

use rankscope_common::payload::{self, Compression};
use rankscope_common::spill::{self, SpillName};
use rankscope_common::{gather, Payload};
use rankscope_coordinator::aggregate::{aggregate, Outputs};
use rankscope_coordinator::analysis::analyze;
use rankscope_coordinator::AnalysisConfig;

mod support;
use support::synthetic::{rank_payload, BENCH, SLOW_RANK};

/// The encoded payload of `rank` of a synthetic job of `ranks` ranks.
fn encoded(rank: u32, ranks: u32, edit: impl FnOnce(&mut Payload)) -> Vec<u8> {
    let mut payload = rank_payload(rank, ranks, &BENCH, &mut std::io::sink()).unwrap();
    edit(&mut payload);
    payload::encode(&payload, Compression::Zstd).unwrap()
}

fn name(rank: u32, run_id: Option<&str>, process: u64) -> SpillName<'_> {
    SpillName {
        rank,
        run_id,
        process,
    }
}

#[test]
fn the_streamed_report_is_the_in_memory_report() {
    const RANKS: u32 = 24;
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path();
    for rank in (0..RANKS).filter(|&r| r != 9) {
        spill::write(
            dir_path,
            &name(rank, None, rank.into()),
            &encoded(rank, RANKS, |_| {}),
        )
        .unwrap();
    }
    // Rank 5's file is cut short: refused and named by both.
    let cut = dir_path.join(name(5, None, 5).file_name());
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    // Rank 9 died after two flushes: its parts, merged, are its data.
    let flushed = |p: &mut Payload| p.header.flushed_until_ns = Some(p.header.clock.duration_ns);
    let rank9 = name(9, None, 9);
    for seq in 0..2 {
        let path = dir_path.join(rank9.part_name(seq));
        std::fs::write(path, encoded(9, RANKS, flushed)).unwrap();
    }
    // A second file claiming rank 1, from another process: refused.
    spill::write(dir_path, &name(1, None, 101), &encoded(1, RANKS, |_| {})).unwrap();
    // Rank 2 of an earlier run that reused the session id: named apart.
    let earlier = |p: &mut Payload| {
        p.header.session.run_id = Some("earlier".into());
        p.header.clock.start_unix_ns = -1;
    };
    spill::write(
        dir_path,
        &name(2, Some("earlier"), 2),
        &encoded(2, RANKS, earlier),
    )
    .unwrap();

    let config = AnalysisConfig {
        warmup_calls: 2,
        ..AnalysisConfig::default()
    };
    let out = tempfile::tempdir().unwrap();
    let streamed = aggregate(
        dir_path,
        Some(out.path()),
        None,
        Outputs::ReportOnly,
        &config,
    )
    .unwrap()
    .report;
    let candidates = spill::read_dir(dir_path, config.max_data_points).unwrap();
    let in_memory = analyze(&gather::accept(candidates, &Default::default()), &config);

    assert_eq!(
        serde_json::to_value(&streamed).unwrap(),
        serde_json::to_value(&in_memory).unwrap()
    );
    // And the report is about the job: every rank but 5, rank 9 partial,
    // the duplicate and the other run named, the straggler found.
    let ranks: Vec<u32> = streamed.ranks.iter().map(|r| r.rank).collect();
    assert_eq!(ranks, (0..RANKS).filter(|&r| r != 5).collect::<Vec<_>>());
    assert!(streamed.ranks.iter().any(|r| r.rank == 9 && r.partial));
    assert_eq!(streamed.session.ranks_missing, [5]);
    assert_eq!(streamed.session.other_runs.len(), 1);
    let skipped: Vec<&str> = streamed
        .session
        .skipped
        .iter()
        .map(|s| s.reason.as_str())
        .collect();
    assert!(
        skipped.iter().any(|r| r.contains("already provided")),
        "{skipped:?}"
    );
    assert!(
        streamed
            .stragglers
            .iter()
            .any(|s| s.rank == SLOW_RANK && s.stage == "stage_07"),
        "{:?}",
        streamed.stragglers
    );
}
