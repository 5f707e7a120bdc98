//! `import` on real torch.profiler traces agrees with Holistic Trace
//! Analysis (HTA, run in the same test on the same files), and keeps
//! reporting when some traces are hostile.

use rankscope_coordinator::AnalysisConfig;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rankscope_coordinator::import::{import, ImportOptions, Imported};
use rankscope_coordinator::model::Report;
use serde_json::Value;

mod support;
use support::trace::{check_trace, read_trace};
use support::{python, run_ok};

fn fixtures(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/kineto")
        .join(name)
}

/// `import` of `paths` with the default options into a new directory.
fn import_all(paths: &[PathBuf]) -> (tempfile::TempDir, Imported) {
    let out = tempfile::tempdir().unwrap();
    let imported = import(
        paths,
        out.path(),
        &ImportOptions::default(),
        &AnalysisConfig::default(),
    )
    .unwrap();
    // Whatever the traces, the time account adds up and the findings'
    // costs stay within the job.
    support::assert_costs_add_up(&imported.report);
    (out, imported)
}

fn import_dir(dir: &Path) -> (tempfile::TempDir, Report) {
    let (out, imported) = import_all(&[dir.to_path_buf()]);
    (out, imported.report)
}

/// HTA's figures for the traces in `dir` (scripts/hta_figures.py).
fn hta(dir: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/hta_figures.py");
    let run = run_ok(Command::new(python()).arg(script).arg(dir), "HTA");
    serde_json::from_slice(&run.stdout).unwrap()
}

/// `import` of the traces in `dir` agrees with HTA's temporal breakdown
/// and communication/computation overlap, rank by rank.
fn assert_gpu_time_agrees_with_hta(dir: &Path, ranks: usize) {
    let (_out, report) = import_dir(dir);
    let figures = hta(dir);
    let temporal = figures["temporal"].as_array().unwrap();
    assert_eq!(report.gpu_time.len(), ranks);
    assert_eq!(temporal.len(), ranks);
    for theirs in temporal {
        let rank = theirs["rank"].as_u64().unwrap() as u32;
        let ours = report.gpu_time.iter().find(|g| g.rank == rank).unwrap();
        for (mine, field) in [
            (ours.idle_pct, "idle_time_pctg"),
            (ours.compute_pct, "compute_time_pctg"),
            (ours.non_compute_pct, "non_compute_time_pctg"),
        ] {
            let hta = theirs[field].as_f64().unwrap();
            assert!(
                (mine - hta).abs() <= 0.5,
                "rank {rank} {field}: ours {mine}, HTA {hta}"
            );
        }
        // HTA truncates each time and duration to whole µs: its window's
        // two ends are each off by less than 1 µs.
        let window_us = theirs["kernel_time(us)"].as_f64().unwrap();
        assert!(
            (ours.window_s * 1e6 - window_us).abs() < 2.0,
            "rank {rank} window: ours {} µs, HTA {window_us} µs",
            ours.window_s * 1e6
        );
    }
    for theirs in figures["overlap"].as_array().unwrap() {
        let rank = theirs["rank"].as_u64().unwrap() as u32;
        let ours = report.gpu_time.iter().find(|g| g.rank == rank).unwrap();
        // HTA's NaN (JSON null here) where a rank ran no communication
        // kernel; ours is null then too.
        match theirs["comp_comm_overlap_pctg"].as_f64() {
            Some(hta) => {
                let mine = ours.comm_overlap_pct.unwrap();
                assert!(
                    (mine - hta).abs() <= 0.5,
                    "rank {rank} overlap: ours {mine}, HTA {hta}"
                );
            }
            None => assert_eq!(ours.comm_overlap_pct, None, "rank {rank} overlap"),
        }
    }
}

