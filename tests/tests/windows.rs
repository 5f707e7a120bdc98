//! Windows of a running session, with 4 real rank processes under
//! torchrun's variables: rolling windows every N steps, and a window asked
//! for by `rankscope trigger` from another process while the job runs.
//! Each gets its own cross-rank report in `<session dir>/window-<k>/`; the
//! session's own report still covers every step.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

/// The 4 ranks of a job running `steps` steps (rank 3 three times slower),
/// with `env` set on each.
fn job(out: &Path, steps: u32, env: &[(&str, &str)]) -> Vec<Child> {
    job_with(out, steps, &[], env)
}

/// [`job`], the rank program given `args` too.
fn job_with(out: &Path, steps: u32, args: &[&str], env: &[(&str, &str)]) -> Vec<Child> {
    let master_port = support::free_port() - 1;
    (0..4)
        .map(|rank| {
            support::torchrun_rank(rank, 4, out, master_port)
                .args(["--steps", &steps.to_string(), "--slow-rank", "3"])
                .args(args)
                .envs(env.iter().copied())
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Every rank's output, each having succeeded (or, rank 3 of a test that
/// makes a rank leave, exited 3).
fn wait_for(children: Vec<Child>) -> Vec<Output> {
    support::wait_all(children, &[3])
}

/// The one session directory under `out`, once it exists.
fn session_dir(out: &Path) -> PathBuf {
    let started = Instant::now();
    loop {
        let dirs: Vec<PathBuf> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        match dirs.as_slice() {
            [dir] => return dir.clone(),
            [] if started.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => panic!("one session directory in {}: {dirs:?}", out.display()),
        }
    }
}

/// The one session directory under `out`, once its rank 0 says the
/// session runs (`control/live`: a trigger is answered from then on).
fn live_session_dir(out: &Path) -> PathBuf {
    let dir = session_dir(out);
    let started = Instant::now();
    while !dir.join("control/live").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no live session"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    dir
}

/// The report in `dir`, once written (within a minute).
fn read_report_when_written(dir: &Path) -> Value {
    let started = Instant::now();
    while !dir.join("report.json").is_file() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Written atomically: whole once there.
    read_report(dir)
}

fn read_report(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("report.json"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join("report.json").display()));
    serde_json::from_str(&text).unwrap()
}

/// `rankscope top TARGET… --json` (the job's token `token`) until every
/// rank shares its status (the others may start their sessions after rank
/// 0 made the directory): that view.
fn view_of_every_rank(target: &[&str], token: Option<&str>) -> Value {
    let started = Instant::now();
    loop {
        let printed = support::rankscope_ok(&[&["top"], target, &["--json"]].concat(), token);
        let view: Value = serde_json::from_str(printed.trim()).unwrap();
        if view["missing"] == serde_json::json!([]) {
            return view;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{view}");
    }
}

/// Calls of `stage` across every rank of `report`.
fn calls(report: &Value, stage: &str) -> u64 {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == stage)
        .unwrap_or_else(|| panic!("stage {stage} in {:#}", report["stages"]))["count"]
        .as_u64()
        .unwrap()
}

fn straggler_ranks(report: &Value, stage: &str) -> Vec<u64> {
    report["stragglers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["stage"] == stage)
        .map(|s| s["rank"].as_u64().unwrap())
        .collect()
}

#[test]
fn rolling_windows_each_get_a_report_of_every_rank_and_the_straggler() {
    let out = tempfile::tempdir().unwrap();
    let outputs = wait_for(job(
        out.path(),
        12,
        &[("RANKSCOPE_WINDOW_EVERY_STEPS", "5")],
    ));
    let dir = session_dir(out.path());
    let rank0 = String::from_utf8_lossy(&outputs[0].stderr);
    let mut windows = Vec::new();
    for (index, first_step) in [(1, 0), (2, 5)] {
        let report = read_report(&dir.join(format!("window-{index}")));
        let window = &report["window"];
        assert_eq!(window["index"], index, "{window:#}");
        assert_eq!(window["trigger"], "rolling");
        assert_eq!(window["first_step"], first_step);
        assert_eq!(window["steps"], 5);
        assert_eq!(window["ranks_cut_short"], serde_json::json!([]));
        assert_eq!(
            report["session"]["ranks_reporting"],
            serde_json::json!([0, 1, 2, 3]),
            "window {index}: {rank0}"
        );
        // Each rank's 5 steps of the window, no more and no fewer.
        assert_eq!(calls(&report, "denoise_step"), 4 * 5, "window {index}");
        assert_eq!(straggler_ranks(&report, "denoise_step"), [3]);
        // The account of the window: its own span (5 of the 12 steps), not
        // the session's.
        let account = support::assert_account_adds_up(&report);
        assert_eq!(account["scope"], "window", "window {index}");
        windows.push(account.clone());
    }
    let summary = std::fs::read_to_string(dir.join("window-1/summary.txt")).unwrap();
    assert!(
        summary.contains("window 1 (rolling): steps 0 to 5, opened "),
        "{summary}"
    );
    let html = std::fs::read_to_string(dir.join("window-2/report.html")).unwrap();
    assert!(html.contains("window 2 (rolling): steps 5 to 10"));
    // The third opened at step 10 and closed when the session ended, at 12.
    let third = read_report(&dir.join("window-3"));
    assert_eq!(third["window"]["first_step"], 10);
    assert_eq!(
        third["window"]["ranks_cut_short"],
        serde_json::json!([0, 1, 2, 3])
    );
    assert_eq!(calls(&third, "denoise_step"), 4 * 2);
    assert!(!dir.join("window-4").exists());
    // The session's report covers every step, and is no window's.
    let session = read_report(&dir);
    assert_eq!(session["window"], Value::Null);
    let account = support::assert_account_adds_up(&session);
    assert_eq!(account["scope"], "session");
    for window in &windows {
        for (rank, whole) in window["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .zip(account["ranks"].as_array().unwrap())
        {
            let (part, all) = (
                rank["wall_s"].as_f64().unwrap(),
                whole["wall_s"].as_f64().unwrap(),
            );
            assert!(
                part < 0.6 * all,
                "a window of 5 of 12 steps: {part} of {all}"
            );
        }
    }
    assert_eq!(session["windows"], serde_json::json!([1, 2, 3]));
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains(r#"<a href="window-3/report.html">3</a>"#));
    // Two windows compare as two sessions do.
    let compare = Command::new(support::rankscope_cli())
        .arg("compare")
        .args([dir.join("window-1"), dir.join("window-2")])
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        matches!(compare.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&compare.stderr)
    );
    let compared: Value = serde_json::from_slice(&compare.stdout).unwrap();
    assert!(compared.to_string().contains("denoise_step"), "{compared}");
    assert_eq!(calls(&session, "denoise_step"), 4 * 12);
    assert_eq!(straggler_ranks(&session, "denoise_step"), [3]);
}

/// A program that never calls `Profiler::step`: the end of its
/// `step_stage` counts the steps, and rolling windows hold 5 of them each.
#[test]
fn a_stage_name_counts_the_steps_of_a_program_that_calls_no_step() {
    let out = tempfile::tempdir().unwrap();
    wait_for(job_with(
        out.path(),
        12,
        &["--no-step"],
        &[
            ("RANKSCOPE_WINDOW_EVERY_STEPS", "5"),
            ("RANKSCOPE_STEP_STAGE", "denoise_step"),
        ],
    ));
    let dir = session_dir(out.path());
    for (index, first_step) in [(1, 0), (2, 5)] {
        let report = read_report(&dir.join(format!("window-{index}")));
        assert_eq!(report["window"]["first_step"], first_step);
        assert_eq!(report["window"]["steps"], 5);
        assert_eq!(calls(&report, "denoise_step"), 4 * 5, "window {index}");
    }
    assert_eq!(read_report(&dir)["windows"], serde_json::json!([1, 2, 3]));
}

#[test]
fn periodic_windows_come_every_so_many_seconds_with_every_rank() {
    let out = tempfile::tempdir().unwrap();
    let outputs = wait_for(job(
        out.path(),
        300,
        &[
            ("RANKSCOPE_WINDOW_EVERY_S", "0.5"),
            ("RANKSCOPE_WINDOW_STEPS", "5"),
        ],
    ));
    let dir = session_dir(out.path());
    let windows: Vec<Value> = (1..)
        .map(|index| dir.join(format!("window-{index}")))
        .take_while(|window| window.exists())
        .map(|window| read_report(&window))
        .collect();
    // A job of 300 steps of 10 ms or more runs 3 s or more.
    assert!(
        windows.len() >= 2,
        "{} windows: {}",
        windows.len(),
        String::from_utf8_lossy(&outputs[0].stderr)
    );
    for (i, report) in windows.iter().enumerate() {
        assert_eq!(report["window"]["index"], i + 1);
        assert_eq!(report["window"]["trigger"], "periodic");
        assert_eq!(report["window"]["steps"], 5);
        // The job may end inside its last window, which then closes early.
        if i + 1 < windows.len() {
            assert_eq!(report["window"]["ranks_cut_short"], serde_json::json!([]));
            assert_eq!(calls(report, "denoise_step"), 4 * 5, "window {}", i + 1);
        }
    }
}

#[test]
fn a_trigger_from_another_process_gets_a_window_report_while_the_job_runs() {
    let out = tempfile::tempdir().unwrap();
    let children = job(out.path(), 600, &[]);
    let dir = live_session_dir(out.path());
    // A request that is no request is refused, and said once.
    let control = dir.join("control");
    std::fs::create_dir_all(&control).unwrap();
    std::fs::write(control.join("request-junk.json"), "{not json").unwrap();

    let printed = support::trigger(&dir, &["--steps", "10", "--wait", "--timeout", "60"]);
    let window_dir = dir.join("window-1");
    assert!(
        printed.starts_with("window 1: steps ") && printed.trim_end().ends_with("window-1"),
        "the plan, then the report's folder: {printed}"
    );
    // The job is still running when the report is written: it goes on.
    let report = read_report(&window_dir);
    // A second window, of about 0.3 s: rank 0 turns it into steps at its
    // pace (its steps take 10 ms or more: 30 at most).
    support::trigger(&dir, &["--seconds", "0.3", "--wait", "--timeout", "60"]);
    let second = read_report(&dir.join("window-2"));
    let steps = second["window"]["steps"].as_u64().unwrap();
    assert!((1..=30).contains(&steps), "{steps} steps");
    assert_eq!(calls(&second, "denoise_step"), 4 * steps);
    let outputs = wait_for(children);
    assert_eq!(report["window"]["trigger"], "command");
    assert_eq!(report["window"]["steps"], 10);
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
    assert_eq!(straggler_ranks(&report, "denoise_step"), [3]);
    let session = read_report(&dir);
    assert_eq!(calls(&session, "denoise_step"), 4 * 600);
    let notices = session["session"]["notices"].to_string();
    assert!(
        notices.contains("a window request was refused") && notices.contains("request-junk.json"),
        "{notices}\n{}",
        String::from_utf8_lossy(&outputs[0].stderr)
    );
}

#[test]
fn sigusr1_to_rank_0_opens_a_window_of_window_steps() {
    let out = tempfile::tempdir().unwrap();
    // Parts flushed every 0.1 s show that the session runs (and that rank
    // 0 has taken SIGUSR1, which would otherwise end it).
    let children = job(
        out.path(),
        300,
        &[
            ("RANKSCOPE_FLUSH_INTERVAL_S", "0.1"),
            ("RANKSCOPE_WINDOW_STEPS", "7"),
        ],
    );
    let dir = session_dir(out.path());
    let started = Instant::now();
    while !std::fs::read_dir(&dir)
        .unwrap()
        .any(|e| e.unwrap().path().extension().is_some_and(|x| x == "part"))
    {
        assert!(started.elapsed() < Duration::from_secs(60), "no flush");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill with a pid of our own child and a valid signal.
    assert_eq!(
        unsafe { libc::kill(children[0].id() as i32, libc::SIGUSR1) },
        0
    );
    let outputs = wait_for(children);
    let report = read_report(&dir.join("window-1"));
    assert_eq!(report["window"]["trigger"], "signal");
    assert_eq!(report["window"]["steps"], 7, "window_steps");
    assert_eq!(calls(&report, "denoise_step"), 4 * 7);
    let rank0 = String::from_utf8_lossy(&outputs[0].stderr);
    assert!(rank0.contains("window 1 planned (signal)"), "{rank0}");
}

/// Windows on imbalance (steps twice as long as the others' median): a
/// rank slowed mid-run opens one, holding that rank as the straggler;
/// a balanced run, whose ranks share their paces alike, opens none.
#[test]
fn a_rank_slowed_mid_run_opens_a_window_and_a_balanced_run_none() {
    let on_imbalance = [
        ("RANKSCOPE_WINDOW_ON_IMBALANCE_PCT", "100"),
        ("RANKSCOPE_WINDOW_STEPS", "5"),
    ];
    // Rank 3 slows at step 50 (of 10 ms steps, half a second in) to 40 ms
    // steps (twice the others' even where a loaded machine adds 20 ms to
    // every step); the others have steps left after the pace of a second
    // or two shows it.
    let out = tempfile::tempdir().unwrap();
    let outputs = wait_for(job_with(
        out.path(),
        400,
        &["--slow-from", "50", "--slow-ms", "40"],
        &on_imbalance,
    ));
    let dir = session_dir(out.path());
    let rank0 = String::from_utf8_lossy(&outputs[0].stderr);
    assert!(dir.join("window-1").exists(), "{rank0}");
    let report = read_report(&dir.join("window-1"));
    assert_eq!(report["window"]["trigger"], "imbalance");
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
    assert_eq!(straggler_ranks(&report, "denoise_step"), [3]);
    assert!(!dir.join("window-2").exists(), "once while it lasts");
    assert!(
        rank0.contains("rank 3's steps take") && rank0.contains("window 1 planned (imbalance)"),
        "{rank0}"
    );

    // Rank 3 never slows: every status shared, no window.
    let out = tempfile::tempdir().unwrap();
    wait_for(job_with(
        out.path(),
        250,
        &["--slow-from", "1000000"],
        &on_imbalance,
    ));
    let dir = session_dir(out.path());
    for rank in 0..4 {
        let pace = dir.join(format!("control/status-{rank}.json"));
        assert!(pace.exists(), "{}", pace.display());
    }
    assert!(!dir.join("window-1").exists(), "balanced");
    assert_eq!(
        read_report(&dir)["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
}

/// `rankscope top` on a running job (rank 3's steps three times as long,
/// simulated GPUs): every rank's steps, pace, open stage and GPUs, rank 3
/// marked slowest, as JSON and as a table; once the job ended, it says no
/// session runs.
#[test]
fn rankscope_top_shows_every_rank_and_marks_the_slowest() {
    let out = tempfile::tempdir().unwrap();
    let children = job(out.path(), 500, &[("RANKSCOPE_GPU_SOURCE", "simulated")]);
    let dir = live_session_dir(out.path());
    let top = |args: &[&str]| {
        Command::new(support::rankscope_cli())
            .args(["top", "--dir", dir.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    };
    let view = view_of_every_rank(&["--dir", dir.to_str().unwrap()], None);
    assert_eq!(view["world_size"], 4);
    assert_eq!(view["slowest_rank"], 3, "{view}");
    assert_eq!(view["gpus_simulated"], true);
    let ranks = view["ranks"].as_array().unwrap();
    let listed: Vec<u64> = ranks.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(listed, [0, 1, 2, 3], "{view}");
    for rank in ranks {
        assert!(rank["steps"].as_u64().unwrap() > 0, "{rank}");
        assert!(rank["gpus"][0]["temperature_c"].is_f64(), "{rank}");
    }
    let pace = |rank: usize| ranks[rank]["step_ms"].as_f64().unwrap();
    assert!(
        pace(3) > 2.0 * pace(0),
        "rank 3 {} ms, rank 0 {} ms",
        pace(3),
        pace(0)
    );

    let table = top(&["--count", "2", "--interval", "0.2"]);
    let text = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(table.status.success(), "{text}");
    assert_eq!(text.matches("GPU readings simulated").count(), 2, "{text}");
    let marked: Vec<&str> = text.lines().filter(|l| l.starts_with('*')).collect();
    assert!(
        marked
            .iter()
            .all(|l| l.contains(" 3  ") || l.contains("rank 3"))
            && marked.len() == 4,
        "{text}"
    );

    wait_for(children);
    let ended = top(&["--json"]);
    assert!(!ended.status.success());
    assert!(String::from_utf8_lossy(&ended.stderr).contains("no session runs"));
}

#[test]
fn a_rank_that_dies_in_a_window_is_named_missing_in_it_by_the_deadline() {
    let out = tempfile::tempdir().unwrap();
    // Rank 2 leaves at step 7, inside window 2, without a word.
    let children = job_with(
        out.path(),
        15,
        &["--exit-rank", "2", "--exit-at-step", "7"],
        &[
            ("RANKSCOPE_WINDOW_EVERY_STEPS", "5"),
            ("RANKSCOPE_GATHER_TIMEOUT_S", "3"),
        ],
    );
    let outputs = wait_for(children);
    assert_eq!(outputs[2].status.code(), Some(3));
    let dir = session_dir(out.path());
    let window = read_report(&dir.join("window-1"));
    assert_eq!(
        window["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3]),
        "before it left"
    );
    for index in [2, 3] {
        let window = read_report(&dir.join(format!("window-{index}")));
        assert_eq!(
            window["session"]["ranks_missing"],
            serde_json::json!([2]),
            "window {index}: {}",
            String::from_utf8_lossy(&outputs[0].stderr)
        );
        assert_eq!(calls(&window, "denoise_step"), 3 * 5);
    }
}

/// A stage open across a window's edge belongs to the window it ends in:
/// no stage is lost between two windows, whatever the edges cut.
#[test]
fn stages_open_across_edges_each_land_in_one_window() {
    let out = tempfile::tempdir().unwrap();
    wait_for(job_with(
        out.path(),
        17,
        &["--step-inside"],
        &[("RANKSCOPE_WINDOW_EVERY_STEPS", "5")],
    ));
    let dir = session_dir(out.path());
    let in_windows: u64 = (1..=4)
        .map(|index| {
            calls(
                &read_report(&dir.join(format!("window-{index}"))),
                "denoise_step",
            )
        })
        .sum();
    assert_eq!(in_windows, 4 * 17, "every stage of every rank, once");
    assert_eq!(calls(&read_report(&dir), "denoise_step"), 4 * 17);
}

/// Files planted in the control folder and in a window's place — a FIFO
/// where a request and a plan go, a folder named like a request, a link
/// standing for the window's folder — neither hang nor stop the job: a
/// real trigger is still answered, nothing is written through the link.
#[test]
fn hostile_control_files_neither_hang_nor_stop_the_job() {
    let out = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let children = job(out.path(), 150, &[]);
    let dir = live_session_dir(out.path());
    let control = dir.join("control");
    std::fs::create_dir_all(&control).unwrap();
    for fifo in ["request-a.json", "plan-2.json"] {
        let path = std::ffi::CString::new(control.join(fifo).to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    }
    std::fs::create_dir(control.join("request-b.json")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.join("window-1")).unwrap();
    support::trigger(&dir, &["--steps", "5", "--timeout", "60"]);
    // Every rank finishes (none hangs on a FIFO), and nothing went through
    // the link: the window's data could not be written, and the ranks say
    // why.
    let outputs = wait_for(children);
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    let session = read_report(&dir);
    let notices = session["session"]["notices"].to_string();
    assert!(
        notices.contains("a link or file stands in its place"),
        "{notices}\n{}",
        String::from_utf8_lossy(&outputs[0].stderr)
    );
    assert_eq!(calls(&session, "denoise_step"), 4 * 150);
}

#[test]
fn a_trigger_nobody_answers_fails_and_takes_its_request_back() {
    let dir = tempfile::tempdir().unwrap();
    let trigger = |timeout: &str| {
        Command::new(support::rankscope_cli())
            .args(["trigger", "--dir", dir.path().to_str().unwrap()])
            .args(["--timeout", timeout])
            .output()
            .unwrap()
    };
    // No session runs there: said at once, nothing written.
    let none = trigger("60");
    assert_eq!(none.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(stderr.contains("no session runs in"), "{stderr}");
    assert!(!dir.path().join("control").exists());
    // A rank 0 that is gone (its file stayed) is said so at once.
    std::fs::create_dir_all(dir.path().join("control")).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut dead = Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    let live = dir.path().join("control/live");
    std::fs::write(&live, format!("{} {}", host.trim(), dead.id())).unwrap();
    let gone = trigger("60");
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(stderr.contains("is gone"), "{stderr}");
    // A rank 0 that says it runs but never answers (it hangs: this test).
    std::fs::write(&live, format!("{} {}", host.trim(), std::process::id())).unwrap();
    let silent = trigger("0.3");
    assert_eq!(silent.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&silent.stderr);
    assert!(
        stderr.contains("rank 0 did not answer in 0.3 s"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path().join("control"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["live"], "the request is taken back");
    // A delay that would never come is a usage error.
    let never = Command::new(support::rankscope_cli())
        .args(["trigger", "--dir", dir.path().to_str().unwrap()])
        .args(["--delay-steps", "18446744073709551615"])
        .output()
        .unwrap();
    assert_eq!(never.status.code(), Some(2));
}

/// A planned window whose first step never comes (the job stopped
/// stepping) expires after `window_expiry_s`: rank 0 cancels it, its plan
/// says why, and the next request is planned.
#[test]
fn a_window_whose_steps_never_come_expires_and_frees_the_windows() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let out = tempfile::tempdir().unwrap();
    let mut rank = support::rank_program()
        .arg("--wait-for-signal")
        .env("RANKSCOPE_OUTPUT_DIR", out.path())
        .env("RANKSCOPE_GPU_SOURCE", "none")
        .env("RANKSCOPE_WINDOW_EXPIRY_S", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(rank.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let dir = PathBuf::from(line.trim().strip_prefix("ready ").expect("ready"));
    let first = support::trigger(&dir, &["--steps", "5"]);
    assert!(first.starts_with("window 1: steps 2 to 7"), "{first}");
    let started = Instant::now();
    let plan = loop {
        let text = std::fs::read_to_string(dir.join("control/plan-1.json")).unwrap();
        let plan: Value = serde_json::from_str(&text).unwrap();
        if !plan["cancelled"].is_null() {
            break plan;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{plan}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let reason = plan["cancelled"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("expired: its first step (2)"),
        "{reason}"
    );
    assert_eq!(plan["steps"], 0);
    let second = support::trigger(&dir, &["--steps", "5"]);
    assert!(second.starts_with("window 2: "), "{second}");
    // A request written by hand past the bounds is refused by its name,
    // with the reason.
    let huge = r#"{"nonce": "huge", "steps": 18446744073709551615, "delay_steps": 0, "trigger": "command"}"#;
    std::fs::write(dir.join("control/request-huge.json"), huge).unwrap();
    let refused = dir.join("control/refused-huge.json");
    let started = Instant::now();
    while !refused.is_file() {
        assert!(started.elapsed() < Duration::from_secs(60), "no refusal");
        std::thread::sleep(Duration::from_millis(50));
    }
    let refusal = std::fs::read_to_string(&refused).unwrap();
    assert!(refusal.contains("pass 1 000 000 000"), "{refusal}");
    rank.kill().unwrap();
    rank.wait().unwrap();
}

/// From a machine that cannot see the session directory: `rankscope
/// trigger ENDPOINT` and `rankscope top ENDPOINT` reach rank 0's TCP
/// listener with the job's token. A window comes with every rank and the
/// straggler; the view holds every rank. A wrong token, no token and a
/// replayed request are refused, the refusals counted in the session's
/// report, and the job goes on unharmed.
#[test]
fn trigger_and_top_reach_rank_0_over_its_endpoint_with_the_token() {
    use rankscope::transport::tcp::remote::Remote;
    use rankscope_common::remote::{RemoteTrigger, TriggerAnswer};
    use rankscope_common::window::{Request, Trigger};

    const TOKEN: &str = "a-secret-of-this-job";
    let out = tempfile::tempdir().unwrap();
    let port = support::free_port().to_string();
    let endpoint = format!("127.0.0.1:{port}");
    let children = job(
        out.path(),
        800,
        &[
            ("RANKSCOPE_TOKEN", TOKEN),
            ("RANKSCOPE_PORT", &port),
            ("RANKSCOPE_GPU_SOURCE", "simulated"),
        ],
    );
    let dir = live_session_dir(out.path());
    let cli = support::rankscope_said;

    let (ok, _, said) = cli(
        &["trigger", &endpoint, "--steps", "5"],
        Some("not-the-token"),
    );
    assert!(
        !ok && said.contains("RANKSCOPE_TOKEN is not this job's token"),
        "{said}"
    );
    let (ok, _, said) = cli(&["trigger", &endpoint, "--steps", "5"], None);
    assert!(!ok && said.contains("RANKSCOPE_TOKEN is not set"), "{said}");

    let (ok, printed, said) = cli(
        &[
            "trigger",
            &endpoint,
            "--steps",
            "10",
            "--wait",
            "--timeout",
            "60",
        ],
        Some(TOKEN),
    );
    assert!(ok, "{printed}{said}");
    assert!(
        printed.starts_with("window 1: steps ") && printed.trim_end().ends_with("window-1"),
        "the plan, then the report's folder: {printed}"
    );
    let report = read_report(&dir.join("window-1"));
    assert_eq!(report["window"]["trigger"], "command");
    assert_eq!(report["window"]["steps"], 10);
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
    assert_eq!(straggler_ranks(&report, "denoise_step"), [3]);

    // The same request twice: the second is a replay.
    let remote = Remote::new(&endpoint, TOKEN.as_bytes());
    let asked = RemoteTrigger {
        request: Request {
            trigger: Trigger::Signal,
            ..Request::command("0123456789abcdef0123456789abcdef", 3)
        },
        plan_wait_ms: 30_000,
        report_wait_ms: 0,
    };
    let wait = Duration::from_secs(30);
    let first = remote.trigger(&asked).unwrap().answer(wait).unwrap();
    assert!(
        matches!(&first, TriggerAnswer::Planned { plan, .. } if plan.index == 2 && plan.trigger == Trigger::Command),
        "{first:?}"
    );
    let again = remote.trigger(&asked).unwrap().answer(wait).unwrap();
    assert!(
        matches!(&again, TriggerAnswer::Refused { reason } if reason.contains("replayed")),
        "{again:?}"
    );

    // A request whose delay and steps would hold the windows for days at
    // this pace is refused once window 2 is done (it would keep every
    // later request out), and the next request is planned.
    let ask = |nonce: &str, steps: u64, delay_steps: u64| {
        let mut asked = asked.clone();
        asked.request.nonce = nonce.into();
        asked.request.steps = steps;
        asked.request.delay_steps = delay_steps;
        remote.trigger(&asked).unwrap().answer(wait).unwrap()
    };
    let started = Instant::now();
    let held = loop {
        let nonce = format!("held-{}", started.elapsed().as_nanos());
        match ask(&nonce, 400_000_000, 400_000_000) {
            TriggerAnswer::Refused { reason } if reason.contains("is planned or open") => {
                assert!(started.elapsed() < Duration::from_secs(60), "{reason}");
                std::thread::sleep(Duration::from_millis(100));
            }
            answer => break answer,
        }
    };
    assert!(
        matches!(&held, TriggerAnswer::Refused { reason } if reason.contains("would hold the windows")),
        "{held:?}"
    );
    let next = ask("after-the-held-one", 3, 0);
    assert!(
        matches!(&next, TriggerAnswer::Planned { plan, .. } if plan.index == 3),
        "{next:?}"
    );

    let view = view_of_every_rank(&[&endpoint], Some(TOKEN));
    assert_eq!(view["world_size"], 4);
    assert_eq!(view["slowest_rank"], 3, "{view}");
    assert_eq!(view["gpus_simulated"], true);
    assert_eq!(view["session_dir"], dir.to_str().unwrap());

    wait_for(children);
    let session = read_report(&dir);
    assert_eq!(calls(&session, "denoise_step"), 4 * 800);
    let reasons = session["session"]["skipped"].to_string();
    assert!(
        reasons.contains("wrong job token") && reasons.contains("replayed"),
        "{reasons}"
    );
    let (ok, _, said) = cli(&["top", &endpoint, "--json"], Some(TOKEN));
    assert!(!ok && said.contains(&endpoint), "{said}");
}

/// A window asked for over rank 0's endpoint is cancelled once open: it
/// closes a few steps later on both ranks, and its report says it ended
/// early. The next, planned far ahead, is cancelled through the folder
/// before it opens (a cancel naming another window is refused): no rank
/// opens it, and both take part in the one after.
#[test]
fn a_window_is_cancelled_while_open_or_before_it_opens() {
    use rankscope::transport::tcp::remote::Remote;
    use rankscope_common::remote::{RemoteTrigger, TriggerAnswer};
    use rankscope_common::window::Request;

    const TOKEN: &str = "a-secret-of-this-job";
    let out = tempfile::tempdir().unwrap();
    let port = support::free_port().to_string();
    let endpoint = format!("127.0.0.1:{port}");
    let master_port = support::free_port() - 1;
    let children: Vec<Child> = (0..2)
        .map(|rank| {
            support::torchrun_rank(rank, 2, out.path(), master_port)
                .args(["--steps", "1500"])
                .env("RANKSCOPE_TOKEN", TOKEN)
                .env("RANKSCOPE_PORT", &port)
                .env("RANKSCOPE_GPU_SOURCE", "none")
                .spawn()
                .unwrap()
        })
        .collect();
    let dir = live_session_dir(out.path());
    let cli = |args: &[&str]| support::rankscope_said(args, Some(TOKEN));
    let remote = Remote::new(&endpoint, TOKEN.as_bytes());
    let ask = |nonce: &str, steps: u64, delay_steps: u64| {
        let asked = RemoteTrigger {
            request: Request {
                delay_steps,
                ..Request::command(nonce, steps)
            },
            plan_wait_ms: 30_000,
            report_wait_ms: 0,
        };
        let answer = remote
            .trigger(&asked)
            .unwrap()
            .answer(Duration::from_secs(30));
        match answer.unwrap() {
            TriggerAnswer::Planned { plan, .. } => plan,
            other => panic!("{other:?}"),
        }
    };

    let long = ask("long", 1000, 0);
    assert_eq!(long.index, 1);
    let started = Instant::now();
    while view_of_every_rank(&[&endpoint], Some(TOKEN))["ranks"][0]["steps"]
        .as_u64()
        .is_none_or(|steps| steps <= long.first_step)
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "window 1 opens"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, printed, said) = cli(&["trigger", &endpoint, "--cancel"]);
    assert!(ok, "{printed}{said}");
    assert!(
        printed.starts_with("window 1: cancelled; it closes at step "),
        "{printed}"
    );
    let report = read_report_when_written(&dir.join("window-1"));
    let window = &report["window"];
    assert!(
        window["cancelled"]
            .as_str()
            .is_some_and(|why| why.contains("--cancel")),
        "{window}"
    );
    let kept = window["steps"].as_u64().unwrap();
    assert!((1..1000).contains(&kept), "{window}");
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1])
    );

    let far = ask("far-ahead", 3, 400);
    assert_eq!(far.index, 2);
    let (ok, _, said) = cli(&["trigger", &endpoint, "--cancel", "1"]);
    assert!(
        !ok && said.contains("window 2 is planned or open, not window 1"),
        "{said}"
    );
    let cancelled = support::trigger(&dir, &["--cancel", "2"]);
    assert_eq!(cancelled.trim(), "window 2: cancelled; it will not open");
    let (ok, _, said) = cli(&["trigger", &endpoint, "--cancel"]);
    assert!(
        !ok && said.contains("no window is planned or open"),
        "{said}"
    );
    let third = support::trigger(&dir, &["--steps", "3", "--wait", "--timeout", "60"]);
    assert!(third.starts_with("window 3: "), "{third}");
    let report = read_report(&dir.join("window-3"));
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1])
    );
    assert!(!dir.join("window-2").exists(), "window 2 never opened");

    wait_for(children);
}

/// Two nodes of two ranks, each node writing under a folder of its own:
/// rank 3 keeps its mirror to its node's leader, rank 2, which relays
/// rank 0's plans to it and its statuses to rank 0, so that rank 0 holds
/// one mirror connection for the node (rank 1 shares rank 0's folder and
/// needs none). `rankscope top` in rank 0's folder shows every rank, and
/// a window asked for there holds every rank.
#[test]
fn a_node_leader_relays_window_control_for_its_node() {
    let outs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let master_port = support::free_port() - 1;
    let mut children = four_ranks_in_folders(&outs, 2, master_port, &["--steps", "2000"]);
    let dir = live_session_dir(outs[0].path());
    // Every rank's status, rank 3's relayed by rank 2: the mirrors are up.
    view_of_every_rank(&["--dir", dir.to_str().unwrap()], None);

    // Rank 0's listener (MASTER_PORT + 1) holds one mirror, rank 2's, once
    // the rendezvous' short connections are gone, while every rank runs.
    let port = master_port + 1;
    let mut settled = 0;
    while settled < 5 {
        let held = support::connections_to(port);
        let running = children.iter_mut().all(|c| c.try_wait().unwrap().is_none());
        assert!(
            running,
            "a rank ended while rank 0 held {held} connections, not one"
        );
        settled = if held == 1 { settled + 1 } else { 0 };
        std::thread::sleep(Duration::from_millis(100));
    }
    window_1_of_every_rank(&dir);

    wait_for(children);
    let session = read_report(&dir);
    assert_eq!(
        calls(&session, "denoise_step"),
        4 * 2000,
        "{}",
        session["session"]
    );
    assert_eq!(
        session["session"]["skipped"],
        serde_json::json!([]),
        "{}",
        session["session"]
    );
}

/// Four torchrun ranks running the rank program with `args`, in nodes of
/// `node_size` consecutive ranks (4: one node), the ranks writing under
/// `outs` in turn (one folder per rank, or per node), the job's token
/// given and GPUs simulated.
fn four_ranks_in_folders(
    outs: &[tempfile::TempDir],
    node_size: u32,
    master_port: u16,
    args: &[&str],
) -> Vec<Child> {
    (0..4u32)
        .map(|rank| {
            let out = outs[rank as usize * outs.len() / 4].path();
            support::torchrun_rank(rank, 4, out, master_port)
                .args(args)
                .env("LOCAL_RANK", (rank % node_size).to_string())
                .env("LOCAL_WORLD_SIZE", node_size.to_string())
                .env("GROUP_RANK", (rank / node_size).to_string())
                .env("RANKSCOPE_TOKEN", "a-secret-of-this-job")
                .env("RANKSCOPE_GPU_SOURCE", "simulated")
                .spawn()
                .unwrap()
        })
        .collect()
}

/// The report of window 1, asked for in rank 0's session directory `dir`,
/// once it holds all four ranks.
fn window_1_of_every_rank(dir: &Path) -> Value {
    support::trigger(dir, &["--steps", "10", "--wait", "--timeout", "60"]);
    let report = read_report(&dir.join("window-1"));
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3]),
        "{}",
        report["session"]
    );
    report
}

/// Ranks that do not see rank 0's session directory (each writes under a
/// folder of its own, as on nodes without a shared file system): the
/// window plans (as messages to each rank's windows thread), statuses and
/// window payloads travel over rank 0's TCP listener, so a window asked for in rank 0's folder holds every rank and
/// the straggler, and `rankscope top` there shows every rank.
#[test]
fn ranks_apart_from_rank_0s_folder_take_part_in_windows_over_tcp() {
    let outs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let master_port = support::free_port() - 1;
    let args = ["--steps", "700", "--slow-rank", "3"];
    let children = four_ranks_in_folders(&outs, 4, master_port, &args);
    let dir = live_session_dir(outs[0].path());
    let report = window_1_of_every_rank(&dir);
    assert_eq!(report["window"]["steps"], 10);
    assert_eq!(straggler_ranks(&report, "denoise_step"), [3]);
    assert_eq!(calls(&report, "denoise_step"), 40);
    // The other ranks got the plan as a message (no plan file where they
    // write) and wrote their window there.
    for (rank, out) in outs.iter().enumerate().skip(1) {
        let own = session_dir(out.path());
        assert!(!own.join("control/plan-1.json").exists(), "rank {rank}");
        assert!(own.join("window-1").is_dir(), "rank {rank}");
    }

    let view = view_of_every_rank(&["--dir", dir.to_str().unwrap()], None);
    assert_eq!(view["slowest_rank"], 3, "{view}");

    wait_for(children);
    let session = read_report(&dir);
    assert_eq!(calls(&session, "denoise_step"), 4 * 700);
    // The mirrors' connections ended as they should: none is refused.
    assert_eq!(
        session["session"]["skipped"],
        serde_json::json!([]),
        "{}",
        session["session"]
    );
}
