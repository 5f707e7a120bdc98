//! `rankscope import` as a user runs it: real traces in, the report files
//! out, the exit status telling a partial report, and the page in a real
//! headless Chromium with hostile kernel names shown as text.

use std::path::{Path, PathBuf};

use serde_json::json;

mod support;

use support::browser::Browser;
use support::{rankscope, read_json};

const CHARTS_READY: &str = "document.body && document.body.getAttribute('data-charts') === 'ready'";

fn fixtures(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/kineto")
        .join(name)
}

#[test]
fn real_traces_give_every_report_file_and_a_partial_status_for_missing_ranks() {
    let out = tempfile::tempdir().unwrap();
    let dir = fixtures("hta-sampled");
    let run = rankscope(
        &[
            "import",
            dir.to_str().unwrap(),
            "--out",
            out.path().to_str().unwrap(),
        ],
        &[],
    );
    // Two of the job's 128 ranks were traced: the report is partial.
    assert_eq!(
        run.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("GPU time per rank"), "{stdout}");
    assert!(
        stdout.contains("have no trace among those imported"),
        "{stdout}"
    );
    for file in ["report.json", "report.html", "summary.txt", "stages.csv"] {
        assert!(out.path().join(file).exists(), "{file}");
        assert!(stdout.contains(&format!("wrote {}", out.path().join(file).display())));
    }
    let report = read_json(&out.path().join("report.json"));
    assert_eq!(report["session"]["transport"], json!("import"));
    assert_eq!(report["gpu_time"].as_array().unwrap().len(), 2);
    assert_eq!(report["session"]["ranks_missing_count"], json!(126));
}

#[test]
fn no_trace_among_the_paths_is_an_error_naming_them() {
    let empty = tempfile::tempdir().unwrap();
    let run = rankscope(&["import", empty.path().to_str().unwrap()], &[]);
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("no trace (.json or .json.gz) in"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&empty.path().display().to_string()),
        "{stderr}"
    );
}

/// Kernel names that would run script if they reached the page unescaped.
const HOSTILE: [&str; 2] = [
    "</script><script>window.pwned=1</script>",
    "<img src=x onerror=\\\"window.pwned=2\\\">",
];

/// A trace of one rank (named by its file, no distributedInfo): the two
/// hostile kernels and a GEMM that rank 1 runs 50 % longer.
fn write_trace(dir: &Path, rank: u32) {
    let gemm_us = if rank == 1 { 150_000 } else { 100_000 };
    let events = [
        (HOSTILE[0], 0, 100),
        (HOSTILE[1], 200, 100),
        ("sm90_xmma_gemm_bf16bf16", 400, gemm_us),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 200_000, 300),
    ]
    .iter()
    .enumerate()
    .map(|(i, (name, ts, dur))| {
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "ts": {ts}, "dur": {dur},
                "args": {{"stream": 7, "correlation": {i}, "device": {rank}}}}}"#
        )
    })
    .collect::<Vec<_>>()
    .join(",");
    std::fs::write(
        dir.join(format!("worker-rank{rank}.pt.trace.json")),
        format!(r#"{{"traceEvents": [{events}]}}"#),
    )
    .unwrap();
}

#[test]
fn the_page_draws_gpu_time_and_shows_hostile_kernel_names_as_text() {
    let traces = tempfile::tempdir().unwrap();
    for rank in 0..2 {
        write_trace(traces.path(), rank);
    }
    let out = tempfile::tempdir().unwrap();
    let run = rankscope(
        &[
            "import",
            traces.path().to_str().unwrap(),
            "--out",
            out.path().to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report = read_json(&out.path().join("report.json"));
    let straggler = &report["kernel_stragglers"][0];
    assert_eq!(straggler["rank"], json!(1));
    assert_eq!(straggler["kernel"], json!("sm90_xmma_gemm_bf16bf16"));

    let mut browser = Browser::launch(1400);
    browser.open(&out.path().join("report.html"), CHARTS_READY);
    let points = browser
        .eval("Number(document.getElementById('chart-gpu-time').getAttribute('data-points'))");
    assert_eq!(points, json!(2));
    assert_eq!(
        browser.eval("document.getElementById('chart-gpu-time').querySelector('canvas') !== null"),
        json!(true)
    );
    assert_eq!(browser.eval("typeof window.pwned"), json!("undefined"));
    let kernels = browser.eval("document.getElementById('kernel-table').textContent");
    let kernels = kernels.as_str().unwrap();
    assert!(
        kernels.contains("</script><script>window.pwned=1</script>"),
        "{kernels}"
    );
    assert!(
        kernels.contains("<img src=x onerror=\"window.pwned=2\">"),
        "{kernels}"
    );
    assert_eq!(
        browser.eval("document.querySelectorAll('img').length"),
        json!(0)
    );
    assert_eq!(browser.errors(), Vec::<String>::new(), "console errors");
    browser.screenshot(
        &Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("artifacts")
            .join("report-import.png"),
    );
}
