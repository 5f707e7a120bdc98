//! The reader on real traces (HTA's fixtures) and on hostile ones.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/kineto")
        .join(name)
}

fn read_str(json: &str) -> Result<RankTrace, TraceError> {
    read_trace_from(
        json.as_bytes(),
        Path::new("t.json"),
        &TraceLimits::default(),
    )
}

#[test]
fn a_real_gpu_trace_is_read_into_its_rows() {
    let trace = read_trace(
        &fixture("hta-sampled/sampled_rank-0.json.gz"),
        &TraceLimits::default(),
    )
    .unwrap();
    assert_eq!(trace.rank, Some(0));
    assert_eq!(trace.world_size, Some(128));
    assert_eq!(trace.backend.as_deref(), Some("nccl"));
    // 1154 kernels, 40 copies and 10 sets, each with a stream and a correlation.
    assert_eq!(trace.gpu.name.len(), 1154 + 40 + 10);
    // The 1204 CUDA runtime calls carry correlation ids.
    assert_eq!(trace.launches.start_ns.len(), 1204);
    assert_eq!(trace.steps.len(), 2);
    assert_eq!(trace.events, 4855);
    assert!(trace.cut.is_empty(), "{:?}", trace.cut);
    let memory = trace
        .gpu
        .category
        .iter()
        .filter(|c| **c == KernelCategory::Memory)
        .count();
    assert_eq!(memory, 50);
    // Kineto's microseconds, whole: 1682725898082228 µs.
    let first = trace
        .gpu
        .name
        .iter()
        .position(|n| trace.names[*n as usize].contains("permute_2D"))
        .unwrap();
    assert_eq!(trace.gpu.start_ns[first], 1_682_725_898_082_228_000);
    assert_eq!(trace.gpu.dur_ns[first], 10_000);
    // nccl:all_reduce ×4, nccl:all_to_all ×4, nccl:_all_gather_base ×2.
    let kinds: Vec<&str> = trace
        .collectives
        .kind
        .iter()
        .map(|k| trace.names[*k as usize].as_str())
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == "all_reduce").count(), 4);
    assert_eq!(kinds.iter().filter(|k| **k == "all_to_all").count(), 4);
    assert_eq!(kinds.iter().filter(|k| **k == "all_gather").count(), 2);
}

#[test]
fn a_cpu_only_gloo_trace_gives_its_collectives_and_base_time() {
    let trace = read_trace(
        &fixture("hta-gloo-cpu/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"),
        &TraceLimits {
            cpu_spans: true,
            ..TraceLimits::default()
        },
    )
    .unwrap();
    assert_eq!((trace.rank, trace.world_size), (Some(34), Some(300)));
    assert_eq!(trace.base_time_ns, Some(1_719_853_884_000_000_000));
    assert!(trace.gpu.name.is_empty());
    assert_eq!(trace.collectives.kind.len(), 10);
    assert_eq!(trace.steps.len(), 1);
    let op = |name: &str| {
        let i = trace
            .cpu_ops
            .name
            .iter()
            .position(|n| trace.names[*n as usize] == name)
            .unwrap();
        (trace.cpu_ops.calls[i], trace.cpu_ops.total_ns[i])
    };
    // aten::empty: 2.503 + 0.473 + 0.401 + 0.587 µs.
    assert_eq!(op("aten::empty"), (4, 3_964));
    // The same calls one by one, with their threads, for the timeline.
    let spans = &trace.cpu_spans;
    let empty: Vec<usize> = (0..spans.name.len())
        .filter(|&i| trace.names[spans.name[i] as usize] == "aten::empty")
        .collect();
    assert_eq!(empty.len(), 4);
    assert_eq!(empty.iter().map(|&i| spans.dur_ns[i]).sum::<i64>(), 3_964);
    assert!(
        empty.iter().all(|&i| spans.thread[i] != 0),
        "the trace's thread ids"
    );
    assert_eq!(
        spans.name.len() as u64,
        trace.cpu_ops.calls.iter().sum::<u64>(),
        "every operator call, one span each"
    );
    // 1212075548353.304 µs, to the nanosecond.
    assert!(trace.collectives.start_ns.contains(&1_212_075_548_353_304));
}

