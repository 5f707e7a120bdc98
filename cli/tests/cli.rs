//! The command line over real files: `aggregate` with bad input, `inspect`, `--help`.

use std::path::Path;

mod support;

use support::{rankscope, read_json, spill_file};

/// Runs a 3-rank demo and returns the session directory with its spill files.
fn demo_session(out: &Path) -> std::path::PathBuf {
    support::demo(out, &["--ranks", "3"]).1
}

#[test]
fn aggregate_names_every_bad_file_and_merges_the_rest() {
    let out = tempfile::tempdir().unwrap();
    let session = demo_session(out.path());
    let bad = tempfile::tempdir().unwrap();
    let copy = |rank: u32, to: &str| {
        std::fs::copy(spill_file(&session, rank), bad.path().join(to)).unwrap()
    };
    copy(0, "rank-00000.rsp");
    copy(1, "rank-00001.rsp");
    // Two files claim rank 1.
    copy(1, "rank-00001-copy.rsp");
    // Rank 2's file cut short.
    let full = std::fs::read(spill_file(&session, 2)).unwrap();
    std::fs::write(bad.path().join("rank-00002.rsp"), &full[..full.len() / 2]).unwrap();
    // A file of another format.
    std::fs::write(bad.path().join("notes.rsp"), "not a payload\n").unwrap();
    // A payload from a future format version.
    let mut future = std::fs::read(spill_file(&session, 0)).unwrap();
    future[4..6].copy_from_slice(&99u16.to_le_bytes());
    std::fs::write(bad.path().join("rank-00007.rsp"), future).unwrap();

    let run = rankscope(
        &["aggregate", "--reports-dir", bad.path().to_str().unwrap()],
        &[],
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "partial result: {stderr}");
    for (file, problem) in [
        ("rank-00001-copy.rsp", "already provided by"),
        ("rank-00002.rsp", "truncated payload"),
        ("notes.rsp", "not a rankscope payload"),
        ("rank-00007.rsp", "format version 99 is not supported"),
    ] {
        let line = stderr
            .lines()
            .find(|l| l.contains(file))
            .unwrap_or_else(|| panic!("{file} is named: {stderr}"));
        assert!(
            line.contains(problem),
            "{file}: expected `{problem}` in `{line}`"
        );
    }

    let report = read_json(&bad.path().join("report.json"));
    let s = &report["session"];
    assert_eq!(s["world_size"], 3);
    assert_eq!(s["ranks_reporting"], serde_json::json!([0, 1]));
    assert_eq!(s["ranks_missing"], serde_json::json!([2]));
    assert_eq!(s["skipped"].as_array().unwrap().len(), 4);
    assert!(!report["stages"].as_array().unwrap().is_empty());
}