/// `import` of the traces of two ranks in `dir` agrees with HTA's kernel
/// breakdown: each listed kernel's total on each rank; `listed` kernels.
fn assert_kernel_totals_agree_with_hta(dir: &Path, listed: usize) {
    let (_out, report) = import_dir(dir);
    let figures = hta(dir);
    // HTA: one row per (kernel, rank), its sum in µs.
    let hta_sums: HashMap<(String, u32), f64> = figures["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let key = (
                row["name"].as_str().unwrap().to_string(),
                row["rank"].as_u64().unwrap() as u32,
            );
            (key, row["sum (us)"].as_f64().unwrap())
        })
        .collect();
    // With two ranks, a kernel's least and greatest per-rank totals are
    // both ranks' totals.
    let mut compared = 0;
    for kernel in report.kernels.iter().filter(|k| !k.name.starts_with('(')) {
        for (rank, seconds) in [
            (kernel.min_rank, kernel.min_s),
            (kernel.max_rank, kernel.max_s),
        ] {
            let theirs = hta_sums
                .get(&(kernel.name.clone(), rank))
                .copied()
                .unwrap_or(0.0);
            // HTA truncates each duration to whole µs (traces written in
            // whole µs agree exactly).
            assert!(
                (seconds * 1e6 - theirs).abs() < 0.01 + kernel.calls as f64,
                "{} on rank {rank}: ours {} µs, HTA {theirs} µs",
                kernel.name,
                seconds * 1e6
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 2 * listed, "the listed kernels on both ranks");
}

#[test]
fn gpu_time_agrees_with_htas_temporal_breakdown_and_overlap() {
    assert_gpu_time_agrees_with_hta(&fixtures("hta-sampled"), 2);
}

#[test]
fn per_rank_kernel_totals_agree_with_htas_kernel_breakdown() {
    assert_kernel_totals_agree_with_hta(&fixtures("hta-sampled"), 50);
}

/// Traces that rankscope's own windows kept (`torch_profiler_trace_dir`)
/// on a real H200, 2 torchrun ranks over gloo on CUDA tensors.
#[test]
fn traces_kept_by_rankscopes_windows_on_a_gpu_agree_with_hta() {
    let dir = fixtures("h200-torchrun");
    assert_gpu_time_agrees_with_hta(&dir, 2);
    assert_kernel_totals_agree_with_hta(&dir, 5);
    let (_out, report) = import_dir(&dir);
    let top = &report.kernels[0];
    assert!(top.name.contains("gemm") && top.category == "compute");
    // The all-reduce's host calls in the window, one per step.
    let all_reduce: Vec<_> = report
        .collectives
        .iter()
        .filter(|c| c.kind == "all_reduce")
        .collect();
    assert_eq!(all_reduce.len(), 2);
    assert!(all_reduce.iter().all(|c| c.calls == 3 && c.compared == 3));
}

#[test]
fn a_cpu_only_gloo_trace_reports_its_collectives() {
    let (_out, report) = import_dir(&fixtures("hta-gloo-cpu"));
    assert_eq!(report.session.ranks_reporting, [34]);
    assert_eq!(report.session.world_size, 300);
    assert!(report.gpu_time.is_empty());
    let [all_reduce] = report.collectives.as_slice() else {
        panic!("{:?}", report.collectives)
    };
    assert_eq!(
        (all_reduce.rank, all_reduce.kind.as_str(), all_reduce.calls),
        (34, "all_reduce", 10)
    );
    // One rank: nobody to wait for, so the wait is not known.
    assert_eq!(all_reduce.wait_s, None);
    let total_us: f64 = [
        173209.713, 180293.695, 380183.168, 162768.957, 178343.122, 170471.258, 175412.585,
        380583.378, 156666.049, 177523.993,
    ]
    .iter()
    .sum();
    assert!((all_reduce.total_s * 1e6 - total_us).abs() < 0.01);
}

#[test]
fn hostile_traces_are_named_and_the_others_still_report() {
    let dir = tempfile::tempdir().unwrap();
    let good = fixtures("hta-sampled/sampled_rank-0.json.gz");
    std::fs::copy(&good, dir.path().join("sampled_rank-0.json.gz")).unwrap();
    let bytes = std::fs::read(fixtures("hta-sampled/sampled_rank-1.json.gz")).unwrap();
    std::fs::write(
        dir.path().join("truncated_rank-1.json.gz"),
        &bytes[..bytes.len() / 3],
    )
    .unwrap();
    std::fs::write(
        dir.path().join("invalid_rank-2.json"),
        b"{\"traceEvents\": [{\"ph\": ",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("claims_rank-3.json"),
        br#"{"distributedInfo": {"rank": 0}, "traceEvents": []}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("nothing.json"), br#"{"traceEvents": []}"#).unwrap();
    std::fs::write(
        dir.path().join("huge_rank-5.json"),
        br#"{"distributedInfo": {"rank": 5, "world_size": 4294967295}, "traceEvents": []}"#,
    )
    .unwrap();
    std::fs::copy(&good, dir.path().join("second_rank-0.json.gz")).unwrap();
    std::fs::write(dir.path().join("README.txt"), b"not a trace").unwrap();
    let (out, imported) = import_all(&[dir.path().to_path_buf()]);
    assert!(!imported.is_complete());
    let report = imported.report;
    assert_eq!(report.session.ranks_reporting, [0]);
    assert_eq!(report.gpu_time.len(), 1);
    let reason = |file: &str| {
        report
            .session
            .skipped
            .iter()
            .find(|s| s.source.ends_with(file))
            .unwrap_or_else(|| panic!("{file} not named: {:?}", report.session.skipped))
            .reason
            .clone()
    };
    assert!(
        reason("truncated_rank-1.json.gz").contains("reading"),
        "{}",
        reason("truncated_rank-1.json.gz")
    );
    assert!(reason("invalid_rank-2.json").contains("is not a readable trace"));
    assert!(reason("claims_rank-3.json").contains("distributedInfo says rank 0, its name rank 3"));
    assert!(reason("nothing.json").contains("no rank"));
    assert!(reason("second_rank-0.json.gz").contains("a second torch.profiler trace for rank 0"));
    assert!(reason("huge_rank-5.json").contains("past max_world_size (65536)"));
    assert_eq!(
        report.session.skipped.len(),
        6,
        "README.txt is not a trace: not read"
    );
    // The world is the traces' own (128), not the refused trace's claim.
    assert_eq!(report.session.world_size, 128);
    assert!(out.path().join("report.json").exists());
}

#[test]
fn a_fifo_or_missing_path_is_named_and_the_other_traces_still_report() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rank-2.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let missing = dir.path().join("rank-3.json");
    let good = fixtures("hta-sampled/sampled_rank-0.json.gz");
    // Opening the FIFO would block: it is refused by its type, unopened.
    let (_out, imported) = import_all(&[good, fifo, missing]);
    let skipped: Vec<(&str, &str)> = imported
        .report
        .session
        .skipped
        .iter()
        .map(|s| (s.source.rsplit('/').next().unwrap(), s.reason.as_str()))
        .collect();
    assert_eq!(skipped[0], ("rank-2.json", "not a regular file"));
    assert_eq!(skipped[1].0, "rank-3.json");
    assert!(skipped[1].1.starts_with("cannot be read"), "{skipped:?}");
    assert_eq!(imported.report.session.ranks_reporting, [0]);
}

#[test]
fn an_unusable_rank_claim_or_a_second_event_array_refuses_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "a_rank-1.json",
            r#"{"distributedInfo": {"rank": -1}, "traceEvents": []}"#,
            "unusable rank (-1)",
        ),
        (
            "b_rank-1.json",
            r#"{"distributedInfo": {"rank": 1, "world_size": 1.5}, "traceEvents": []}"#,
            "unusable world_size (1.5)",
        ),
        (
            "c_rank-1.json",
            r#"{"traceEvents": [], "traceEvents": []}"#,
            "a second traceEvents array",
        ),
    ];
    for (name, text, _) in cases {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    std::fs::copy(
        fixtures("hta-sampled/sampled_rank-0.json.gz"),
        dir.path().join("d_rank-0.json.gz"),
    )
    .unwrap();
    let (_out, imported) = import_all(&[dir.path().to_path_buf()]);
    for (name, _, reason) in cases {
        let found = imported
            .report
            .session
            .skipped
            .iter()
            .find(|s| s.source.ends_with(name))
            .unwrap();
        assert!(found.reason.contains(reason), "{name}: {}", found.reason);
    }
}

