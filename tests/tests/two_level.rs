//! A job on several nodes gathers in two levels over TCP: 16 real processes
//! as 4 simulated nodes of 4 (`rankscope launch --nodes 4`), each node's
//! leader meeting its node's ranks at their rendezvous, taking their
//! payloads over loopback and sending rank 0 one digest. The report is the one-level report of the same payloads (their
//! spill files, aggregated), and a dead leader or a dead rank is named
//! missing by the deadline.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

#[path = "../../coordinator/tests/support/json.rs"]
mod json;
mod support;
use json::assert_same;

/// Runs `rankscope launch --nodes 4 -n 16` of the agent-only rank program
/// with `args`, writing into `out`, its gather given `timeout_s`.
fn launch(out: &Path, timeout_s: &str, args: &[&str]) -> Output {
    let mut launch = Command::new(support::rankscope_cli());
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RANKSCOPE_")) {
        launch.env_remove(key);
    }
    launch
        .args(["launch", "--nodes", "4", "-n", "16", "--"])
        .arg(env!("CARGO_BIN_EXE_agent_only_rank"))
        .args(args)
        .env("RANKSCOPE_OUTPUT_DIR", out)
        .env("RANKSCOPE_GPU_SOURCE", "none")
        .env("RANKSCOPE_GATHER_TIMEOUT_S", timeout_s)
        .output()
        .unwrap()
}

/// The report.json in `dir`.
fn report_in(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

#[test]
fn four_nodes_gather_in_two_levels_and_report_what_one_level_would() {
    let out = tempfile::tempdir().unwrap();
    let run = launch(out.path(), "60", &["--steps", "6", "--slow-rank", "9"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let dir = support::only_session_dir(out.path());
    let two_level = report_in(&dir);
    let session = &two_level["session"];
    assert_eq!(session["gather_levels"], 2);
    assert_eq!(session["transport"], "tcp");
    assert_eq!(
        session["ranks_reporting"],
        serde_json::json!((0..16).collect::<Vec<u32>>())
    );
    assert_eq!(support::node_leaders(&two_level), [0, 4, 8, 12]);
    // Every rank's clock offset measured: the other nodes' ranks through
    // their leaders'.
    for rank in two_level["ranks"].as_array().unwrap() {
        assert!(rank["clock_offset_ns"].is_i64(), "measured: {rank}");
    }
    // What trace.json.gz and raw/ hold, said: rank 0's node, and the
    // busiest rank of every other (node 2's: the slow rank 9).
    let notices = session["notices"].as_array().unwrap();
    assert!(
        notices
            .iter()
            .any(|n| n["message"].as_str().unwrap().contains(
                "hold the ranks whose payloads rank 0 took itself (0-3) and the busiest rank of 3 \
             other node(s)"
            )),
        "{notices:?}"
    );
    let trace =
        flate2::read::GzDecoder::new(std::fs::File::open(dir.join("trace.json.gz")).unwrap());
    let trace: Value = serde_json::from_reader(trace).unwrap();
    let processes: Vec<&str> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(processes.len(), 4 + 3, "{processes:?}");
    assert!(
        processes.contains(&"rank 9 @ simulated-node-2"),
        "{processes:?}"
    );
    assert!(
        two_level["stragglers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["rank"] == 9 && s["stage"] == "denoise_step"),
        "{}",
        two_level["stragglers"]
    );

    // One level over the same payloads: every rank's spill file.
    let (one_level, two_level) = support::as_one_level(&dir, two_level);
    assert_same(&one_level, &two_level, 1e-9, "report");
}

#[test]
fn a_dead_leader_and_a_dead_rank_are_named_missing_by_the_deadline() {
    // Rank 4 leads node 1, and rank 10 is a rank of node 2 (led by 8).
    for (dead, missing) in [(4, vec![4, 5, 6, 7]), (10, vec![10])] {
        let out = tempfile::tempdir().unwrap();
        let run = launch(out.path(), "8", &["--exit-rank", &dead.to_string()]);
        assert!(!run.status.success(), "rank {dead} died");
        let dir = support::only_session_dir(out.path());
        let report = report_in(&dir);
        let session = &report["session"];
        assert_eq!(session["gather_levels"], 2, "dead {dead}");
        assert_eq!(session["ranks_missing"], serde_json::json!(missing));
        let reporting: Vec<u32> = (0..16).filter(|r| !missing.contains(r)).collect();
        assert_eq!(session["ranks_reporting"], serde_json::json!(reporting));
    }
}

/// Ranks laid out cyclically over 2 nodes of 4 (srun's
/// `--distribution=cyclic`: ranks 0, 2, 4, 6 on one node): a layout by
/// node of consecutive ranks does not hold, so each rank that cannot
/// reach a leader sends rank 0 its payload, and every rank is reported.
#[test]
fn ranks_not_laid_out_by_node_all_reach_rank_0() {
    let out = tempfile::tempdir().unwrap();
    let master_port = support::free_port() - 1;
    let children = (0..8u32)
        .map(|rank| {
            let mut command = support::torchrun_rank(rank, 8, out.path(), master_port);
            command
                .env("LOCAL_RANK", (rank / 2).to_string())
                .env("LOCAL_WORLD_SIZE", "4")
                .env("RANKSCOPE_NODE", format!("node-{}", rank % 2));
            command.spawn().unwrap()
        })
        .collect();
    support::wait_all(children, &[]);
    let report = report_in(&support::only_session_dir(out.path()));
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!((0..8).collect::<Vec<u32>>())
    );
    assert!(report["session"]["skipped"].as_array().unwrap().is_empty());
}
