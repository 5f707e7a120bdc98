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
    let stage = &report["stages"][0];
    assert_eq!(stage["name"], "denoise_step");
    assert_eq!(stage["count"], 12);
}
