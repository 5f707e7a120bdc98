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
