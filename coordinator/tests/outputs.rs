//! The per-row outputs of a report: `trace.json.gz` passes a structural
//! check of the Trace Event Format and is bounded by `trace_max_stages`
//! (the report says what was cut); `raw/` holds every row, readable by
//! pyarrow with the row counts the report gives.

use rankscope_coordinator::AnalysisConfig;
use std::collections::BTreeMap;
use std::process::Command;

use rankscope_common::Gathered;
use rankscope_coordinator::aggregate::{aggregate, Outputs};
use rankscope_coordinator::model::{Bottleneck, BottleneckKind, Notice, Report};
use rankscope_coordinator::report;

mod support;
use support::synthetic::{rank_payload, write_job, BENCH, HOUR};
use support::trace::{check_trace, read_trace};
use support::{python, run_ok};

const RANKS: u32 = 6;
/// Stages each synthetic rank records.
const STAGES: u64 = 2_000;

/// Aggregates a synthetic job of [`RANKS`] ranks with `config`.
fn job(config: &AnalysisConfig) -> (tempfile::TempDir, Report) {
    let dir = tempfile::tempdir().unwrap();
    write_job(dir.path(), RANKS, &BENCH, &mut std::io::sink()).unwrap();
    let report = aggregate(dir.path(), None, None, Outputs::All, config)
        .unwrap()
        .report;
    (dir, report)
}

#[test]
fn the_trace_is_well_formed_and_holds_every_rank_and_stage() {
    let (dir, report) = job(&AnalysisConfig::default());
    let (per_pid, instants) = check_trace(&read_trace(&dir.path().join("trace.json.gz")));
    let expected: BTreeMap<u64, usize> = (1..=u64::from(RANKS))
        .map(|pid| (pid, STAGES as usize))
        .collect();
    assert_eq!(per_pid, expected);
    // 100 diffusion steps and 10 events per rank.
    assert!(instants.values().all(|&n| n == 110), "{instants:?}");
    assert!(report.session.notices.is_empty(), "nothing was cut");
}

/// The notice that names what the trace left out of `what`.
fn cut_notice<'a>(report: &'a Report, what: &str) -> &'a Notice {
    report
        .session
        .notices
        .iter()
        .find(|n| n.message.contains(what) && n.message.contains("trace.json.gz"))
        .unwrap_or_else(|| panic!("no notice of {what}: {:?}", report.session.notices))
}

#[test]
fn a_trace_past_its_bound_is_cut_and_the_report_says_so() {
    let config = AnalysisConfig {
        trace_max_stages: 50,
        ..AnalysisConfig::default()
    };
    let (dir, report) = job(&config);
    let (per_pid, instants) = check_trace(&read_trace(&dir.path().join("trace.json.gz")));
    assert!(per_pid.values().all(|&n| n == 50), "{per_pid:?}");
    assert!(instants.values().all(|&n| n == 50), "{instants:?}");
    // One notice per kind of cut, with every rank it applies to.
    let all: Vec<u32> = (0..RANKS).collect();
    let stages = cut_notice(&report, " stages past");
    assert!(stages
        .message
        .starts_with(&format!("{} stages", (STAGES - 50) * u64::from(RANKS))));
    assert_eq!(stages.ranks, all);
    let instants = cut_notice(&report, " instants");
    assert!(instants
        .message
        .starts_with(&format!("{} instants", 60 * RANKS)));
    assert_eq!(instants.ranks, all);
    let summary = std::fs::read_to_string(dir.path().join("summary.txt")).unwrap();
    assert!(
        summary.contains("stages past each rank's first trace_max_stages (50)"),
        "{summary}"
    );
    // The statistics still count every call.
    let steps = report.stages.iter().find(|s| s.name == "step").unwrap();
    assert_eq!(steps.count, 100 * u64::from(RANKS));
}