#[test]
fn a_trace_cut_by_its_budget_makes_a_partial_report_that_says_so() {
    let dir = fixtures("hta-sampled");
    let out = tempfile::tempdir().unwrap();
    let options = ImportOptions {
        limits: rankscope_common::kineto::TraceLimits {
            max_rows: 100,
            ..Default::default()
        },
        ..ImportOptions::default()
    };
    let imported = import(&[dir], out.path(), &options, &AnalysisConfig::default()).unwrap();
    assert!(!imported.is_complete());
    let warned: Vec<&str> = imported
        .report
        .recommendations
        .iter()
        .filter(|r| r.category == "data" && r.message.contains("trace was cut"))
        .map(|r| r.message.as_str())
        .collect();
    assert_eq!(warned.len(), 2, "{warned:?}");
}

/// Names past the import's name budget (held once across ranks) go to
/// one name per category, their calls counted as cut: the report is
/// partial and says so, and its kernel totals keep every call.
#[test]
fn names_past_the_name_budget_are_folded_and_counted() {
    let dir = fixtures("hta-sampled");
    let out = tempfile::tempdir().unwrap();
    let whole = import(
        std::slice::from_ref(&dir),
        out.path(),
        &ImportOptions::default(),
        &AnalysisConfig::default(),
    )
    .unwrap();
    let options = ImportOptions {
        name_budget_bytes: 200,
        ..ImportOptions::default()
    };
    let out = tempfile::tempdir().unwrap();
    let folded = import(&[dir], out.path(), &options, &AnalysisConfig::default()).unwrap();
    assert!(!folded.is_complete());
    let cut_names = |imported: &Imported| -> u64 {
        let traces = imported.report.kernel_traces.iter();
        traces.map(|t| t.cut.unwrap().names).sum()
    };
    assert!(cut_names(&folded) > cut_names(&whole));
    let calls =
        |imported: &Imported| -> u64 { imported.report.kernels.iter().map(|k| k.calls).sum() };
    assert_eq!(calls(&folded), calls(&whole));
    assert!(
        folded
            .report
            .kernels
            .iter()
            .any(|k| k.name.ends_with("names past the name budget]")),
        "{:?}",
        folded
            .report
            .kernels
            .iter()
            .map(|k| &k.name)
            .collect::<Vec<_>>()
    );
}

