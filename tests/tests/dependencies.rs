//! The crate boundaries: the coordinator (what rank 0 and `rankscope
//! aggregate` run) depends on the data model only, never on the agent, NVML,
//! host sampling or the command line.

use std::process::Command;

#[test]
fn the_coordinator_depends_on_neither_the_agent_nor_nvml() {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "rankscope-coordinator",
            "--edges",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("running cargo tree");
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(crates.contains(&"rankscope-common"), "{tree}");
    for forbidden in ["rankscope", "nvml-wrapper", "sysinfo", "clap", "anyhow"] {
        assert!(
            !crates.contains(&forbidden),
            "rankscope-coordinator depends on {forbidden}:\n{tree}"
        );
    }
}