#[test]
fn pyarrow_reads_every_raw_file_with_the_reports_row_counts() {
    let (dir, report) = job(&AnalysisConfig::default());
    // Per table, per rank, the rows the report says each rank recorded.
    let mut expected: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for rank in &report.ranks {
        for (table, &rows) in &rank.rows {
            expected
                .entry(table.clone())
                .or_default()
                .insert(rank.rank.to_string(), rows);
        }
    }
    let script = r#"
import json, pathlib, sys
import pyarrow.ipc
counts = {}
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.arrow")):
    table = pyarrow.ipc.open_file(path).read_all()
    ranks = table.column("rank").to_pylist()
    per_rank = {}
    for rank in ranks:
        per_rank[str(rank)] = per_rank.get(str(rank), 0) + 1
    counts[path.stem] = per_rank
print(json.dumps(counts))
"#;
    let out = run_ok(
        Command::new(python())
            .arg("-c")
            .arg(script)
            .arg(dir.path().join("raw")),
        "python reading raw/",
    );
    let found: BTreeMap<String, BTreeMap<String, u64>> =
        serde_json::from_slice(&out.stdout).unwrap();
    // The time account's file: a row per category of each rank, and of
    // the job (its rank null).
    let categories = rankscope_coordinator::model::Category::ALL.len() as u64;
    expected.insert(
        "time_account".into(),
        report
            .ranks
            .iter()
            .map(|r| r.rank.to_string())
            .chain(["None".to_string()])
            .map(|rank| (rank, categories))
            .collect(),
    );
    assert_eq!(found, expected);
    assert_eq!(
        found.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "diffusion_steps",
            "events",
            "gpu_samples",
            "host_samples",
            "stages",
            "time_account"
        ]
    );
}

#[test]
fn an_hour_of_64_ranks_stays_a_few_megabytes() {
    const WORLD: u32 = 64;
    let payloads = (0..WORLD)
        .map(|rank| rank_payload(rank, WORLD, &HOUR, &mut std::io::sink()).unwrap())
        .collect();
    let gathered = Gathered {
        world_size: WORLD,
        payloads,
        ..Gathered::default()
    };
    let dir = tempfile::tempdir().unwrap();
    report::report(&gathered, dir.path(), &AnalysisConfig::default()).unwrap();
    let size = |name: &str| std::fs::metadata(dir.path().join(name)).unwrap().len();
    let report: Report =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    assert!(report.session.duration_s > 3_000.0, "an hour");
    assert!(report.series.timelines.iter().all(|t| t.coalesced));
    assert!(
        size("report.html") < 5 << 20,
        "report.html: {} bytes",
        size("report.html")
    );
    // The trace holds each rank's first trace_max_stages stages.
    let limit = AnalysisConfig::default().trace_max_stages;
    let stages = cut_notice(&report, " stages past");
    let left_out = (24_000 - limit) * u64::from(WORLD);
    assert!(
        stages.message.starts_with(&format!("{left_out} stages")),
        "{}",
        stages.message
    );
    assert!(
        size("trace.json.gz") < 20 << 20,
        "trace.json.gz: {} bytes",
        size("trace.json.gz")
    );
}

/// At 4,096 ranks (512 hosts of 8) summary.txt is something a person reads:
/// the per-GPU and per-host tables become distributions with the extreme
/// ranks named, and every list is cut to its first entries with the rest
/// counted (report.json keeps them all).
#[test]
fn a_summary_of_4096_ranks_stays_under_200_lines() {
    const WORLD: u32 = 4_096;
    let small = support::synthetic::Shape {
        steps: 3,
        inner_per_step: 2,
        inner_ns: (1_000_000, 3_000_000),
        gpu_readings: 20,
        host_readings: 10,
        ..support::synthetic::BENCH
    };
    let payloads = (0..WORLD)
        .map(|rank| rank_payload(rank, WORLD, &small, &mut std::io::sink()).unwrap())
        .collect();
    let gathered = Gathered {
        world_size: WORLD,
        payloads,
        ..Gathered::default()
    };
    let mut report =
        rankscope_coordinator::analysis::analyze(&gathered, &AnalysisConfig::default());
    assert_eq!(
        report.gpus.len(),
        WORLD as usize,
        "report.json keeps every GPU"
    );
    // A rule at its edge on 40 GPUs: one line about them, not forty.
    for gpu in report.gpus.iter_mut().take(40) {
        gpu.bottlenecks.push(Bottleneck {
            kind: BottleneckKind::PowerCapped,
            evidence: "power at its cap in 61 % of readings".into(),
        });
    }
    let summary = report::summary(&report);
    let lines = summary.lines().count();
    assert!(lines < 200, "{lines} lines:\n{summary}");
    assert!(
        summary.contains("power_capped on 40 GPUs: r0 GPU 0, r1 GPU 1, r2 GPU 2 and 37 more"),
        "{summary}"
    );
    // And one recommendation about them, not forty.
    rankscope_coordinator::analysis::recommend::judge(&mut report);
    let told: Vec<_> = report
        .recommendations
        .iter()
        .filter(|r| r.category == "gpu")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0]
            .message
            .starts_with("40 GPUs on 5 hosts: power capped (rank 0 GPU 0"),
        "{}",
        told[0].message
    );
    // The GPUs as a distribution, the extremes named.
    assert!(summary.contains("4096 GPUs"), "{summary}");
    assert!(summary.contains("p95"), "{summary}");
    assert!(summary.contains("more hosts"), "{summary}");
}
