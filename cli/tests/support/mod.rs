//! Helpers for the command-line tests: run the `rankscope` binary cargo
//! built for this package, read what it wrote.

#![allow(dead_code)] // each test file uses its own share

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `rankscope` binary under test.
pub fn rankscope_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_rankscope"))
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

/// Runs `rankscope demo ARGS --out OUT` with simulated GPUs (the same
/// everywhere, NVML or not); asserts it succeeded and returns what it
/// printed and its session directory.
pub fn demo(out: &Path, args: &[&str]) -> (Output, PathBuf) {
    let mut all = vec!["demo"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--out", out.to_str().unwrap()]);
    let run = rankscope(&all, &[("RANKSCOPE_GPU_SOURCE", "simulated")]);
    assert!(
        run.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let dir = session_dir(out);
    (run, dir)
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

/// The one spill file of `rank` in the session directory `dir`.
pub fn spill_file(dir: &Path, rank: u32) -> PathBuf {
    let prefix = format!("rank-{rank:05}.");
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".rsp")
        })
        .collect();
    assert_eq!(files.len(), 1, "one spill file of rank {rank}: {files:?}");
    files.into_iter().next().unwrap()
}

/// Whether `dir` holds any spill file of `rank`.
pub fn has_spill_file(dir: &Path, rank: u32) -> bool {
    let prefix = format!("rank-{rank:05}.");
    std::fs::read_dir(dir).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(&prefix)
    })
}
pub mod browser;