/// A trace whose process groups name their dimensions (Megatron-LM's
/// names) places its rank: report.json's `kernel_traces` say where.
#[test]
fn imported_ranks_carry_their_parallel_coordinates() {
    let dir = tempfile::tempdir().unwrap();
    write_grouped_traces(dir.path(), |_| "TENSOR_MODEL_PARALLEL_GROUP");
    let (_, report) = import_dir(dir.path());
    assert_eq!(coordinate_labels(&report), ["tp 0/2", "tp 1/2"]);
}

/// `--parallel-layout` places a rank its trace's groups do not; a rank the
/// groups place keeps their coordinates; a layout for another world is
/// refused, saying both sizes.
#[test]
fn a_parallel_layout_places_the_ranks_no_trace_places() {
    let dir = tempfile::tempdir().unwrap();
    // Rank 0's trace names its tensor-parallel group, rank 1's none.
    write_grouped_traces(dir.path(), |rank| {
        if rank == 0 {
            "TENSOR_MODEL_PARALLEL_GROUP"
        } else {
            "default_pg"
        }
    });
    let out = tempfile::tempdir().unwrap();
    let with = |layout: &str| ImportOptions {
        layout: Some(layout.parse().unwrap()),
        ..ImportOptions::default()
    };
    let config = AnalysisConfig::default();
    let paths = [dir.path().to_path_buf()];
    let imported = import(&paths, out.path(), &with("dp=2"), &config).unwrap();
    assert_eq!(coordinate_labels(&imported.report), ["tp 0/2", "dp 1/2"]);
    let refused = import(&paths, out.path(), &with("dp=2,tp=2"), &config).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "the parallel layout dp=2,tp=2 places 4 ranks; the traces' world has 2"
    );
}

/// Two ranks' traces of one GEMM each, whose second process group (of
/// both ranks) has the description `desc` gives for the rank.
fn write_grouped_traces(dir: &Path, desc: impl Fn(u32) -> &'static str) {
    for rank in 0..2 {
        let desc = desc(rank);
        let trace = format!(
            r#"{{"distributedInfo": {{"rank": {rank}, "world_size": 2, "pg_config": [
                {{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1]}},
                {{"pg_name": "1", "pg_desc": "{desc}", "ranks": [0, 1]}}
            ]}}, "traceEvents": [
                {{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,
                  "ts": 100, "dur": 50, "args": {{"device": 0, "stream": 7, "correlation": 1}}}}
            ]}}"#
        );
        std::fs::write(dir.join(format!("rank{rank}.json")), trace).unwrap();
    }
}

/// Each kernel trace's coordinates as a label, in rank order.
fn coordinate_labels(report: &Report) -> Vec<String> {
    report
        .kernel_traces
        .iter()
        .map(|t| rankscope_common::parallel::label(&t.parallel))
        .collect()
}

