//! A torch.profiler trace a rank wrote during its session: read into the
//! `kernels` and `collectives` tables on the session clock, carried in the
//! payload, and analysed in the report rank 0 writes.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rankscope::{Config, Profiler, RankEnv};
use rankscope_common::payload;
use rankscope_common::table::{CollectivesView, KernelsView};

fn profiler(out: &Path) -> Profiler {
    let config = Config {
        output_dir: out.to_path_buf(),
        collect_host: false,
        gpu_source: rankscope_common::config::GpuSourceKind::None,
        ..Config::default()
    };
    Profiler::with_rank_env(config, RankEnv::single())
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// A Kineto trace of one window starting at `t0` µs (wall clock): a GEMM
/// 0–10 ms, an NCCL all-reduce 5–25 ms, a copy 40–50 ms (each launched
/// about a millisecond before `t0`), the host's `nccl:all_reduce`, the
/// CPU operator `aten::mm` on thread 42 around the GEMM's launch, and a
/// kernel from a minute before the session; the rank is rank 0 of a
/// tensor-parallel group of 2.
fn write_trace(path: &Path, t0: u64) {
    let kernel = |name: &str, ts: u64, dur: u64, correlation: u32| {
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "ts": {ts}, "dur": {dur},
                "args": {{"stream": 7, "correlation": {correlation}, "device": 0}}}}"#
        )
    };
    let launch = |correlation: u32| {
        format!(
            r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": {}, "dur": 5,
                "args": {{"correlation": {correlation}}}}}"#,
            t0 - 1_000 + u64::from(correlation) * 10
        )
    };
    let events = [
        launch(1),
        launch(2),
        launch(3),
        kernel("sm90_gemm", t0, 10_000, 1),
        kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            t0 + 5_000,
            20_000,
            2,
        ),
        kernel("Memcpy DtoD (Device -> Device)", t0 + 40_000, 10_000, 3),
        kernel("sm90_gemm", t0 - 60_000_000, 10, 4),
        format!(
            r#"{{"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "ts": {}, "dur": 20000}}"#,
            t0 + 4_000
        ),
        format!(
            r#"{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 42, "ts": {}, "dur": 30}}"#,
            t0 - 1_000
        ),
    ];
    std::fs::write(
        path,
        format!(
            r#"{{"distributedInfo": {{"rank": 0, "pg_config": [
                {{"pg_desc": "mesh_tp", "ranks": [0, 1]}}]}},
                "traceEvents": [{}]}}"#,
            events.join(",")
        ),
    )
    .unwrap();
}

