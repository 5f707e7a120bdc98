//! The MPI transport under real `mpirun` (Open MPI, installed by
//! scripts/test.sh): ranks oversubscribed on this machine gather their
//! payloads to rank 0 over MPI.
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../coordinator/tests/support/json.rs"]
mod json;
mod support;

/// Runs `mpirun` with `args` (program and its arguments included), writing
/// into `out`.
fn mpirun(args: &[&str], out: &Path, env: &[(&str, &str)]) -> Output {
    mpirun_command(args, out, env)
        .output()
        .expect("running mpirun (scripts/test.sh installs Open MPI)")
}

/// [`mpirun`] started, its output piped: the job runs on meanwhile.
fn start_mpirun(args: &[&str], out: &Path, env: &[(&str, &str)]) -> std::process::Child {
    mpirun_command(args, out, env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running mpirun (scripts/test.sh installs Open MPI)")
}

/// The `mpirun` command of [`mpirun`].
fn mpirun_command(args: &[&str], out: &Path, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new("mpirun");
    for (key, _) in std::env::vars() {
        if key.starts_with("RANKSCOPE_") {
            command.env_remove(key);
        }
    }
    command
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("RANKSCOPE_OUTPUT_DIR", out)
        .env("RANKSCOPE_GPU_SOURCE", "none")
        .env("RANKSCOPE_GATHER_TIMEOUT_S", "20")
        .envs(env.iter().copied())
        .arg("--oversubscribe")
        .args(args);
    command
}

/// The one session directory in `out` (beside any files a test left).
fn session_dir(out: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.into_iter().next().unwrap()
}

fn report(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("report.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The ranks `report` names as stragglers, in its order.
fn straggler_ranks(report: &serde_json::Value) -> Vec<u64> {
    report["stragglers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rank"].as_u64().unwrap())
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const RANK: &str = env!("CARGO_BIN_EXE_agent_only_rank");

#[test]
fn two_four_and_eight_ranks_gather_over_mpi_with_measured_offsets() {
    for ranks in [2u64, 4, 8] {
        let out = tempfile::tempdir().unwrap();
        let run = mpirun(&["-n", &ranks.to_string(), RANK], out.path(), &[]);
        assert!(run.status.success(), "{ranks} ranks: {}", text(&run.stderr));
        let report = report(&session_dir(out.path()));
        let session = &report["session"];
        assert_eq!(session["world_size"], ranks);
        assert_eq!(session["transport"], "mpi");
        assert_eq!(session["clock_sync"], "mpi-pingpong");
        let expected: Vec<u64> = (0..ranks).collect();
        assert_eq!(session["ranks_reporting"], serde_json::json!(expected));
        for rank in report["ranks"].as_array().unwrap() {
            assert!(rank["clock_offset_ns"].is_i64(), "measured: {rank}");
            assert!(rank["clock_round_trip_ns"].is_u64(), "{rank}");
            assert!(
                rank["clock_drift_ns"].is_i64(),
                "measured at finish too: {rank}"
            );
        }
        assert_eq!(report["ranks"][0]["clock_offset_ns"], 0);
        assert_eq!(
            report["stages"][0]["count"],
            3 * ranks,
            "every rank's stages"
        );
    }
}

#[test]
fn a_program_that_initialised_mpi_keeps_it() {
    for handed in [false, true] {
        let out = tempfile::tempdir().unwrap();
        let program = env!("CARGO_BIN_EXE_mpi_owned_rank");
        let mut args = vec!["-n", "3", program];
        if handed {
            args.push("--hand-communicator");
        }
        let run = mpirun(&args, out.path(), &[]);
        assert!(run.status.success(), "{}", text(&run.stderr));
        // MPI still worked after the session: the program's own reduction.
        assert!(
            text(&run.stdout).contains("ranks 3; report true"),
            "{}",
            text(&run.stdout)
        );
        let report = report(&session_dir(out.path()));
        assert_eq!(report["session"]["transport"], "mpi");
        assert_eq!(
            report["session"]["ranks_reporting"],
            serde_json::json!([0, 1, 2])
        );
    }
}

/// A program that initialised MPI at `MPI_THREAD_FUNNELED` and runs its
/// session on another thread: rankscope never calls MPI from that thread
/// (the session goes through the shared directory, with a notice), and
/// the report is whole.
#[test]
fn a_session_off_mpis_main_thread_below_serialized_goes_through_the_directory() {
    let out = tempfile::tempdir().unwrap();
    let program = env!("CARGO_BIN_EXE_mpi_owned_rank");
    let run = mpirun(
        &["-n", "3", program, "--funneled-session-on-thread"],
        out.path(),
        &[],
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(
        text(&run.stdout).contains("ranks 3; report true"),
        "{}",
        text(&run.stdout)
    );
    assert!(
        text(&run.stderr).contains("below MPI_THREAD_SERIALIZED"),
        "{}",
        text(&run.stderr)
    );
    let report = report(&session_dir(out.path()));
    assert_eq!(report["session"]["transport"], "dir");
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2])
    );
}

/// The report of `-n N` ranks (`args` and `env` given) of which rank
/// `dead` leaves without finishing, Open MPI told to let the others go on
/// (as a job whose launcher does not end it at the first failure).
fn report_without(dead: u32, args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let dead = dead.to_string();
    let mut all = vec!["--mca", "orte_abort_on_non_zero_status", "0"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[RANK, "--exit-rank", &dead]);
    let mut env = env.to_vec();
    env.push(("RANKSCOPE_GATHER_TIMEOUT_S", "6"));
    let run = mpirun(&all, out.path(), &env);
    let dir = session_dir(out.path());
    assert!(
        dir.join("report.json").exists(),
        "rank 0 reports: {}",
        text(&run.stderr)
    );
    report(&dir)
}

#[test]
fn a_rank_that_leaves_without_finishing_is_named_missing() {
    let report = report_without(2, &["-n", "4"], &[]);
    assert_eq!(report["session"]["world_size"], 4);
    assert_eq!(report["session"]["ranks_missing"], serde_json::json!([2]));
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 3])
    );
}