/// The traces of a real two-rank torchrun job (gloo), written once per
/// test run: each rank's VizTracer trace and its torch.profiler trace of
/// the same steps, rank 1's `tokenize` planted 4x slower
/// (support/viztracer_job.py).
fn viztracer_job() -> &'static Path {
    static JOB: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    JOB.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/viztracer_job.py");
        let torchrun = [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
        ];
        run_ok(
            Command::new(python())
                .args(torchrun)
                .arg(script)
                .arg(dir.path())
                .arg("--kineto"),
            "the VizTracer job",
        );
        dir
    })
    .path()
}

/// Copies the trace `from` (JSON, or gzip) to `to` as JSON, every event's
/// time moved `shift_us` later: its host's clock set off by that much.
fn shifted_copy(from: &Path, to: &Path, shift_us: f64) {
    let bytes = std::fs::read(from).unwrap();
    let mut json = String::new();
    if bytes.starts_with(&[0x1f, 0x8b]) {
        use std::io::Read;
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_string(&mut json)
            .unwrap();
    } else {
        json = String::from_utf8(bytes).unwrap();
    }
    let mut trace: Value = serde_json::from_str(&json).unwrap();
    for event in trace["traceEvents"].as_array_mut().unwrap() {
        if let Some(ts) = event["ts"].as_f64() {
            event["ts"] = serde_json::json!(ts + shift_us);
        }
    }
    std::fs::write(to, serde_json::to_vec(&trace).unwrap()).unwrap();
}

/// The starts (µs) and lengths of the slices of category `category`
/// (named `name`, or any) on rank `rank`'s process in a written
/// `trace.json.gz`, in time order.
fn slices(trace: &Value, rank: u64, category: &str, name: Option<&str>) -> Vec<(f64, f64)> {
    let mut found: Vec<(f64, f64)> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == rank + 1 && e["cat"] == category)
        .filter(|e| name.is_none_or(|name| e["name"] == name))
        .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
        .collect();
    found.sort_by(|a, b| a.0.total_cmp(&b.0));
    found
}

/// Asserts two lists of slices are the same to within `slack_us`.
fn assert_same_slices(ours: &[(f64, f64)], theirs: &[(f64, f64)], slack_us: f64) {
    assert_eq!(ours.len(), theirs.len());
    for (a, b) in ours.iter().zip(theirs) {
        assert!(
            (a.0 - b.0).abs() <= slack_us && (a.1 - b.1).abs() <= slack_us,
            "{a:?} against {b:?}"
        );
    }
}

#[test]
fn a_viztracer_job_names_its_slow_function_with_its_rank_on_one_timeline() {
    let (out, imported) = import_all(&[viztracer_job().to_path_buf()]);
    let report = &imported.report;
    assert_eq!(report.session.launcher, "torch.profiler, viztracer");
    assert!(
        report.session.skipped.is_empty(),
        "{:?}",
        report.session.skipped
    );
    let tokenize = report
        .python_functions
        .iter()
        .find(|f| f.name == "tokenize")
        .expect("tokenize is listed");
    assert_eq!(tokenize.calls, 24, "12 steps on each of 2 ranks");
    assert!(tokenize.file.ends_with("viztracer_job.py"));
    assert_eq!((tokenize.max_rank, tokenize.min_rank), (Some(1), Some(0)));
    // The verdict's chain: rank 1 arrives last at the all-reduces, and the
    // Python function it is slow in.
    let verdict = report.verdict.as_ref().expect("a verdict");
    assert_eq!(verdict.ranks, [1], "{}", verdict.sentence);
    assert_eq!(
        verdict.kernel.as_deref(),
        Some("tokenize"),
        "{}",
        verdict.sentence
    );
    assert!(
        verdict.sentence.contains("Python function `tokenize`"),
        "{}",
        verdict.sentence
    );
    // Each rank's host, from its torch.profiler trace.
    assert!(
        report.ranks.iter().all(|r| !r.host.is_empty()),
        "{:?}",
        report.ranks
    );

    let trace = read_trace(&out.path().join("trace.json.gz"));
    check_trace(&trace);
    // Times are whole nanoseconds, written as µs.
    const NS: f64 = 1e-3;
    for rank in 0..2 {
        // VizTracer's monotonic clock and torch.profiler's Unix clock set
        // side by side: each dispatcher op inside its Python call.
        let python = slices(&trace, rank, "python", Some("all_reduce"));
        let ops = slices(&trace, rank, "cpu_op", Some("c10d::allreduce_"));
        assert_eq!((python.len(), ops.len()), (12, 12), "rank {rank}");
        for (call, op) in python.iter().zip(&ops) {
            assert!(
                call.0 <= op.0 + NS && op.0 + op.1 <= call.0 + call.1 + NS,
                "rank {rank}: c10d::allreduce_ {op:?} outside all_reduce {call:?}"
            );
        }
        assert_eq!(slices(&trace, rank, "python", Some("tokenize")).len(), 12);
    }
}

