//! Helpers shared by the workspace tests: the rank program as a command
//! with a clean environment (alone, or as a torchrun rank), and free ports
//! for rank 0 to listen at.

#![allow(dead_code)] // each test file uses its own share

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// The `agent_only_rank` program, with the launcher and `RANKSCOPE_*`
/// variables of the test's own environment cleared, so that each test sets
/// exactly the ones it means.
pub fn rank_program() -> Command {
    clean(env!("CARGO_BIN_EXE_agent_only_rank"))
}

/// `program`, with the launcher and `RANKSCOPE_*` variables of the test's
/// own environment cleared.
pub fn clean(program: &str) -> Command {
    let mut command = Command::new(program);
    for (key, _) in std::env::vars() {
        if key.starts_with("RANKSCOPE_") || key.starts_with("OMPI_") || key.starts_with("PMI") {
            command.env_remove(key);
        }
    }
    for var in ["RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID"] {
        command.env_remove(var);
    }
    command
}

/// Rank `rank` of a `world`-rank job on one machine, with the variables
/// torchrun sets (rank 0 listens at `master_port` + 1), writing under
/// `out`, without GPU telemetry; its output piped.
pub fn torchrun_rank(rank: u32, world: u32, out: &Path, master_port: u16) -> Command {
    as_torchrun_rank(rank_program(), rank, world, out, master_port)
}

