//! `rankscope aggregate` and `inspect` over directories a user (or an
//! attacker) could have left: several runs under one session id, special
//! files, absurd world sizes, a disk that fills up.

mod support;

use std::path::Path;

use rankscope_common::payload::{self, Compression, Payload, PayloadHeader};
use rankscope_common::table::{StageRow, StagesBuilder, Table};
use support::{rankscope, read_json};

/// Writes a payload of `rank` of `world` in `run`, started at `start_s`.
fn payload_file(dir: &Path, file: &str, run: &str, rank: u32, world: u32, start_s: i64) {
    let mut header = PayloadHeader::new("job", "t2v", rank, world);
    header.session.run_id = Some(run.to_string());
    header.clock.start_unix_ns = start_s * 1_000_000_000;
    header.clock.duration_ns = 2_000_000_000;
    let mut stages = StagesBuilder::default();
    for call in 0..20 {
        stages.append(&StageRow {
            name: format!("stage-of-{run}"),
            thread: 0,
            thread_name: "main".into(),
            stage_id: call,
            parent_id: None,
            depth: 0,
            start_ns: call * 1_000_000,
            end_ns: call * 1_000_000 + 500_000,
            call_index: call as u32,
            metadata: None,
        });
    }
    let mut payload = Payload {
        header,
        tables: Default::default(),
    };
    payload
        .tables
        .insert(Table::Stages, stages.finish().unwrap());
    let bytes = payload::encode(&payload, Compression::Zstd).unwrap();
    std::fs::write(dir.join(file), bytes).unwrap();
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn aggregate_keeps_the_newest_run_and_names_the_others() {
    let dir = tempfile::tempdir().unwrap();
    for rank in 0..2 {
        payload_file(
            dir.path(),
            &format!("rank-{rank}.old.rsp"),
            "r1",
            rank,
            2,
            100,
        );
        payload_file(
            dir.path(),
            &format!("rank-{rank}.new.rsp"),
            "r2",
            rank,
            2,
            200,
        );
    }
    let run = rankscope(
        &["aggregate", "--reports-dir", dir.path().to_str().unwrap()],
        &[],
    );
    let stderr = text(&run.stderr);
    assert_eq!(
        run.status.code(),
        Some(3),
        "other runs' files were left out: {stderr}"
    );
    let report = read_json(&dir.path().join("report.json"));
    assert_eq!(report["session"]["run_id"], "r2");
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1])
    );
    assert_eq!(report["session"]["other_runs"].as_array().unwrap().len(), 2);
    assert_eq!(
        report["stages"].as_array().unwrap().len(),
        1,
        "one run's stages"
    );
    assert_eq!(report["stages"][0]["name"], "stage-of-r2");
    assert!(
        stderr.contains("belongs to run `r1`") && stderr.contains("--run"),
        "{stderr}"
    );

    let run = rankscope(
        &[
            "aggregate",
            "--reports-dir",
            dir.path().to_str().unwrap(),
            "--run",
            "r1",
        ],
        &[],
    );
    assert_eq!(run.status.code(), Some(3), "{}", text(&run.stderr));
    let report = read_json(&dir.path().join("report.json"));
    assert_eq!(report["session"]["run_id"], "r1");
    assert_eq!(report["stages"][0]["name"], "stage-of-r1");
}

#[cfg(unix)]
#[test]
fn special_files_are_named_and_never_read() {
    let dir = tempfile::tempdir().unwrap();
    payload_file(dir.path(), "rank-00000.rsp", "r", 0, 4, 100);
    // A symbolic link to an endless /proc file, and one to /dev/zero.
    std::os::unix::fs::symlink("/proc/self/pagemap", dir.path().join("rank-00003.rsp")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("rank-00002.rsp")).unwrap();
    let fifo = dir.path().join("rank-00001.rsp");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());

    let run = rankscope(
        &["aggregate", "--reports-dir", dir.path().to_str().unwrap()],
        &[],
    );
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    for name in ["rank-00001.rsp", "rank-00002.rsp", "rank-00003.rsp"] {
        let line = stderr
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name} is named: {stderr}"));
        assert!(line.contains("not a regular file"), "{line}");
    }
    for file in ["rank-00001.rsp", "rank-00002.rsp"] {
        let run = rankscope(&["inspect", dir.path().join(file).to_str().unwrap()], &[]);
        assert_eq!(run.status.code(), Some(1));
        assert!(text(&run.stderr).contains("not a regular file"));
    }
}