#[test]
fn a_viztracer_trace_is_placed_by_its_ranks_torch_profiler_trace_whatever_its_clock() {
    let job = viztracer_job();
    let shifted = tempfile::tempdir().unwrap();
    for name in [
        "kineto_rank0.pt.trace.json",
        "kineto_rank1.pt.trace.json",
        "viztracer_rank0.json",
    ] {
        std::fs::copy(job.join(name), shifted.path().join(name)).unwrap();
    }
    // Rank 1's VizTracer clock 7.5 s ahead.
    let name = "viztracer_rank1.json";
    shifted_copy(&job.join(name), &shifted.path().join(name), 7.5e6);
    let (before, _) = import_all(&[job.to_path_buf()]);
    let (after, _) = import_all(&[shifted.path().to_path_buf()]);
    let before = read_trace(&before.path().join("trace.json.gz"));
    let after = read_trace(&after.path().join("trace.json.gz"));
    for function in ["tokenize", "all_reduce", "step"] {
        assert_same_slices(
            &slices(&after, 1, "python", Some(function)),
            &slices(&before, 1, "python", Some(function)),
            1.0,
        );
    }
}

/// Asserts `shifted` was aligned from collectives, and rank 1's clock
/// offset moved from `as_run`'s by `ns` (to 1 µs).
fn assert_rank_1_moved(as_run: &Imported, shifted: &Imported, ns: i64) {
    assert_eq!(
        shifted.report.session.clock_sync,
        rankscope_common::payload::ClockSync::Collectives
    );
    let offset = |imported: &Imported| imported.report.ranks[1].clock_offset_ns.unwrap();
    let moved = offset(shifted) - offset(as_run);
    assert!((moved - ns).abs() <= 1_000, "offset moved {moved} ns");
}

#[test]
fn cpu_ranks_are_aligned_through_their_viztracer_traces_barriers() {
    // A gloo job's torch.profiler traces share no GPU kernel, and their
    // host spans are never compared: each rank's VizTracer trace, set
    // beside its torch.profiler trace, bridges them by its barriers.
    let job = viztracer_job();
    let shifted = tempfile::tempdir().unwrap();
    let name = "kineto_rank0.pt.trace.json";
    std::fs::copy(job.join(name), shifted.path().join(name)).unwrap();
    // Rank 1's host clock 7.5 s ahead; each VizTracer clock off its
    // torch.profiler clock by a different amount (rank 0's 2 s behind,
    // rank 1's 3 s ahead of its host's), which the bridge must take out.
    for (name, shift_us) in [
        ("viztracer_rank0.json", -2e6),
        ("kineto_rank1.pt.trace.json", 7.5e6),
        ("viztracer_rank1.json", 10.5e6),
    ] {
        shifted_copy(&job.join(name), &shifted.path().join(name), shift_us);
    }
    let (out_as_run, as_run) = import_all(&[job.to_path_buf()]);
    let (out_shifted, shifted) = import_all(&[shifted.path().to_path_buf()]);
    assert_rank_1_moved(&as_run, &shifted, 7_500_000_000);
    // On the timeline, rank 1's operators and Python calls are where they
    // were against rank 0's.
    let as_run = read_trace(&out_as_run.path().join("trace.json.gz"));
    let shifted = read_trace(&out_shifted.path().join("trace.json.gz"));
    for (category, name) in [("cpu_op", "c10d::allreduce_"), ("python", "tokenize")] {
        assert_same_slices(
            &slices(&shifted, 1, category, Some(name)),
            &slices(&as_run, 1, category, Some(name)),
            1.0,
        );
    }
}

