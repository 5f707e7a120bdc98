//! A program that depends on the agent alone, run as 4 real processes with
//! the variables torchrun sets, leaves one report, written by rank 0.

use std::path::PathBuf;

mod support;

#[test]
fn four_torchrun_ranks_linking_only_the_agent_leave_one_report() {
    let out = tempfile::tempdir().unwrap();
    // Rank 0 listens at MASTER_PORT + 1.
    let master_port = support::free_port() - 1;
    let children: Vec<_> = (0..4)
        .map(|rank| {
            support::torchrun_rank(rank, 4, out.path(), master_port)
                // The job's layout, which no trace gives here.
                .env("RANKSCOPE_PARALLEL_LAYOUT", "tp=2,dp=2")
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<_> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    for (rank, output) in outputs.iter().enumerate() {
        assert!(
            output.status.success(),
            "rank {rank}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let rank0 = String::from_utf8_lossy(&outputs[0].stdout);
    assert!(
        rank0.contains("report.json"),
        "rank 0 wrote the report: {rank0}"
    );
    for output in &outputs[1..] {
        assert!(output.stdout.is_empty(), "only rank 0 reports");
    }

    let sessions: Vec<PathBuf> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let dir = &sessions[0];
    assert!(
        dir.ends_with("agent-only-agent-only-test"),
        "{}",
        dir.display()
    );
    let mut reports: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("report"))
        .collect();
    reports.sort();
    assert_eq!(reports, ["report.html", "report.json"]);

    let text = std::fs::read_to_string(dir.join("report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let session = &report["session"];
    assert_eq!(session["world_size"], 4);
    assert_eq!(session["ranks_reporting"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(session["launcher"], "torchrun");
    let run = session["run_id"].as_str().unwrap();
    assert!(
        run.starts_with("agent-only-test.0~"),
        "the launcher's run, this session: {run}"
    );
    // torchrun's variables: the ranks gathered over TCP to rank 0.
    assert_eq!(session["transport"], "tcp");
    assert_eq!(session["clock_sync"], "tcp-pingpong");
    assert_eq!(
        session["endpoint"],
        format!("127.0.0.1:{}", master_port + 1)
    );
    for rank in report["ranks"].as_array().unwrap() {
        assert!(rank["clock_offset_ns"].is_i64(), "measured: {rank}");
    }
    // Each rank placed by the layout: TP neighbours are adjacent ranks.
    let placed: Vec<String> = report["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rank| {
            let coords: Vec<rankscope_common::parallel::ParallelCoord> =
                serde_json::from_value(rank["parallel"].clone()).unwrap();
            rankscope_common::parallel::label(&coords)
        })
        .collect();
    assert_eq!(
        placed,
        [
            "tp 0/2 · dp 0/2",
            "tp 1/2 · dp 0/2",
            "tp 0/2 · dp 1/2",
            "tp 1/2 · dp 1/2"
        ]
    );
    let stage = &report["stages"][0];
    assert_eq!(stage["name"], "denoise_step");
    assert_eq!(stage["count"], 12);
}

/// Two ranks through the shared directory: without a run identity the
/// report names the files it judged this run's by their age alone; with
/// one (RANKSCOPE_RUN_ID) none is.
#[test]
fn a_directory_gather_without_a_run_id_names_the_files_judged_by_age() {
    for run_id in [None, Some("launch-7")] {
        let out = tempfile::tempdir().unwrap();
        let children: Vec<_> = (0..2)
            .map(|rank| {
                let mut command = support::rank_program();
                command
                    .env("RANKSCOPE_RANK", rank.to_string())
                    .env("RANKSCOPE_WORLD_SIZE", "2")
                    .env("RANKSCOPE_SESSION_ID", "by-age")
                    .env("RANKSCOPE_TRANSPORT", "dir")
                    .env("RANKSCOPE_OUTPUT_DIR", out.path())
                    .env("RANKSCOPE_GPU_SOURCE", "none")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped());
                if let Some(run_id) = run_id {
                    command.env("RANKSCOPE_RUN_ID", run_id);
                }
                command.spawn().unwrap()
            })
            .collect();
        support::wait_all(children, &[]);
        let session = support::only_session_dir(out.path());
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(session.join("report.json")).unwrap()).unwrap();
        assert_eq!(
            report["session"]["ranks_reporting"],
            serde_json::json!([0, 1])
        );
        let judged = report["session"]["judged_by_age"].as_array().unwrap();
        match run_id {
            None => {
                // Rank 1's file; rank 0's own payload came from memory.
                assert_eq!(judged.len(), 1, "{judged:?}");
                assert!(judged[0].as_str().unwrap().contains("rank-00001"));
                let summary = std::fs::read_to_string(session.join("summary.txt")).unwrap();
                assert!(summary.contains("Judged this run's by their age alone"));
            }
            Some(_) => assert!(judged.is_empty(), "{judged:?}"),
        }
    }
}

/// Four ranks launched as two simulated nodes (`rankscope launch --nodes
/// 2`): the report names each rank's node, and lists the nodes with their
/// leaders and ranks.
#[test]
fn ranks_launched_as_simulated_nodes_are_reported_by_node() {
    let out = tempfile::tempdir().unwrap();
    let mut launch = std::process::Command::new(support::rankscope_cli());
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RANKSCOPE_")) {
        launch.env_remove(key);
    }
    let run = launch
        .args(["launch", "--nodes", "2", "-n", "4", "--"])
        .arg(env!("CARGO_BIN_EXE_agent_only_rank"))
        .env("RANKSCOPE_OUTPUT_DIR", out.path())
        .env("RANKSCOPE_GPU_SOURCE", "none")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let dir = support::only_session_dir(out.path());
    let text = std::fs::read_to_string(dir.join("report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let hosts: Vec<&str> = report["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    let node = |n: u32| format!("simulated-node-{n}");
    assert_eq!(hosts, [node(0), node(0), node(1), node(1)]);
    assert_eq!(
        report["session"]["nodes"],
        serde_json::json!([
            {"name": node(0), "leader": 0, "ranks": [0, 1]},
            {"name": node(1), "leader": 2, "ranks": [2, 3]}
        ])
    );
}
