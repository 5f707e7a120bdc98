//! A rank stopped by SIGTERM or SIGINT (how schedulers and torchrun stop
//! ranks) spills what it recorded, then ends as the signal says.

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};

mod support;

/// Stops the rank with `signal` (numbered `number`); `spill_on_signal` as
/// configured.
fn stopped_by(signal: &str, number: i32, spill_on_signal: bool) {
    let out = tempfile::tempdir().unwrap();
    let mut command = support::rank_program();
    // The rank must start with the signals' default actions, whatever this
    // test runner inherited (a shell in the background ignores SIGINT).
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = command
        .arg("--wait-for-signal")
        .env("RANKSCOPE_OUTPUT_DIR", out.path())
        .env("RANKSCOPE_GPU_SOURCE", "none")
        .env("RANKSCOPE_SPILL_ON_SIGNAL", spill_on_signal.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let dir = PathBuf::from(
        line.trim()
            .strip_prefix("ready ")
            .expect("the rank is ready"),
    );
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.signal(),
        Some(number),
        "the signal ends the process: {:?} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let spilled: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rsp"))
        .collect();
    if !spill_on_signal {
        // The signal's default action, untouched: nothing written.
        assert_eq!(spilled, Vec::<PathBuf>::new());
        assert!(!String::from_utf8_lossy(&output.stderr).contains("stopped by signal"));
        return;
    }
    assert_eq!(spilled.len(), 1, "{spilled:?}");
    let payload = rankscope_common::payload::decode(&std::fs::read(&spilled[0]).unwrap()).unwrap();
    assert_eq!(
        payload.rows(rankscope_common::Table::Stages),
        3,
        "the three finished stages are kept"
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("stopped by signal"));
}

#[test]
fn sigterm_spills_the_session_then_ends_the_rank() {
    stopped_by("TERM", 15, true);
}

#[test]
fn sigint_spills_the_session_then_ends_the_rank() {
    stopped_by("INT", 2, true);
}

#[test]
fn with_spill_on_signal_off_a_signal_ends_the_rank_untouched() {
    stopped_by("TERM", 15, false);
}