#[test]
fn viztracer_traces_alone_are_aligned_by_their_blocking_collectives() {
    let job = viztracer_job();
    let dir = |shift_us: f64| {
        let dir = tempfile::tempdir().unwrap();
        let rank0 = "viztracer_rank0.json";
        std::fs::copy(job.join(rank0), dir.path().join(rank0)).unwrap();
        let rank1 = "viztracer_rank1.json";
        shifted_copy(&job.join(rank1), &dir.path().join(rank1), shift_us);
        dir
    };
    let (as_run, shifted) = (dir(0.0), dir(-3e6));
    let (out_as_run, as_run) = import_all(&[as_run.path().to_path_buf()]);
    let (out_shifted, shifted) = import_all(&[shifted.path().to_path_buf()]);
    assert_eq!(shifted.report.session.launcher, "viztracer");
    // Without torch.profiler traces, the torch.distributed calls are the
    // collectives: rank 1 arrives last, slow in `tokenize`.
    let verdict = shifted.report.verdict.as_ref().expect("a verdict");
    assert_eq!(verdict.ranks, [1], "{}", verdict.sentence);
    assert_eq!(
        verdict.kernel.as_deref(),
        Some("tokenize"),
        "{}",
        verdict.sentence
    );
    assert_rank_1_moved(&as_run, &shifted, -3_000_000_000);
    assert_eq!(
        shifted.report.ranks[1].clock_offset_spread_ns,
        as_run.report.ranks[1].clock_offset_spread_ns
    );
    let as_run = read_trace(&out_as_run.path().join("trace.json.gz"));
    let shifted = read_trace(&out_shifted.path().join("trace.json.gz"));
    // The clocks are the ranks' own: each rank's slices stay where they
    // were against the other's.
    for rank in 0..2 {
        assert_same_slices(
            &slices(&shifted, rank, "python", Some("tokenize")),
            &slices(&as_run, rank, "python", Some("tokenize")),
            1.0,
        );
    }
}

/// A torch.profiler trace of rank `rank` of `world_size` on an NCCL job, its host
/// clock `shift_us` ahead: 8 steps, each a compute kernel (3 ms on rank
/// 1, which arrives last; 1 ms on rank 0) then an all-reduce kernel that
/// ends, on every rank, 0.5 ms after rank 1 arrives.
fn nccl_trace(rank: u32, world_size: u32, shift_us: f64) -> String {
    let work_us = if rank == 1 { 3_000.0 } else { 1_000.0 };
    let mut events = Vec::new();
    for step in 0..8 {
        let begin = 1_700_000_000_000_000.0 + f64::from(step) * 10_000.0 + shift_us;
        let correlation = step * 2;
        events.push(
            serde_json::json!({"ph": "X", "cat": "kernel", "name": "gemm_kernel",
            "ts": begin, "dur": work_us,
            "args": {"stream": 7, "device": rank, "correlation": correlation}}),
        );
        let arrive = begin + work_us;
        events.push(serde_json::json!({"ph": "X", "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
            "ts": arrive, "dur": begin + 3_500.0 - arrive,
            "args": {"stream": 13, "device": rank, "correlation": correlation + 1}}));
        events.push(serde_json::json!({"ph": "X", "cat": "user_annotation",
            "name": "nccl:all_reduce", "ts": arrive - 20.0, "dur": 15.0}));
    }
    serde_json::json!({"distributedInfo": {"rank": rank, "world_size": world_size, "backend": "nccl"},
                       "traceEvents": events})
    .to_string()
}

#[test]
fn clocks_shifted_by_known_amounts_are_aligned_by_gpu_collectives() {
    let job = |shift_us: f64| {
        let dir = tempfile::tempdir().unwrap();
        for rank in 0..2 {
            let trace = nccl_trace(rank, 2, if rank == 1 { shift_us } else { 0.0 });
            std::fs::write(dir.path().join(format!("rank{rank}.json")), trace).unwrap();
        }
        dir
    };
    let (as_run, shifted) = (job(0.0), job(40_000.0));
    let (out_as_run, as_run) = import_all(&[as_run.path().to_path_buf()]);
    let (out_shifted, shifted) = import_all(&[shifted.path().to_path_buf()]);
    for (imported, offset_ns) in [(&as_run, 0), (&shifted, 40_000_000)] {
        let report = &imported.report;
        assert_eq!(
            report.session.clock_sync,
            rankscope_common::payload::ClockSync::Collectives
        );
        let clock = |r: usize| {
            (
                report.ranks[r].clock_offset_ns,
                report.ranks[r].clock_offset_spread_ns,
            )
        };
        assert_eq!(clock(0), (Some(0), Some(0)), "rank 0 is the reference");
        assert_eq!(clock(1), (Some(offset_ns), Some(0)));
    }
    // On one clock, both ranks' all-reduces end together, and rank 1's
    // compute is where it was.
    let as_run = read_trace(&out_as_run.path().join("trace.json.gz"));
    let shifted = read_trace(&out_shifted.path().join("trace.json.gz"));
    check_trace(&shifted);
    let kernels = |trace: &Value, rank: u64| slices(trace, rank, "kernel", None);
    for rank in 0..2 {
        assert_eq!(kernels(&shifted, rank).len(), 16);
        assert_same_slices(&kernels(&shifted, rank), &kernels(&as_run, rank), 1.0);
    }
    let all_reduce = Some("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)");
    let ends = |rank: u64| -> Vec<f64> {
        slices(&shifted, rank, "kernel", all_reduce)
            .iter()
            .map(|(ts, dur)| ts + dur)
            .collect()
    };
    assert_same_slices(
        &ends(0).into_iter().map(|e| (e, 0.0)).collect::<Vec<_>>(),
        &ends(1).into_iter().map(|e| (e, 0.0)).collect::<Vec<_>>(),
        1.0,
    );
}

