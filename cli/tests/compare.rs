//! `rankscope compare` on reports of a real demo run, and on copies of it
//! with one stage made slower: what is flagged, what is noise, exit codes.

mod support;

use std::path::{Path, PathBuf};

use support::{rankscope, read_json, session_dir};

/// A demo run's report.json, copied into `dir` as `name` with `edit` applied.
fn variant(
    base: &serde_json::Value,
    dir: &Path,
    name: &str,
    edit: impl Fn(&mut serde_json::Value),
) -> PathBuf {
    let mut report = base.clone();
    edit(&mut report);
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string(&report).unwrap()).unwrap();
    path
}

/// Scales `vae_decode`'s per-rank time by `factor` and sets its spread
/// across ranks to `std` seconds.
fn vae_decode(factor: f64, std: f64) -> impl Fn(&mut serde_json::Value) {
    move |report| {
        let stages = report["stages"].as_array_mut().unwrap();
        let stage = stages
            .iter_mut()
            .find(|s| s["name"] == "vae_decode")
            .unwrap();
        let avg = stage["total_s"]["avg"].as_f64().unwrap();
        stage["total_s"]["avg"] = (avg * factor).into();
        stage["total_s"]["std"] = std.into();
    }
}

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_slower_stage_is_a_regression_a_small_or_noisy_change_is_not() {
    let out = tempfile::tempdir().unwrap();
    let demo = rankscope(
        &["demo", "--out", out.path().to_str().unwrap()],
        &[("RANKSCOPE_GPU_SOURCE", "simulated")],
    );
    assert!(demo.status.success(), "{}", text(&demo));
    let dir = session_dir(out.path());
    let base = read_json(&dir.join("report.json"));
    let files = tempfile::tempdir().unwrap();
    let baseline = variant(&base, files.path(), "baseline.json", vae_decode(1.0, 0.001));
    let arg = |p: &Path| p.to_str().unwrap().to_string();

    // The same run: nothing changed; a session directory works as well.
    let same = rankscope(&["compare", &arg(&dir), &arg(&dir)], &[]);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same));
    assert!(text(&same).contains("No regression."), "{}", text(&same));

    // 20 % slower, spread 1 ms: a regression, exit 1.
    let slower = variant(&base, files.path(), "slower.json", vae_decode(1.2, 0.001));
    let run = rankscope(&["compare", &arg(&baseline), &arg(&slower)], &[]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let line = text(&run)
        .lines()
        .find(|l| l.starts_with("stage:vae_decode"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("+20.0%") && line.ends_with("REGRESSION"),
        "{line}"
    );

    // 2 % slower: under the threshold.
    let slightly = variant(
        &base,
        files.path(),
        "slightly.json",
        vae_decode(1.02, 0.001),
    );
    let run = rankscope(&["compare", &arg(&baseline), &arg(&slightly)], &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));

    // 20 % slower, but the ranks spread over far more than the change.
    let noisy = variant(&base, files.path(), "noisy.json", vae_decode(1.2, 10.0));
    let run = rankscope(&["compare", &arg(&baseline), &arg(&noisy)], &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert!(text(&run).contains("within noise"), "{}", text(&run));

    // A higher threshold lets the 20 % through.
    let run = rankscope(
        &[
            "compare",
            &arg(&baseline),
            &arg(&slower),
            "--threshold",
            "25",
        ],
        &[],
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));

    // A stage the baseline ran is gone: instrumentation broke, or a step
    // was skipped. The gate fails.
    let gone = variant(&base, files.path(), "gone.json", |report| {
        let stages = report["stages"].as_array_mut().unwrap();
        stages.retain(|s| s["name"] != "vae_decode");
    });
    let run = rankscope(&["compare", &arg(&baseline), &arg(&gone)], &[]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    assert!(
        text(&run).contains("only in the baseline (a regression: gone from this run): vae_decode"),
        "{}",
        text(&run)
    );

    // --json: the same verdicts for programs.
    let run = rankscope(&["compare", &arg(&baseline), &arg(&slower), "--json"], &[]);
    assert_eq!(run.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let change = json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == "stage:vae_decode")
        .unwrap();
    assert_eq!(change["verdict"], "regression");
    assert_eq!(json["threshold_pct"], 10.0);
}

#[test]
fn unreadable_reports_and_bad_arguments_exit_2_not_1() {
    let files = tempfile::tempdir().unwrap();
    let garbage = files.path().join("garbage.json");
    std::fs::write(&garbage, "not json").unwrap();
    let future = files.path().join("future.json");
    std::fs::write(&future, r#"{"schema_version": 99}"#).unwrap();
    let missing = files.path().join("missing.json");
    // A FIFO nobody writes to: reading it would block for ever.
    let fifo = files.path().join("fifo.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let path = |p: &Path| p.to_str().unwrap().to_string();
    for (args, says) in [
        (
            vec!["compare".to_string(), path(&garbage), path(&garbage)],
            "is not a rankscope report.json",
        ),
        (
            vec!["compare".to_string(), path(&future), path(&future)],
            "has report schema version 99",
        ),
        (
            vec!["compare".to_string(), path(&missing), path(&garbage)],
            "cannot read report",
        ),
        (
            vec!["compare".to_string(), path(&fifo), path(&garbage)],
            "is not a regular file",
        ),
        (
            vec![
                "compare".to_string(),
                path(&garbage),
                path(&garbage),
                "--threshold".to_string(),
                "lots".to_string(),
            ],
            "is not a percentage",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = rankscope(&args, &[]);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", text(&run));
        assert!(text(&run).contains(says), "{args:?}: {}", text(&run));
    }
}
