//! The verdict on real lockstep jobs: four Rust rank processes with the
//! variables torchrun sets, meeting every step at a real barrier inside
//! `attention` (recorded as a collective, or not, as a Rust job may leave
//! it), with one rank planted slow, a one-off stall, or a warm-up step.

use std::path::Path;

mod support;

/// Runs `tests/src/bin/lockstep_rank.rs` as 4 ranks with `args`; rank 0's
/// report.
fn lockstep_job(args: &[&str]) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let barrier = tempfile::tempdir().unwrap();
    let barrier = barrier.path();
    let master_port = support::free_port() - 1;
    let children = (0..4)
        .map(|rank| {
            let mut command = support::as_torchrun_rank(
                support::clean(env!("CARGO_BIN_EXE_lockstep_rank")),
                rank,
                4,
                out.path(),
                master_port,
            );
            command.arg("--barrier").arg(barrier).args(args);
            command.spawn().unwrap()
        })
        .collect();
    support::wait_all(children, &[]);
    let dir = support::only_session_dir(out.path());
    report_of(&dir)
}

fn report_of(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("report.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The warnings that blame a rank.
fn blamed(report: &serde_json::Value) -> Vec<String> {
    report["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["severity"] != "info")
        .map(|r| r["message"].as_str().unwrap().to_string())
        .filter(|message| message.contains("holds the job back"))
        .collect()
}

/// Stage `name` of the report.
fn stage<'r>(report: &'r serde_json::Value, name: &str) -> &'r serde_json::Value {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

/// Whether stage `s` mostly waits: its ranks' wait is over half their
/// time in it.
fn mostly_waits(s: &serde_json::Value) -> bool {
    s["wait_s"]["avg"].as_f64().unwrap() > 0.5 * s["total_s"]["avg"].as_f64().unwrap()
}

#[test]
fn the_rank_the_others_wait_for_at_a_real_barrier_is_the_verdict() {
    let report = lockstep_job(&["--slow-rank", "2", "--warmup-ms", "200"]);
    let verdict = &report["verdict"];
    assert_eq!(verdict["kind"], "straggler", "{verdict}");
    assert_eq!(verdict["ranks"], serde_json::json!([2]), "{verdict}");
    assert_eq!(verdict["stage"], "attention", "{verdict}");
    assert_eq!(verdict["collective"], "barrier", "{verdict}");
    // The others wait in `barrier`: measured as waiting, and no rank of
    // theirs is a straggler for it.
    let barrier = stage(&report, "barrier");
    assert!(mostly_waits(barrier), "{barrier}");
    for s in report["stragglers"].as_array().unwrap() {
        assert_eq!(s["rank"], 2, "{s}");
    }
    let blamed = blamed(&report);
    assert_eq!(blamed.len(), 1, "{blamed:?}");
    let warmup: Vec<&serde_json::Value> = report["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "warmup")
        .collect();
    assert_eq!(warmup.len(), 1, "{}", report["events"]);
    assert_eq!(warmup[0]["step"], 0);
}

#[test]
fn a_balanced_job_with_a_stall_blames_no_rank_recorded_or_not() {
    for unrecorded in [false, true] {
        let mut args = vec!["--stall-rank", "1", "--stall-step", "7"];
        if unrecorded {
            args.push("--unrecorded");
        }
        let report = lockstep_job(&args);
        assert_eq!(
            blamed(&report),
            Vec::<String>::new(),
            "unrecorded: {unrecorded}"
        );
        let stalls: Vec<(serde_json::Value, serde_json::Value)> = report["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "stall" && e["step"] == 7)
            .map(|e| (e["ranks"].clone(), e["stage"].clone()))
            .collect();
        assert_eq!(
            stalls,
            [(serde_json::json!([1]), serde_json::json!("mlp"))],
            "unrecorded: {unrecorded}: {}",
            report["events"]
        );
    }
}

#[test]
fn without_recorded_collectives_a_stage_named_for_one_holds_the_waits_and_lockstep_agrees() {
    let report = lockstep_job(&["--slow-rank", "3", "--unrecorded"]);
    let verdict = &report["verdict"];
    assert_eq!(verdict["kind"], "straggler", "{verdict}");
    assert_eq!(verdict["ranks"], serde_json::json!([3]), "{verdict}");
    // No collective recorded: the stage named for one holds the waits.
    let barrier = stage(&report, "barrier");
    assert!(mostly_waits(barrier), "{barrier}");
    assert_eq!(barrier["wait_s"]["min_rank"], 3, "{barrier}");
    let blamed = blamed(&report);
    assert_eq!(blamed.len(), 1, "{blamed:?}");
    assert!(blamed[0].starts_with("rank 3 "), "{blamed:?}");
    assert_eq!(verdict["stage"], "attention", "{verdict}");
    let lockstep = report["lockstep"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["stage"] == "attention")
        .unwrap();
    let most = lockstep["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|r| r["slowest_calls"].as_u64())
        .unwrap();
    assert_eq!(most["rank"], 3, "{lockstep}");
}