/// On 4 simulated nodes of 4: a dead leader is missing alone (its ranks
/// sent it their payloads, and rank 0 reads their spill files), and so is
/// a dead rank of another node; the rest report by the deadline, their
/// clocks measured.
#[test]
fn a_dead_leader_and_a_dead_rank_under_mpirun_are_named_missing() {
    let nodes = [("RANKSCOPE_SIMULATED_NODES", "4")];
    for (dead, missing) in [(4, vec![4]), (10, vec![10])] {
        let report = report_without(dead, &["-n", "16"], &nodes);
        let session = &report["session"];
        assert_eq!(session["gather_levels"], 2, "dead {dead}");
        assert_eq!(session["ranks_missing"], serde_json::json!(missing));
        let reporting: Vec<u32> = (0..16).filter(|r| !missing.contains(r)).collect();
        assert_eq!(session["ranks_reporting"], serde_json::json!(reporting));
        for rank in report["ranks"].as_array().unwrap() {
            assert!(rank["clock_offset_ns"].is_i64(), "measured: {rank}");
        }
    }
}

/// Rank 0 busy elsewhere until the others' finish has returned: a rank
/// whose payload (past MPI's eager size) rank 0 never takes stops waiting
/// at its deadline, says so, and keeps its payload in its spill file.
#[test]
fn a_rank_whose_payload_rank_0_never_takes_goes_on_at_its_deadline() {
    let out = tempfile::tempdir().unwrap();
    let run = mpirun(
        &["-n", "2", RANK, "--late-rank", "0", "--bulk", "20000"],
        out.path(),
        &[("RANKSCOPE_GATHER_TIMEOUT_S", "3")],
    );
    let stderr = text(&run.stderr);
    // Rank 1's finish returned while rank 0 still waited for it.
    assert!(!stderr.contains("had not finished"), "{stderr}");
    assert!(out.path().join("finished-1").exists(), "{stderr}");
    assert!(
        stderr.contains("rank 1: rank 0 did not take this rank's payload in time"),
        "{stderr}"
    );
    let dir = session_dir(out.path());
    let spill = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("rank-00001")
        })
        .expect("rank 1's spill file");
    let payload = rankscope_common::payload::decode(&std::fs::read(spill).unwrap()).unwrap();
    let metrics = payload
        .view::<rankscope_common::table::MetricsView>()
        .unwrap()
        .unwrap();
    assert!(metrics.len >= 20_000, "{} metric rows", metrics.len);
}

