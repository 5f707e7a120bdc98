//! Test support shared by the coordinator's tests.

pub mod json;
pub mod synthetic;
pub mod trace;

use std::path::{Path, PathBuf};

/// The Python of the test environment `scripts/test.sh` makes (with
/// pyarrow and HolisticTraceAnalysis): `RANKSCOPE_TEST_PYTHON`, else
/// `target/test-venv/bin/python`.
#[allow(dead_code)] // each test file uses its own share
pub fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("RANKSCOPE_TEST_PYTHON") {
        return python.into();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: scripts/test.sh makes it (python3 -m venv, pip install pyarrow \
         HolisticTraceAnalysis)",
        venv.display()
    );
    venv
}

/// Runs `command` (named `what` in a failure) and returns its output;
/// fails the test, with its standard error, unless it succeeded.
#[allow(dead_code)] // each test file uses its own share
pub fn run_ok(command: &mut std::process::Command, what: &str) -> std::process::Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Asserts what every report's judgement must hold: each rank's time
/// account, and the job's, adds up to its wall time, and the findings'
/// costs (slices of the job's account) add up to the job's wall time at
/// most.
#[allow(dead_code)] // each test file uses its own share
pub fn assert_costs_add_up(report: &rankscope_coordinator::model::Report) {
    let account = &report.time_account;
    if let Err(why) = account.adds_up() {
        panic!("the time account does not add up: {why}\n{account:#?}");
    }
    let wall = account.job.wall_s;
    let costs: f64 = report.recommendations.iter().filter_map(|r| r.cost_s).sum();
    assert!(
        costs <= wall * (1.0 + 1e-9) + 1e-9,
        "the findings cost {costs} s of the job's {wall} s: {:#?}",
        report.recommendations
    );
    let pct: f64 = report
        .recommendations
        .iter()
        .filter_map(|r| r.cost_s)
        .map(|c| c / wall.max(f64::MIN_POSITIVE) * 100.0)
        .sum();
    assert!(pct <= 100.0 + 1e-6, "the findings cost {pct} % of the job");
}