#[test]
fn record_param_comms_gives_group_and_bytes() {
    let trace = read_str(
        r#"{"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 10, "dur": 5,
         "args": {"Collective name": "allreduce", "Process Group Name": "0", "In msg nelems": 1024,
                  "dtype": "Float"}},
        {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "ts": 11, "dur": 3}
    ]}"#,
    )
    .unwrap();
    let rows = &trace.collectives;
    assert_eq!(
        rows.kind.len(),
        1,
        "record_param_comms is used where the trace has it"
    );
    assert_eq!(trace.names[rows.kind[0] as usize], "all_reduce");
    assert_eq!(
        rows.group[0].map(|g| trace.names[g as usize].as_str()),
        Some("0")
    );
    assert_eq!(rows.bytes[0], Some(4096));
}

#[test]
fn a_bare_array_of_events_is_a_trace() {
    let trace = read_str(
        r#"[{"ph": "X", "name": "k", "ts": 1, "dur": 2, "args": {"stream": 7, "correlation": 3}}]"#,
    )
    .unwrap();
    assert_eq!(trace.gpu.stream, vec![7]);
}

#[test]
fn json_without_trace_events_is_refused() {
    assert!(matches!(
        read_str(r#"{"schemaVersion": 1}"#),
        Err(TraceError::NoEvents { .. })
    ));
}

#[test]
fn invalid_json_names_the_file_and_the_place() {
    let error = read_str(r#"{"traceEvents": [{"ph": "X", "name": }]}"#).unwrap_err();
    assert!(matches!(error, TraceError::Format { .. }));
    let text = crate::error::Chain(&error).to_string();
    assert!(text.contains("t.json is not a readable trace"), "{text}");
    assert!(text.contains("line 1 column"), "{text}");
}

#[test]
fn a_truncated_gzip_trace_is_an_io_error() {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(br#"{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}]}"#)
        .unwrap();
    let bytes = gz.finish().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank-1.json.gz");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let error = read_trace(&path, &TraceLimits::default()).unwrap_err();
    assert!(matches!(error, TraceError::Io { .. }), "{error:?}");
    assert!(crate::error::Chain(&error)
        .to_string()
        .contains("rank-1.json.gz"));
}

#[test]
fn a_two_gigabyte_string_stops_at_the_event_limit() {
    // Never materialised: the reader stops after the limit, 16 MiB here.
    let head = br#"{"traceEvents": [{"ph": "X", "name": ""#.as_slice();
    let input = head.chain(std::io::repeat(b'a').take(2 << 30));
    let error = read_trace_from(input, Path::new("big.json"), &TraceLimits::default()).unwrap_err();
    let text = crate::error::Chain(&error).to_string();
    assert!(text.contains("larger than 16 MiB"), "{text}");
}

#[test]
fn deep_nesting_is_skipped_or_refused_never_a_stack_overflow() {
    let nested = |field: &str| {
        format!(
            r#"{{"traceEvents": [{{"ph": "X", "name": "k", "ts": 1, "dur": 1, "args": {{"{field}": {}{}}}}}]}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        )
    };
    // An argument the reader does not use is skipped without recursion,
    // and so is one it reads as an integer, where it is not one.
    for field in ["Input Dims", "stream"] {
        let trace = read_str(&nested(field)).unwrap();
        assert_eq!(trace.events, 1, "{field}");
    }
    // One it reads as text is refused at serde_json's depth limit.
    let error = read_str(&nested("dtype")).unwrap_err();
    assert!(
        crate::error::Chain(&error)
            .to_string()
            .contains("recursion limit"),
        "{error:?}"
    );
}

#[test]
fn negative_and_overflowing_times_are_counted_and_left_out() {
    let trace = read_str(
        r#"{"traceEvents": [
        {"ph": "X", "name": "a", "ts": -5, "dur": 1, "args": {"stream": 7, "correlation": 1}},
        {"ph": "X", "name": "b", "ts": 1e300, "dur": 1, "args": {"stream": 7, "correlation": 2}},
        {"ph": "X", "name": "c", "ts": 1, "dur": -1, "args": {"stream": 7, "correlation": 3}},
        {"ph": "X", "name": "d", "ts": 1, "dur": 2, "args": {"stream": 7, "correlation": 4}}
    ]}"#,
    )
    .unwrap();
    assert_eq!(trace.cut.bad_times, 3);
    assert_eq!(trace.gpu.correlation, vec![4]);
}

/// A gzip trace that inflates past `max_bytes` (a zip bomb: a small file,
/// a huge stream) is refused as too large, naming the limit, once that many
/// bytes were read; within the limit, the same trace reads.
#[test]
fn a_trace_that_inflates_past_its_byte_limit_is_refused_as_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank0.json.gz");
    let mut gzip = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::best(),
    );
    gzip.write_all(br#"{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 1}], "pad": ""#)
        .unwrap();
    let spaces = vec![b' '; 1 << 20];
    for _ in 0..64 {
        gzip.write_all(&spaces).unwrap();
    }
    gzip.write_all(br#""}"#).unwrap();
    gzip.finish().unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 1 << 20);
    let limits = TraceLimits {
        max_bytes: 8 << 20,
        max_event_bytes: 1 << 30,
        ..TraceLimits::default()
    };
    let refused = read_trace(&path, &limits);
    assert!(
        matches!(&refused, Err(TraceError::TooLarge { limit, .. }) if *limit == 8 << 20),
        "{refused:?}"
    );
    assert!(refused.unwrap_err().to_string().contains("--max-bytes"));
    let limits = TraceLimits {
        max_bytes: 128 << 20,
        ..limits
    };
    assert_eq!(read_trace(&path, &limits).unwrap().events, 1);
}

#[test]
fn distinct_names_and_rows_past_the_budget_are_counted() {
    let limits = TraceLimits {
        max_rows: 50,
        max_names: 100,
        max_name_bytes: 8,
        ..TraceLimits::default()
    };
    let mut json = String::from(r#"{"traceEvents": ["#);
    for i in 0..1000 {
        json += &format!(
            r#"{{"ph": "X", "name": "kernel_{i}", "ts": {i}, "dur": 1, "args": {{"stream": 7, "correlation": {i}}}}},"#
        );
    }
    json += r#"{"ph": "X", "name": "last", "ts": 1, "dur": 1}]}"#;
    let trace = read_trace_from(json.as_bytes(), Path::new("t"), &limits).unwrap();
    // Names cut to 8 bytes: kernel_1 … kernel_9, then kernel_1 again for
    // kernel_10…: 9 distinct kept, every one past 8 bytes counted.
    assert_eq!(trace.cut.long_names, 990);
    assert_eq!(trace.gpu.name.len(), 50);
    assert_eq!(trace.cut.rows, 950);
    let limits = TraceLimits {
        max_names: 100,
        ..TraceLimits::default()
    };
    let trace = read_trace_from(json.as_bytes(), Path::new("t"), &limits).unwrap();
    assert_eq!(trace.names.len(), 100);
    assert_eq!(trace.cut.names, 901);
}

#[test]
fn names_of_python_frames_and_runtime_calls_are_not_kept() {
    let mut json = String::from(r#"{"traceEvents": ["#);
    for i in 0..1000 {
        json += &format!(
            r#"{{"ph": "X", "cat": "python_function", "name": "frame_{i}.py(1): f", "ts": {i}, "dur": 1}},
               {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunch_{i}", "ts": {i}, "dur": 1,
                 "args": {{"correlation": {i}}}}},"#
        );
    }
    json += r#"{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"stream": 7, "correlation": 3}}]}"#;
    let trace = read_str(&json).unwrap();
    assert_eq!(trace.names, ["k"]);
    assert_eq!(
        trace.launches.correlation.len(),
        1000,
        "launches are kept without their names"
    );
    assert!(trace.cut.is_empty(), "{:?}", trace.cut);
}

#[test]
fn a_base_time_that_is_no_unix_time_is_counted_and_left_out() {
    for base in ["-9000000000000000000", "9000000000000000000", "\"soon\""] {
        let trace = read_str(&format!(
            r#"{{"baseTimeNanoseconds": {base}, "traceEvents": []}}"#
        ))
        .unwrap();
        assert_eq!(
            (trace.base_time_ns, trace.cut.bad_times),
            (None, 1),
            "{base}"
        );
    }
}

#[test]
fn the_rank_in_a_file_name() {
    let cases = [
        ("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", Some(34)),
        ("sampled_rank-1.json.gz", Some(1)),
        ("host_123.1700000000000-rank_7.pt.trace.json", Some(7)),
        ("trace-TP-RANK3.json", Some(3)),
        ("ranked-rank12.json", Some(12)),
        ("trace.json", None),
    ];
    for (name, rank) in cases {
        assert_eq!(rank_from_file_name(Path::new(name)), rank, "{name}");
    }
}

#[test]
fn the_process_groups_place_the_rank_along_each_dimension() {
    let trace = read_str(
        r#"{"distributedInfo": {"rank": 6, "world_size": 8, "pg_config": [
            {"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3, 4, 5, 6, 7]},
            {"pg_name": "1", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": [4, 5, 6, 7]},
            {"pg_name": "2", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": [2, 6]},
            {"pg_name": "3", "pg_desc": "mesh_dp", "ranks": [6, -1]},
            {"pg_name": "4", "pg_desc": 7, "ranks": [6, 7]},
            {"pg_name": "5", "pg_desc": "expert", "ranks": "6,7"},
            "not a group"
        ]}, "traceEvents": []}"#,
    )
    .unwrap();
    assert_eq!(crate::parallel::label(&trace.parallel), "tp 2/4 · pp 1/2");
    // A real trace's groups name no dimension (`default_pg`, `undefined`).
    let gloo = read_trace(
        &fixture("hta-gloo-cpu/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"),
        &TraceLimits::default(),
    )
    .unwrap();
    assert!(gloo.parallel.is_empty());
    // Groups that are no list leave the trace readable.
    let odd =
        read_str(r#"{"distributedInfo": {"rank": 0, "pg_config": {"a": 1}}, "traceEvents": []}"#);
    assert!(odd.unwrap().parallel.is_empty());
}

#[test]
fn a_viztracer_trace_gives_its_python_calls_one_by_one() {
    // VizTracer's own output: function calls as `FEE` (or `fee`) complete
    // events, its metadata after the events.
    let json = r#"{"traceEvents": [
        {"ph": "M", "pid": 7, "tid": 7, "name": "thread_name", "args": {"name": "MainThread"}},
        {"pid": 7, "tid": 7, "ts": 100.5, "ph": "X", "cat": "FEE", "dur": 3.25, "name": "fib (/p.py:5)"},
        {"pid": 7, "tid": 8, "ts": 90.0, "ph": "X", "dur": 20.0, "name": "Work.run (/p.py:9)", "cat": "fee"},
        {"pid": 7, "tid": 7, "ts": 100.0, "ph": "i", "cat": "FEE", "name": "not a call"}],
        "viztracer_metadata": {"version": "1.1.1", "overflow": false,
                               "baseTimeNanoseconds": 1795900703108290593}}"#;
    let trace = read_str(json).unwrap();
    assert!(trace.viztracer);
    assert_eq!(trace.base_time_ns, Some(1_795_900_703_108_290_593));
    let calls = &trace.python_calls;
    let named: Vec<&str> = calls
        .name
        .iter()
        .map(|&id| trace.names[id as usize].as_str())
        .collect();
    assert_eq!(named, ["fib (/p.py:5)", "Work.run (/p.py:9)"]);
    assert_eq!(calls.thread, [7, 8]);
    assert_eq!(calls.start_ns, [100_500, 90_000]);
    assert_eq!(calls.dur_ns, [3_250, 20_000]);
    assert!(
        trace.cpu_ops.name.is_empty(),
        "a Python call is no CPU operator"
    );
    assert!(!read_str(r#"{"traceEvents": []}"#).unwrap().viztracer);
}

#[test]
fn the_host_that_wrote_a_trace_is_read() {
    let trace = read_str(r#"{"host_name": "node-3", "traceEvents": []}"#).unwrap();
    assert_eq!(trace.host.as_deref(), Some("node-3"));
    let not_text = read_str(r#"{"host_name": 7, "traceEvents": []}"#).unwrap();
    assert_eq!(not_text.host, None);
}