/// `command` as [`torchrun_rank`] sets it up.
pub fn as_torchrun_rank(
    mut command: Command,
    rank: u32,
    world: u32,
    out: &Path,
    master_port: u16,
) -> Command {
    command
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_WORLD_SIZE", world.to_string())
        .env("GROUP_RANK", "0")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", master_port.to_string())
        .env("TORCHELASTIC_RUN_ID", "agent-only-test")
        .env("TORCHELASTIC_RESTART_COUNT", "0")
        .env("RANKSCOPE_OUTPUT_DIR", out)
        .env("RANKSCOPE_GPU_SOURCE", "none")
        .env("RANKSCOPE_GATHER_TIMEOUT_S", "30")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// A free port below the ephemeral range: a client that retries connecting
/// to a port in that range can end up connected to itself (a TCP
/// self-connect) and take the port from the listener to come.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 5_000) as u16;
    loop {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % 5_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Waits for every child and checks that each succeeded, or exited with
/// one of the `allowed` codes (a rank the test made leave).
pub fn wait_all(children: Vec<Child>, allowed: &[i32]) -> Vec<Output> {
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    for (i, output) in outputs.iter().enumerate() {
        let code = output.status.code();
        assert!(
            output.status.success() || code.is_some_and(|c| allowed.contains(&c)),
            "child {i} ({code:?}): {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    outputs
}

/// The one session directory a job wrote under `out`.
pub fn only_session_dir(out: &Path) -> std::path::PathBuf {
    let dirs: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "one session directory: {dirs:?}");
    dirs.into_iter().next().unwrap()
}

/// The `rankscope` command, built beside this test by `cargo test
/// --workspace` (as the README's test command runs it).
pub fn rankscope_cli() -> std::path::PathBuf {
    let target = Path::new(env!("CARGO_BIN_EXE_agent_only_rank"))
        .parent()
        .unwrap()
        .to_path_buf();
    let cli = target.join("rankscope");
    assert!(
        cli.exists(),
        "{} is not built: run `cargo build -p rankscope-cli` (cargo test --workspace builds it)",
        cli.display()
    );
    cli
}

/// The one-level report of the spill files in `session_dir` (`rankscope
/// aggregate --report-only`), and `two_level`, each without what says how
/// it was gathered (`session.gather_levels`, the notice of what a
/// two-level gather's rows hold): two reports of the same payloads that
/// must then be the same.
#[allow(dead_code)] // the two-level tests use it
pub fn as_one_level(
    session_dir: &Path,
    mut two_level: serde_json::Value,
) -> (serde_json::Value, serde_json::Value) {
    let aggregated = tempfile::tempdir().unwrap();
    let one = Command::new(rankscope_cli())
        .args(["aggregate", "--report-only", "--reports-dir"])
        .arg(session_dir)
        .arg("--output")
        .arg(aggregated.path())
        .output()
        .unwrap();
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    let text = std::fs::read(aggregated.path().join("report.json")).unwrap();
    let mut one_level: serde_json::Value = serde_json::from_slice(&text).unwrap();
    for report in [&mut one_level, &mut two_level] {
        let session = report["session"].as_object_mut().unwrap();
        session.remove("gather_levels");
        let notices = session["notices"].as_array_mut().unwrap();
        notices.retain(|n| {
            !n["message"]
                .as_str()
                .unwrap()
                .starts_with("gathered in two levels")
        });
    }
    (one_level, two_level)
}

/// The leader of each node `report.json`'s session lists, in order.
#[allow(dead_code)] // the two-level tests use it
pub fn node_leaders(report: &serde_json::Value) -> Vec<u64> {
    report["session"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["leader"].as_u64().unwrap())
        .collect()
}

/// `rankscope trigger --dir DIR ARGS…`, which must succeed: what it
/// printed.
pub fn trigger(dir: &Path, args: &[&str]) -> String {
    let dir = dir.to_str().unwrap();
    rankscope_ok(&[&["trigger", "--dir", dir], args].concat(), None)
}

/// `rankscope ARGS…` run, the job's token `token` in `RANKSCOPE_TOKEN`
/// (unset where `None`).
pub fn rankscope(args: &[&str], token: Option<&str>) -> Output {
    let mut command = Command::new(rankscope_cli());
    command.args(args).env_remove("RANKSCOPE_TOKEN");
    if let Some(token) = token {
        command.env("RANKSCOPE_TOKEN", token);
    }
    command.output().unwrap()
}

/// [`rankscope`]: whether it succeeded, and what it printed on its standard
/// output and its standard error.
pub fn rankscope_said(args: &[&str], token: Option<&str>) -> (bool, String, String) {
    let output = rankscope(args, token);
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (
        output.status.success(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// [`rankscope`], which must succeed: what it printed.
pub fn rankscope_ok(args: &[&str], token: Option<&str>) -> String {
    let output = rankscope(args, token);
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    printed
}

/// Connections to local TCP port `port` established now, counted at the
/// listening end (`/proc/net/tcp`).
pub fn connections_to(port: u16) -> usize {
    const ESTABLISHED: &str = "01";
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields[1].rsplit(':').next().unwrap();
            u16::from_str_radix(local_port, 16) == Ok(port) && fields[3] == ESTABLISHED
        })
        .count()
}

/// Asserts that report.json `report`'s time account adds up: each rank's
/// categories, and the job's, to its wall time (0.1 % or 1 ms), none
/// negative; and the findings' costs to the job's wall at most. Returns
/// the account.
#[allow(dead_code)] // each test file uses its own share
pub fn assert_account_adds_up(report: &serde_json::Value) -> &serde_json::Value {
    let account = &report["time_account"];
    let ranks = account["ranks"].as_array().expect("time_account.ranks");
    for entry in ranks.iter().chain([&account["job"]]) {
        let wall = entry["wall_s"].as_f64().unwrap();
        let categories = entry["categories"].as_object().unwrap();
        let mut total = 0.0;
        for (name, seconds) in categories {
            if let Some(s) = seconds.as_f64() {
                assert!(s >= 0.0, "{name} {s}: {entry:#}");
                total += s;
            }
        }
        assert!(
            (total - wall).abs() <= (wall * 1e-3).max(1e-3),
            "adds up to {total} of {wall}: {entry:#}"
        );
    }
    let wall = account["job"]["wall_s"].as_f64().unwrap();
    let costs: f64 = report["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["cost_s"].as_f64())
        .sum();
    assert!(
        costs <= wall * (1.0 + 1e-9),
        "findings cost {costs} of {wall}"
    );
    account
}