/// Rank 1 finishes its first session 7.5 s late, after rank 0 stopped
/// waiting for it (at 5 s) and went on to the second: its late payload,
/// left to MPI at its own deadline, is not taken as its payload of the
/// second session, which reports both ranks. (Rank 0's second session
/// waits for rank 1 until about 15 s; rank 1 comes at about 12.5 s.)
#[test]
fn a_payload_sent_after_its_session_ended_is_not_taken_for_the_next_one() {
    let out = tempfile::tempdir().unwrap();
    let args = [
        "-n",
        "2",
        RANK,
        "--sessions",
        "2",
        "--stalled-rank",
        "1",
        "--stall-ms",
        "7500",
    ];
    let run = mpirun(&args, out.path(), &[("RANKSCOPE_GATHER_TIMEOUT_S", "5")]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    // Both sessions share the launcher's directory: the second's report
    // is the one left.
    let report = report(&session_dir(out.path()));
    let second = &report["session"];
    assert_eq!(
        second["ranks_reporting"],
        serde_json::json!([0, 1]),
        "{second}\n{}",
        text(&run.stderr)
    );
    assert_eq!(second["skipped"], serde_json::json!([]), "{second}");
}

#[test]
fn a_rank_with_a_shifted_clock_is_realigned_within_the_measured_bound() {
    let out = tempfile::tempdir().unwrap();
    const SHIFT_NS: i64 = 5_000_000_000;
    let shift = format!("RANKSCOPE_CLOCK_SHIFT_NS={SHIFT_NS}");
    // Rank 1 runs with its wall clock 5 s ahead.
    let run = mpirun(
        &["-n", "1", RANK, ":", "-n", "1", "env", &shift, RANK],
        out.path(),
        &[],
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let report = report(&session_dir(out.path()));
    let rank1 = &report["ranks"][1];
    let offset = rank1["clock_offset_ns"].as_i64().unwrap();
    let bound = rank1["clock_round_trip_ns"].as_i64().unwrap() / 2;
    assert!(
        (offset - SHIFT_NS).abs() <= bound + 1_000_000,
        "offset {offset} ns, shift {SHIFT_NS} ns, bound {bound} ns"
    );
    // On the shared timeline the two ranks started together, not 5 s apart.
    let started = rank1["started_s"].as_f64().unwrap();
    assert!(
        started.abs() < 2.0,
        "rank 1 placed {started} s after rank 0"
    );
}

#[test]
fn rolling_windows_under_mpirun_each_get_a_report_of_every_rank() {
    let out = tempfile::tempdir().unwrap();
    let run = mpirun(
        &["-n", "4", RANK, "--steps", "10", "--slow-rank", "3"],
        out.path(),
        &[("RANKSCOPE_WINDOW_EVERY_STEPS", "5")],
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let dir = session_dir(out.path());
    assert_eq!(report(&dir)["session"]["transport"], "mpi");
    for index in [1, 2] {
        let window = report(&dir.join(format!("window-{index}")));
        assert_eq!(window["window"]["steps"], 5);
        assert_eq!(
            window["session"]["ranks_reporting"],
            serde_json::json!([0, 1, 2, 3]),
            "window {index}"
        );
        assert_eq!(straggler_ranks(&window), [3], "window {index}");
    }
}

/// A window asked for by `rankscope trigger` from another process while 4
/// ranks run under mpirun (rank 3 three times slower): its report holds
/// every rank and names rank 3; the job goes on and gathers over MPI.
#[test]
fn a_trigger_under_mpirun_gets_a_window_of_every_rank() {
    let out = tempfile::tempdir().unwrap();
    let job = start_mpirun(
        &["-n", "4", RANK, "--steps", "600", "--slow-rank", "3"],
        out.path(),
        &[],
    );
    let dir = live_session_dir(out.path());
    support::trigger(&dir, &["--steps", "10", "--wait", "--timeout", "60"]);
    let window = report(&dir.join("window-1"));
    let run = job.wait_with_output().unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(window["window"]["trigger"], "command");
    assert_eq!(
        window["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
    assert_eq!(straggler_ranks(&window), [3]);
    assert_eq!(report(&dir)["session"]["transport"], "mpi");
}

/// Ranks under mpirun that do not see rank 0's session directory (each
/// writes under a folder of its own, as on nodes without a shared file
/// system): rank 0 sends them, with the run's identity, the way to its
/// listener for window files, so a window asked for in rank 0's folder
/// holds every rank and names the straggler; the job still gathers over
/// MPI.
#[test]
fn ranks_apart_under_mpirun_take_part_in_windows_over_tcp() {
    let out = tempfile::tempdir().unwrap();
    let own_folder = r#"RANKSCOPE_OUTPUT_DIR="$0/$OMPI_COMM_WORLD_RANK" exec "$@""#;
    let out_dir = out.path().to_str().unwrap();
    let job = start_mpirun(
        &[
            "-n",
            "4",
            "sh",
            "-c",
            own_folder,
            out_dir,
            RANK,
            "--steps",
            "600",
            "--slow-rank",
            "3",
        ],
        out.path(),
        // The listener's address, as a job on several nodes would name it.
        &[("RANKSCOPE_ADDR", "127.0.0.1")],
    );
    let dir = live_session_dir(&out.path().join("0"));
    support::trigger(&dir, &["--steps", "10", "--wait", "--timeout", "60"]);
    let window = report(&dir.join("window-1"));
    let run = job.wait_with_output().unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(
        window["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3]),
        "{}",
        text(&run.stderr)
    );
    assert_eq!(straggler_ranks(&window), [3]);
    let session = report(&dir);
    assert_eq!(session["session"]["transport"], "mpi");
    assert_eq!(
        session["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
    // Rank 2 got the plan as a message (no plan file where it writes) and
    // wrote its window there.
    let own = session_dir(&out.path().join("2"));
    assert!(!own.join("control/plan-1.json").exists());
    assert!(own.join("window-1").is_dir());
}

/// Under mpirun, two simulated nodes of two ranks, each node writing under
/// a folder of its own: rank 3's window connection goes to its node's
/// leader, rank 2, which relays it, so that rank 0's listener for window
/// files (at RANKSCOPE_PORT) holds one connection while every rank runs,
/// and a window asked for in rank 0's folder holds every rank.
#[test]
fn node_leaders_relay_window_control_under_mpirun() {
    let out = tempfile::tempdir().unwrap();
    let node_folder = r#"RANKSCOPE_OUTPUT_DIR="$0/node-$((OMPI_COMM_WORLD_RANK / 2))" exec "$@""#;
    let out_dir = out.path().to_str().unwrap();
    let port = support::free_port();
    let mut job = start_mpirun(
        &[
            "-n",
            "4",
            "sh",
            "-c",
            node_folder,
            out_dir,
            RANK,
            "--steps",
            "2000",
        ],
        out.path(),
        &[
            ("RANKSCOPE_ADDR", "127.0.0.1"),
            ("RANKSCOPE_PORT", &port.to_string()),
            ("RANKSCOPE_SIMULATED_NODES", "2"),
        ],
    );
    let dir = live_session_dir(&out.path().join("node-0"));
    // Once the other ranks' mirrors are up (rank 1 shares rank 0's folder
    // and keeps none), while every rank runs.
    let mut settled = 0;
    while settled < 5 {
        let held = support::connections_to(port);
        let running = job.try_wait().unwrap().is_none();
        assert!(
            running,
            "the job ended while rank 0 held {held} connections, not one"
        );
        settled = if held == 1 { settled + 1 } else { 0 };
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    support::trigger(&dir, &["--steps", "10", "--wait", "--timeout", "60"]);
    let window = report(&dir.join("window-1"));
    assert_eq!(
        window["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
    let run = job.wait_with_output().unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(
        report(&dir)["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
}

/// The session directory in `out` once its rank 0 says the session runs
/// (`control/live`: a trigger is answered from then on).
fn live_session_dir(out: &Path) -> PathBuf {
    let started = std::time::Instant::now();
    loop {
        let live = std::fs::read_dir(out)
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().path())
            .find(|dir| dir.join("control/live").exists());
        if let Some(dir) = live {
            return dir;
        }
        assert!(started.elapsed().as_secs() < 60, "no session started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// 16 processes as 4 simulated nodes of 4 (RANKSCOPE_SIMULATED_NODES): each
/// node's leader takes its node's payloads over MPI and sends rank 0 one
/// digest; the report is the one-level report of the same payloads (their
/// spill files, aggregated).
#[test]
fn four_simulated_nodes_gather_in_two_levels_over_mpi() {
    let out = tempfile::tempdir().unwrap();
    let run = mpirun(
        &["-n", "16", RANK, "--steps", "4", "--slow-rank", "9"],
        out.path(),
        &[("RANKSCOPE_SIMULATED_NODES", "4")],
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let dir = session_dir(out.path());
    let two_level = report(&dir);
    let session = &two_level["session"];
    assert_eq!(session["transport"], "mpi");
    assert_eq!(session["gather_levels"], 2);
    assert_eq!(
        session["ranks_reporting"],
        serde_json::json!((0..16).collect::<Vec<u32>>())
    );
    assert_eq!(support::node_leaders(&two_level), [0, 4, 8, 12]);
    assert!(
        two_level["stragglers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["rank"] == 9),
        "{}",
        two_level["stragglers"]
    );
    let (one_level, two_level) = support::as_one_level(&dir, two_level);
    json::assert_same(&one_level, &two_level, 1e-9, "report");
}
