//! `rankscope demo --launcher mpirun`: the simulated job under a real
//! mpirun, its ranks gathering over MPI.
#![cfg(feature = "mpi")]

mod support;

use support::{demo, read_json};

#[test]
fn the_demo_runs_under_mpirun_and_gathers_over_mpi() {
    let out = tempfile::tempdir().unwrap();
    let (_, dir) = demo(out.path(), &["--launcher", "mpirun"]);
    let report = read_json(&dir.join("report.json"));
    assert_eq!(report["session"]["transport"], "mpi");
    assert_eq!(report["session"]["launcher"], "openmpi");
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
    let straggler = report["stragglers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["stage"] == "vae_decode" && s["rank"] == 2);
    assert!(straggler, "{}", report["stragglers"]);
}