#[test]
fn ranks_with_gpu_collectives_align_to_each_other_beside_a_viztracer_only_rank_0() {
    let dir = tempfile::tempdir().unwrap();
    let viztracer = serde_json::json!({"viztracer_metadata": {"version": "1.1.1"},
        "traceEvents": [{"ph": "X", "cat": "FEE", "name": "main (/app/main.py:1)",
                         "ts": 5.0, "dur": 100.0, "pid": 7, "tid": 7}]});
    std::fs::write(dir.path().join("rank0.json"), viztracer.to_string()).unwrap();
    for (rank, shift_us) in [(1, 0.0), (2, 40_000.0)] {
        let trace = nccl_trace(rank, 3, shift_us);
        std::fs::write(dir.path().join(format!("rank{rank}.json")), trace).unwrap();
    }
    let (_out, imported) = import_all(&[dir.path().to_path_buf()]);
    let report = &imported.report;
    let offset = |rank: u32| {
        let summary = report.ranks.iter().find(|r| r.rank == rank).unwrap();
        summary.clock_offset_ns
    };
    // Rank 0 shares no collective with the others; rank 1, the lowest
    // with NCCL kernels, is the reference, and rank 2 is aligned to it.
    assert_eq!(offset(1), Some(0));
    assert_eq!(offset(2), Some(40_000_000));
    assert_eq!(offset(0), None);
    assert_eq!(
        report.session.clock_sync,
        rankscope_common::payload::ClockSync::Collectives
    );
    let notice = report
        .session
        .notices
        .iter()
        .find(|n| n.message.starts_with("not aligned from collectives"))
        .expect("a notice names the unaligned trace");
    assert!(
        notice.message.contains("rank 1's trace"),
        "{}",
        notice.message
    );
    assert!(notice.message.contains("rank0.json"), "{}", notice.message);
}

#[test]
fn host_spans_of_collectives_never_align_ranks_and_each_keeps_its_clock() {
    // gloo on CUDA tensors: no NCCL kernel, only the host's spans, which
    // end when gloo's thread is done, not together.
    let real = fixtures("h200-torchrun");
    let shifted = tempfile::tempdir().unwrap();
    let rank0 = "rank0-window1.pt.trace.json.gz";
    std::fs::copy(real.join(rank0), shifted.path().join(rank0)).unwrap();
    let rank1 = shifted.path().join("rank1-window1.pt.trace.json");
    shifted_copy(&real.join("rank1-window1.pt.trace.json.gz"), &rank1, -2.5e6);
    let (out, imported) = import_all(&[shifted.path().to_path_buf()]);
    let report = &imported.report;
    assert_eq!(
        report.session.clock_sync,
        rankscope_common::payload::ClockSync::None
    );
    assert_eq!(report.ranks[1].clock_offset_ns, None);
    let notice = report
        .session
        .notices
        .iter()
        .find(|n| n.message.contains("not aligned from collectives"))
        .expect("a notice says the clocks are not aligned");
    assert!(notice.message.contains(&rank1.display().to_string()));
    // Each trace on its own Unix clock: rank 1's 2.5 s before rank 0's.
    let (out_real, _) = import_all(&[real]);
    let first = |dir: &Path, rank: u64| {
        slices(
            &read_trace(&dir.join("trace.json.gz")),
            rank,
            "kernel",
            None,
        )[0]
        .0
    };
    let gap = |dir: &Path| first(dir, 1) - first(dir, 0);
    let moved = gap(out.path()) - gap(out_real.path());
    assert!((moved + 2.5e6).abs() <= 1.0, "rank 1 moved {moved} µs");
}