#[test]
fn a_window_trace_becomes_rows_on_the_session_clock_and_the_reports_gpu_time() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path());
    let session = profiler.session("kernels", &[]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let t0 = {
        // The launches, a millisecond before t0, happen inside `decode`.
        let _decode = profiler.stage("decode");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let t0 = now_us();
        std::thread::sleep(std::time::Duration::from_millis(1));
        t0
    };
    let trace = out.path().join("window-1.pt.trace.json");
    write_trace(&trace, t0);
    let rows = profiler.add_kernel_trace(&trace, 1).unwrap();
    let kept = (
        rows.events,
        rows.kernels,
        rows.collectives,
        rows.before_session,
    );
    assert_eq!(kept, (9, 3, 1, 1));
    assert_eq!(rows.cpu_spans, 1);
    let outcome = session.finish().unwrap();

    let payload = payload::decode(&std::fs::read(&outcome.spill_file).unwrap()).unwrap();
    let kernels = payload.view::<KernelsView>().unwrap().unwrap();
    assert_eq!(kernels.len, 3);
    assert_eq!(kernels.name.get(0), "sm90_gemm");
    assert_eq!(kernels.category.get(1), "communication");
    assert_eq!(kernels.window[0], 1);
    // On the session clock: after the 20 ms sleep, before the finish.
    let session_ns = payload.header.clock.duration_ns;
    assert!(kernels.start_ns[0] >= 20_000_000 && kernels.start_ns[0] < session_ns);
    assert_eq!(kernels.start_ns[1] - kernels.start_ns[0], 5_000_000);
    let calls = payload.view::<CollectivesView>().unwrap().unwrap();
    assert_eq!((calls.len, calls.kind.get(0)), (1, "all_reduce"));
    // The trace's process groups place the rank: its header says where.
    let tp = rankscope_common::parallel::label(&payload.header.parallel);
    assert_eq!(tp, "tp 0/2");

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(outcome.session_dir.join("report.json")).unwrap())
            .unwrap();
    let gpu_time = &report["gpu_time"][0];
    // Window 0–50 ms; busy 0–25 and 40–50 ms (idle 15); compute 0–10;
    // communication 5–25, of which 5–10 under compute (25 %).
    let close = |field: &str, want: f64| {
        let got = gpu_time[field].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "{field}: {got}, want {want}");
    };
    close("window_s", 0.050);
    close("idle_s", 0.015);
    close("compute_s", 0.010);
    close("communication_s", 0.020);
    close("comm_overlap_pct", 25.0);
    assert_eq!(
        report["kernels"][0]["name"],
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    );
    assert_eq!(report["collectives"][0]["kind"], "all_reduce");
    assert_eq!(
        report["kernel_traces"][0]["events"],
        serde_json::Value::Null
    );
    let tp = serde_json::json!([{"dim": "tp", "index": 0, "size": 2}]);
    assert_eq!(report["ranks"][0]["parallel"], tp);
    assert_eq!(report["kernel_traces"][0]["parallel"], tp);
    // Stages to kernels: the three activities were launched inside `decode`.
    let decode = &report["stage_kernels"][0];
    assert_eq!(decode["name"], "decode");
    assert_eq!(decode["calls"], 3);
    assert!((decode["total_s"].as_f64().unwrap() - 0.040).abs() < 1e-9);
    assert!(outcome.session_dir.join("raw/kernels.arrow").exists());

    // The merged timeline: the GPU stream's slices beside the rank's stages.
    let gz = std::fs::File::open(outcome.session_dir.join("trace.json.gz")).unwrap();
    let trace: serde_json::Value =
        serde_json::from_reader(flate2::read::GzDecoder::new(gz)).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let named = |name: &str| {
        events
            .iter()
            .find(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == name)
            .map(|e| e["tid"].clone())
    };
    let stream = named("GPU 0 stream 7").expect("a track for the GPU stream");
    let collectives = named("collectives (host)").expect("a track for the collectives");
    let slice = |name: &str| {
        events
            .iter()
            .find(|e| e["ph"] == "X" && e["name"] == name)
            .unwrap_or_else(|| panic!("no slice {name}"))
    };
    let gemm = slice("sm90_gemm");
    assert_eq!(
        (&gemm["tid"], &gemm["cat"]),
        (&stream, &serde_json::json!("kernel"))
    );
    assert_eq!(gemm["dur"], 10_000.0);
    let nccl = slice("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
    let gap_us = nccl["ts"].as_f64().unwrap() - gemm["ts"].as_f64().unwrap();
    assert!((gap_us - 5_000.0).abs() < 1e-3, "{gap_us}");
    assert_eq!(slice("all_reduce")["tid"], collectives);
    // An arrow from the GEMM's launch on the host to the GEMM.
    let launches = named("kernel launches (host)").expect("a track for the launches");
    let flow = |ph: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["cat"] == "launch")
            .min_by(|a, b| {
                a["ts"]
                    .as_f64()
                    .unwrap()
                    .total_cmp(&b["ts"].as_f64().unwrap())
            })
            .unwrap_or_else(|| panic!("no flow event {ph}"))
    };
    let (from, to) = (flow("s"), flow("f"));
    assert_eq!((&from["tid"], &to["tid"]), (&launches, &stream));
    assert_eq!(from["id"], to["id"]);
    assert_eq!(to["ts"], gemm["ts"]);
    // Launched 990 µs before the GEMM ran.
    let lead_us = gemm["ts"].as_f64().unwrap() - from["ts"].as_f64().unwrap();
    assert!((lead_us - 990.0).abs() < 1e-3, "{lead_us}");
    // The CPU operator around the launch, on its thread's track.
    let ops = named("CPU operators, thread 42").expect("a track for the host thread's operators");
    let mm = slice("aten::mm");
    assert_eq!(
        (&mm["tid"], &mm["cat"]),
        (&ops, &serde_json::json!("cpu_op"))
    );
    assert_eq!(mm["dur"], 30.0);
    let before_gemm_us = gemm["ts"].as_f64().unwrap() - mm["ts"].as_f64().unwrap();
    assert!((before_gemm_us - 1_000.0).abs() < 1e-3, "{before_gemm_us}");
}

#[test]
fn a_trace_outside_a_session_is_not_read_and_a_broken_one_is_an_error() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path());
    let missing = out.path().join("missing.json");
    assert_eq!(
        profiler.add_kernel_trace(&missing, 1).unwrap(),
        Default::default()
    );
    let session = profiler.session("kernels", &[]).unwrap();
    let broken = out.path().join("broken.json");
    std::fs::write(&broken, b"{\"traceEvents\": [").unwrap();
    let error = profiler.add_kernel_trace(&broken, 1).unwrap_err();
    assert!(rankscope::Chain(&error).to_string().contains("broken.json"));
    session.finish().unwrap();
}
