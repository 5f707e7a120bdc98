//! A job on several nodes gathers in two levels over TCP: 16 real processes
//! as 4 simulated nodes of 4 (`rankscope launch --nodes 4`), each node's
//! leader meeting its node's ranks at their rendezvous, taking their
//! payloads over loopback and sending rank 0 one digest. The report is the one-level report of the same payloads (their
//! spill files, aggregated), and a dead leader loses only itself.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

#[path = "../../coordinator/tests/support/json.rs"]
mod json;
mod support;
use json::assert_same;

/// Runs `rankscope launch --nodes 4 -n 16` of the agent-only rank program
/// with `args` and the `RANKSCOPE_*` variables of `envs`, writing into
/// `out`, its gather given `timeout_s`.
fn launch(out: &Path, timeout_s: &str, args: &[&str], envs: &[(&str, &str)]) -> Output {
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
        .envs(envs.iter().copied())
        .output()
        .unwrap()
}

/// The ranks with rows in raw/'s stage table `path`, each once, in order.
fn stage_rows_ranks(path: &Path) -> Vec<u32> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt32Type;
    let file = std::fs::File::open(path).unwrap();
    let mut ranks: Vec<u32> = arrow_ipc::reader::FileReader::try_new(file, None)
        .unwrap()
        .flat_map(|batch| {
            let batch = batch.unwrap();
            let column = batch.column_by_name("rank").unwrap();
            column.as_primitive::<UInt32Type>().values().to_vec()
        })
        .collect();
    ranks.dedup();
    ranks
}

/// The report.json in `dir`.
fn report_in(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

#[test]
fn four_nodes_gather_in_two_levels_and_report_what_one_level_would() {
    let out = tempfile::tempdir().unwrap();
    // Ranks 6 and 13, of nodes 1 and 3, named to trace.
    let traced = [("RANKSCOPE_TRACE_RANKS", "6,13")];
    let run = launch(
        out.path(),
        "60",
        &["--steps", "6", "--slow-rank", "9"],
        &traced,
    );
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
    // What trace.json.gz and raw/ hold, said: rank 0's node, the busiest
    // rank of every other (node 2's: the slow rank 9) and the ranks named.
    let notices = session["notices"].as_array().unwrap();
    let rows = notices
        .iter()
        .filter_map(|n| n["message"].as_str())
        .find(|m| m.contains("hold the ranks whose payloads rank 0 took itself (0-3) and "))
        .unwrap_or_else(|| panic!("{notices:?}"));
    assert!(rows.contains("`trace_ranks` names"), "{rows}");
    let processes = json::trace_process_names(&dir.join("trace.json.gz"));
    // Node 0's four ranks, one busiest rank of each other node, and the
    // two named where they are not their node's busiest.
    assert!(
        (4 + 3..=4 + 3 + 2).contains(&processes.len()),
        "{processes:?}"
    );
    for rank in [
        "rank 9 @ simulated-node-2",
        "rank 6 @ simulated-node-1",
        "rank 13 @ simulated-node-3",
    ] {
        assert!(
            processes.iter().any(|p| p == rank),
            "{rank} in {processes:?}"
        );
    }
    let raw_ranks = stage_rows_ranks(&dir.join("raw/stages.arrow"));
    for rank in [6, 9, 13] {
        assert!(
            raw_ranks.contains(&rank),
            "rank {rank} in raw/: {raw_ranks:?}"
        );
    }
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

/// A dead leader loses no rank but itself: where it died before its
/// node's ranks sent their payloads, they find it gone and send rank 0
/// theirs; where it died holding them, rank 0 reads its node's spill
/// files. A dead rank of a live leader's node is named missing alone.
#[test]
fn a_dead_leader_loses_only_itself_and_a_dead_rank_is_named_missing() {
    // Rank 4 leads node 1, and rank 10 is a rank of node 2 (led by 8).
    let cases: [(&[&str], u32); 3] = [
        (&["--steps", "3", "--exit-at-step", "0"], 4),
        (&[], 4),
        (&[], 10),
    ];
    for (args, dead) in cases {
        let out = tempfile::tempdir().unwrap();
        let dead_arg = dead.to_string();
        let mut args = args.to_vec();
        args.extend(["--exit-rank", &dead_arg]);
        let run = launch(out.path(), "8", &args, &[]);
        assert!(!run.status.success(), "rank {dead} died");
        let dir = support::only_session_dir(out.path());
        let report = report_in(&dir);
        let session = &report["session"];
        assert_eq!(session["gather_levels"], 2, "dead {dead} {args:?}");
        assert_eq!(
            session["ranks_missing"],
            serde_json::json!([dead]),
            "{args:?}"
        );
        let reporting: Vec<u32> = (0..16).filter(|&r| r != dead).collect();
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