#[test]
fn a_world_size_past_the_maximum_is_refused_and_missing_ranks_stay_bounded() {
    let dir = tempfile::tempdir().unwrap();
    payload_file(dir.path(), "rank-00000.rsp", "r", 0, 4_000_000_000, 100);
    let run = rankscope(
        &["aggregate", "--reports-dir", dir.path().to_str().unwrap()],
        &[],
    );
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("more than max_world_size 65536"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    payload_file(dir.path(), "rank-00000.rsp", "r", 0, 60_000, 100);
    let run = rankscope(
        &["aggregate", "--reports-dir", dir.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(run.status.code(), Some(3), "{}", text(&run.stderr));
    assert!(text(&run.stderr).contains("[1-1000] and 58999 more"));
    let json = dir.path().join("report.json");
    assert!(std::fs::metadata(&json).unwrap().len() < 200_000);
    let report = read_json(&json);
    assert_eq!(
        report["session"]["ranks_missing"].as_array().unwrap().len(),
        1000
    );
    assert_eq!(report["session"]["ranks_missing_count"], 59_999);
}

#[cfg(unix)]
#[test]
fn a_report_that_cannot_be_written_leaves_no_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    payload_file(dir.path(), "rank-00000.rsp", "r", 0, 1, 100);
    // Files may grow to 1 KiB; a write past it fails (EFBIG) instead of
    // killing the process, as on a full disk.
    let script = format!(
        "trap '' XFSZ; ulimit -f 1; exec '{}' aggregate --reports-dir '{}'",
        support::rankscope_bin().display(),
        dir.path().display()
    );
    let run = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    // The first file written that does not fit is named.
    let named = format!("writing {}", dir.path().display());
    assert!(stderr.contains(&named), "{stderr}");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "rank-00000.rsp")
        .collect();
    assert!(left.is_empty(), "partial files left: {left:?}");
}

#[test]
fn escape_sequences_never_reach_the_terminal_or_the_csv() {
    const ESC: &str = "\x1b]0;pwned\x07\x1b[2J";
    let dir = tempfile::tempdir().unwrap();
    let mut header = PayloadHeader::new(&format!("job{ESC}"), &format!("t2v{ESC}"), 0, 2);
    header.session.tags = vec![(format!("k{ESC}"), format!("v{ESC}"))];
    header.rank.host = format!("node{ESC}");
    header.rank.launcher = format!("torchrun{ESC}");
    let mut stages = StagesBuilder::default();
    for name in [format!("decode{ESC}"), "\t=HYPERLINK(\"x\")".to_string()] {
        stages.append(&StageRow {
            name,
            thread: 0,
            thread_name: format!("main{ESC}"),
            stage_id: 0,
            parent_id: None,
            depth: 0,
            start_ns: 0,
            end_ns: 1_000_000,
            call_index: 0,
            metadata: None,
        });
    }
    let mut payload = Payload {
        header,
        tables: Default::default(),
    };
    payload
        .tables
        .insert(Table::Stages, stages.finish().unwrap());
    let file = dir.path().join("rank-00000.rsp");
    std::fs::write(&file, payload::encode(&payload, Compression::Zstd).unwrap()).unwrap();
    // A file of another session, whose id the refusal quotes.
    let mut other = payload.clone();
    other.header.session.id = format!("other{ESC}");
    other.header.rank.rank = 1;
    std::fs::write(
        dir.path().join("rank-00001.rsp"),
        payload::encode(&other, Compression::Zstd).unwrap(),
    )
    .unwrap();

    let inspect = rankscope(&["inspect", file.to_str().unwrap()], &[]);
    assert!(inspect.status.success(), "{}", text(&inspect.stderr));
    let aggregate = rankscope(
        &["aggregate", "--reports-dir", dir.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(
        aggregate.status.code(),
        Some(3),
        "{}",
        text(&aggregate.stderr)
    );
    let summary = std::fs::read_to_string(dir.path().join("summary.txt")).unwrap();
    let csv = std::fs::read_to_string(dir.path().join("stages.csv")).unwrap();
    for (what, shown) in [
        ("inspect", text(&inspect.stdout)),
        ("aggregate stdout", text(&aggregate.stdout)),
        ("aggregate stderr", text(&aggregate.stderr)),
        ("summary.txt", summary),
        ("stages.csv", csv.clone()),
    ] {
        assert!(
            !shown.contains('\x1b') && !shown.contains('\x07'),
            "{what}: {shown:?}"
        );
    }
    assert!(
        text(&aggregate.stderr).contains("other?]0;pwned"),
        "the foreign id is shown, tamed"
    );
    assert!(csv.contains("\"'?=HYPERLINK(\"\"x\"\")\""), "{csv}");
}