#[test]
fn aggregate_rebuilds_the_report_rank_zero_wrote() {
    let out = tempfile::tempdir().unwrap();
    let session = demo_session(out.path());
    let again = tempfile::tempdir().unwrap();
    let run = rankscope(
        &[
            "aggregate",
            "--reports-dir",
            session.to_str().unwrap(),
            "--output",
            again.path().to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let original = read_json(&session.join("report.json"));
    let rebuilt = read_json(&again.path().join("report.json"));
    assert_eq!(original, rebuilt, "the offline path and rank 0 agree");
    // Not a terminal: no progress bar in stderr.
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!stderr.contains("reading rank files"), "{stderr}");
    // Byte for byte, the per-row files too: both write them by rank.
    for file in ["trace.json.gz", "raw/stages.arrow", "raw/gpu_samples.arrow"] {
        let (a, b) = (session.join(file), again.path().join(file));
        assert!(
            std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
            "{file} differs"
        );
    }
}

#[test]
fn aggregate_report_only_skips_the_trace_and_raw_files() {
    let out = tempfile::tempdir().unwrap();
    let session = demo_session(out.path());
    let again = tempfile::tempdir().unwrap();
    // A full report first: its trace and raw files must not stay beside a
    // report that did not write them.
    for only in [None, Some("--report-only")] {
        let mut args = vec!["aggregate", "--reports-dir", session.to_str().unwrap()];
        args.extend(["--output", again.path().to_str().unwrap()]);
        args.extend(only);
        let run = rankscope(&args, &[]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let mut written: Vec<String> = std::fs::read_dir(again.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(
        written,
        ["report.html", "report.json", "stages.csv", "summary.txt"]
    );
}

/// On a terminal (util-linux's `script` gives the command one), aggregate
/// shows its phases' progress on stderr, and clears it before its output.
#[test]
fn aggregate_on_a_terminal_shows_its_progress() {
    let out = tempfile::tempdir().unwrap();
    let session = demo_session(out.path());
    let command = format!(
        "{} aggregate --reports-dir {}",
        support::rankscope_bin().display(),
        session.display()
    );
    let run = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("RANKSCOPE_GPU_SOURCE", "none")
        .output()
        .expect("util-linux's script, installed by scripts/setup.sh");
    let seen = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{seen}");
    for phase in ["reading rank files", "writing the trace and raw/"] {
        assert!(seen.contains(phase), "{phase}: {seen}");
    }
    assert!(seen.contains("wrote "), "{seen}");
}

#[test]
fn aggregate_of_nothing_usable_fails_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rank-00000.rsp"), b"RSPL").unwrap();
    let run = rankscope(
        &["aggregate", "--reports-dir", dir.path().to_str().unwrap()],
        &[],
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no usable rank payload") && stderr.contains("truncated"),
        "{stderr}"
    );

    let missing = dir.path().join("nope");
    let run = rankscope(
        &["aggregate", "--reports-dir", missing.to_str().unwrap()],
        &[],
    );
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("nope"));
}

#[test]
fn inspect_shows_the_header_and_rows_per_table() {
    let out = tempfile::tempdir().unwrap();
    let session = demo_session(out.path());
    let run = rankscope(&["inspect", spill_file(&session, 1).to_str().unwrap()], &[]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("rank      1 of 3"), "{stdout}");
    assert!(stdout.contains("session   t2v-demo"), "{stdout}");
    // model_load + text_encoding + 3 blocks + 12 steps + vae_decode per block = 20 stages.
    let stages = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("stages "))
        .unwrap();
    assert!(stages.contains(" 20 rows"), "{stages}");

    let run = rankscope(&["inspect", "Cargo.toml"], &[]);
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("not a rankscope payload"));
}

#[test]
fn help_explains_each_subcommand() {
    let run = rankscope(&["--help"], &[]);
    let help = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success());
    for command in ["demo", "aggregate", "inspect"] {
        assert!(help.contains(command), "{help}");
    }
    assert!(
        !help.contains("demo-rank"),
        "the rank subcommand is internal"
    );
    let run = rankscope(&["aggregate", "--help"], &[]);
    let help = String::from_utf8_lossy(&run.stdout);
    assert!(
        help.contains("--reports-dir") && help.contains("partial"),
        "{help}"
    );
}

#[test]
fn exit_codes_tell_usage_errors_from_errors() {
    // 2: a usage error, from argument parsing.
    for args in [
        &["demo", "--ranks", "0"][..],
        &["demo", "--ranks", "100000"],
        &["aggregate"],
        &["no-such-command"],
    ] {
        let run = rankscope(args, &[]);
        assert_eq!(run.status.code(), Some(2), "{args:?}");
    }
    // 1: an error, its causes printed once each.
    let run = rankscope(&["inspect", "/nonexistent/rank-00000.rsp"], &[]);
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn a_misspelt_variable_is_named_with_the_closest_setting() {
    let dir = tempfile::tempdir().unwrap();
    let run = rankscope(
        &["aggregate", "--reports-dir", dir.path().to_str().unwrap()],
        &[("RANKSCOPE_GATHER_TIMEOUT", "5")],
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(
        stderr
            .matches("RANKSCOPE_GATHER_TIMEOUT is not a rankscope setting")
            .count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("did you mean RANKSCOPE_GATHER_TIMEOUT_S?"),
        "{stderr}"
    );
}
