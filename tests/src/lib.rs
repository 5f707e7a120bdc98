//! Helpers for the workspace-level tests: the `rankscope` binary, built once
//! per test process, and a way to run it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The path of the `rankscope` binary, built (dev profile) on first use.
pub fn rankscope_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let output = Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "--message-format=json",
                "-p",
                "rankscope-coordinator",
                "--bin",
                "rankscope",
            ])
            .output()
            .expect("running cargo build for the rankscope binary");
        assert!(
            output.status.success(),
            "cargo build failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|message| message["target"]["name"] == "rankscope")
            .find_map(|message| message["executable"].as_str().map(PathBuf::from))
            .expect("cargo reported the rankscope executable")
    })
}

/// Runs `rankscope` with `args` and extra environment variables; launcher
/// variables of the test's own environment are cleared.
pub fn rankscope(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(rankscope_bin());
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("RANKSCOPE_") || key.starts_with("OMPI_") || key.starts_with("PMI") {
            command.env_remove(key);
        }
    }
    for var in ["RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID"] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("running rankscope")
}

/// Reads and parses a JSON file.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The one session directory under `out`.
pub fn session_dir(out: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .expect("output directory exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "one session directory in {}: {dirs:?}",
        out.display()
    );
    dirs.into_iter().next().unwrap()
}
