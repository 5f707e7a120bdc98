//! The agent's recording, end to end through a real session and real files.

use rankscope::{BlockComputation, Config, DiffusionStep, MemoryReading, Profiler, RankEnv};
use rankscope_common::env::Launcher;
use rankscope_common::gather::{accept, Expect, Rejection};
use rankscope_common::payload;
use rankscope_common::spill;
use rankscope_common::table::*;
use rankscope_common::Payload;

fn profiler(out: &std::path::Path, tweak: impl FnOnce(&mut Config)) -> Profiler {
    let mut config = Config {
        output_dir: out.to_path_buf(),
        gather_timeout_s: 5.0,
        ..Config::default()
    };
    tweak(&mut config);
    Profiler::with_rank_env(config, RankEnv::single())
}

/// No sampler: a session whose only rows are the test's.
fn no_telemetry(config: &mut Config) {
    config.collect_host = false;
    config.gpu_source = rankscope_common::config::GpuSourceKind::None;
}

/// The report.json rank 0 wrote for `outcome`'s session.
fn report_json(outcome: &rankscope::Outcome) -> serde_json::Value {
    let path = outcome.session_dir.join("report.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The program's own metrics rows: not the agent's overhead rows.
fn own_metrics(payload: &Payload) -> usize {
    payload.view::<MetricsView>().unwrap().map_or(0, |m| {
        (0..m.len)
            .filter(|&i| m.section.get(i) != OVERHEAD_SECTION)
            .count()
    })
}

fn spilled(outcome: &rankscope::Outcome) -> Payload {
    payload::decode(&std::fs::read(&outcome.spill_file).unwrap()).unwrap()
}

#[test]
fn stages_nest_with_parents_depths_and_call_indices() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |_| {});
    let session = profiler.session("nest", &[("mode", "tp1")]).unwrap();
    {
        let _outer = profiler.stage_with("block", &serde_json::json!({"index": 0}));
        for _ in 0..2 {
            let _inner = profiler.stage("step");
        }
    }
    let decode = rankscope::StageName::new("decode");
    profiler.begin(&decode, None).unwrap();
    assert!(profiler.end_named(&decode));
    assert!(!profiler.end_named(&decode), "nothing left open");
    let payload = spilled(&session.finish().unwrap());
    assert_eq!(payload.header.session.name, "nest");
    assert_eq!(
        payload.header.session.tags,
        vec![("mode".into(), "tp1".into())]
    );

    let batch = payload.table(Table::Stages).unwrap();
    let stages = StagesView::new(batch).unwrap();
    let rows: Vec<_> = (0..stages.len)
        .map(|i| (stages.name.get(i), stages.depth[i], stages.call_index[i]))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("step", 1, 0),
            ("step", 1, 1),
            ("block", 0, 0),
            ("decode", 0, 0)
        ]
    );
    let block_id = stages.stage_id[2];
    assert_eq!(stages.parent_id.get(0), Some(block_id));
    assert_eq!(stages.parent_id.get(2), None);
    assert_eq!(stages.metadata.get(2), Some(r#"{"index":0}"#));
    for i in 0..stages.len {
        assert!(stages.start_ns[i] <= stages.end_ns[i]);
    }
    assert!(stages.start_ns[2] <= stages.start_ns[0] && stages.end_ns[1] <= stages.end_ns[2]);
}

#[test]
fn a_held_stage_name_nests_on_every_thread_and_with_two_profilers() {
    let out = tempfile::tempdir().unwrap();
    let (a, b) = (profiler(out.path(), |_| {}), profiler(out.path(), |_| {}));
    let session_a = a.session("held-a", &[]).unwrap();
    let session_b = b.session("held-b", &[]).unwrap();
    // One name, used by two profilers and two threads: each thread buffer
    // has its own id for it.
    let decode = rankscope::StageName::new("decode");
    let outer = rankscope::StageName::new("outer");
    let record = |p: &Profiler| {
        let o = p.begin(&outer, Some(&serde_json::json!({"k": 1}))).unwrap();
        for _ in 0..3 {
            let d = p.begin(&decode, None).unwrap();
            p.end(d);
        }
        p.end(o);
    };
    record(&a);
    record(&b);
    std::thread::scope(|s| {
        s.spawn(|| record(&a));
    });
    let names = |outcome: &rankscope::Outcome| {
        let payload = spilled(outcome);
        let stages = StagesView::new(payload.table(Table::Stages).unwrap()).unwrap();
        let mut rows: Vec<(String, u32, u32)> = (0..stages.len)
            .map(|i| {
                (
                    stages.name.get(i).to_string(),
                    stages.depth[i],
                    stages.thread[i],
                )
            })
            .collect();
        rows.sort();
        rows
    };
    let a_rows = names(&session_a.finish().unwrap());
    let b_rows = names(&session_b.finish().unwrap());
    let calls = |rows: &[(String, u32, u32)], name: &str, depth: u32| {
        rows.iter().filter(|r| r.0 == name && r.1 == depth).count()
    };
    assert_eq!(calls(&a_rows, "decode", 1), 6, "{a_rows:?}");
    assert_eq!(calls(&a_rows, "outer", 0), 2, "{a_rows:?}");
    assert_eq!(calls(&b_rows, "decode", 1), 3, "{b_rows:?}");
    assert_eq!(calls(&b_rows, "outer", 0), 1, "{b_rows:?}");
    assert_eq!(b_rows.len(), 4, "nothing else: {b_rows:?}");
}

/// A rank of a simulated node (`RANKSCOPE_NODE`, as `rankscope launch
/// --nodes` sets) is named by its node, not the machine's host name.
#[test]
fn a_rank_of_a_named_node_reports_that_node_as_its_host() {
    let out = tempfile::tempdir().unwrap();
    let config = Config {
        output_dir: out.path().to_path_buf(),
        gather_timeout_s: 5.0,
        ..Config::default()
    };
    let env = RankEnv {
        node: Some("simulated-node-1".into()),
        ..RankEnv::single()
    };
    let profiler = Profiler::with_rank_env(config.clone(), env);
    let outcome = profiler.session("node", &[]).unwrap().finish().unwrap();
    assert_eq!(spilled(&outcome).header.rank.host, "simulated-node-1");
    // A name past 256 bytes is cut to fit the payload's header, and said.
    let env = RankEnv {
        node: Some("n".repeat(3_000_000)),
        ..RankEnv::single()
    };
    let profiler = Profiler::with_rank_env(config, env);
    let header = spilled(&profiler.session("long", &[]).unwrap().finish().unwrap()).header;
    assert_eq!(header.rank.host, "n".repeat(256));
    assert!(header
        .notices
        .iter()
        .any(|n| n.contains("node name of 3000000 bytes cut")));
}

/// A session a program keeps in a thread-local of its own, dropped as the
/// thread ends (after the agent's own thread-locals are gone), still
/// spills: the process does not abort.
#[test]
fn a_session_dropped_as_its_thread_ends_still_spills() {
    thread_local! {
        static HELD: std::cell::RefCell<Option<rankscope::Session>> =
            const { std::cell::RefCell::new(None) };
    }
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), no_telemetry);
    std::thread::spawn(move || {
        // Made before the session starts, so torn down after the agent's.
        HELD.with(|_| ());
        let session = profiler.session("held", &[]).unwrap();
        profiler.record_metric("m", 1.0);
        HELD.with(|held| *held.borrow_mut() = Some(session));
    })
    .join()
    .unwrap();
    let dir = std::fs::read_dir(out.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let spilled: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("rank-00000"))
        .collect();
    assert_eq!(spilled.len(), 1, "{spilled:?}");
}

/// Two profilers in one process: each payload holds its own notices only,
/// whichever finishes first.
#[test]
fn two_profilers_keep_their_notices_apart() {
    let out = tempfile::tempdir().unwrap();
    let (a, b) = (
        profiler(out.path(), no_telemetry),
        profiler(out.path(), no_telemetry),
    );
    // A name past the cap of 256 bytes: cut, and said so in a notice.
    let long_name = "n".repeat(300);
    let session_a = a.session(&long_name, &[]).unwrap();
    let session_b = b.session("short", &[]).unwrap();
    let cut = |notices: &[String]| notices.iter().any(|n| n.contains("of 300 bytes cut"));
    let b_notices = spilled(&session_b.finish().unwrap()).header.notices;
    assert!(!cut(&b_notices), "a's notice in b's payload: {b_notices:?}");
    let a_notices = spilled(&session_a.finish().unwrap()).header.notices;
    assert!(cut(&a_notices), "a's own notice missing: {a_notices:?}");
}

#[test]
fn stage_gpu_times_are_reported_beside_host_times() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| {
        c.gpu_source = rankscope_common::config::GpuSourceKind::None
    });
    let session = profiler.session("gpu-time", &[]).unwrap();
    for _ in 0..4 {
        let _decode = profiler.stage("decode");
        profiler.record_stage_gpu_time("decode", 2.5);
    }
    {
        let _encode = profiler.stage("encode");
    }
    let outcome = session.finish().unwrap();
    let json = report_json(&outcome);
    let report = outcome.report.expect("rank 0 reports");
    let stage = |name: &str| {
        json["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(stage("decode")["gpu_s"]["avg"], 0.01, "4 calls of 2.5 ms");
    assert!(
        stage("encode")["gpu_s"].is_null(),
        "not measured is null, not 0"
    );
    assert!(
        report.summary.contains("GPU time per stage"),
        "{}",
        report.summary
    );
}

#[test]
fn the_report_says_what_profiling_cost_each_rank() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| {
        c.max_data_points = 100;
        c.max_open_stages = 4;
    });
    let session = profiler.session("overhead", &[]).unwrap();
    for _ in 0..150 {
        let _s = profiler.stage("s");
    }
    let guards: Vec<_> = (0..6).map(|_| profiler.stage("deep")).collect();
    drop(guards);
    let outcome = session.finish().unwrap();
    let json = report_json(&outcome);
    let report = outcome.report.unwrap();
    let overhead = &json["ranks"][0]["overhead"];
    // 156 stages begun: 100 rows kept, 54 past the row budget, 2 refused
    // past the open-stage limit.
    assert_eq!(overhead["stage_calls"], 156, "{overhead}");
    let per_call = overhead["stage_ns_per_call"].as_f64().unwrap();
    assert!(per_call > 0.0);
    let stages_s = overhead["stages_s"].as_f64().unwrap();
    assert!((stages_s - 156.0 * per_call / 1e9).abs() < 1e-12);
    assert_eq!(overhead["flushes_s"], 0.0, "no flush in this session");
    assert!(
        overhead["sampler_cpu_s"].is_number(),
        "the host sampler ran"
    );
    assert!(
        overhead["encode_s"].as_f64().is_some_and(|s| s > 0.0),
        "the final payload's encoding, measured: {overhead}"
    );
    assert!(overhead["total_s"].as_f64().unwrap() >= stages_s);
    assert!(
        report.summary.contains("Profiler overhead:"),
        "{}",
        report.summary
    );
}

#[test]
fn a_program_with_many_names_still_gets_its_overhead() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| c.max_names = 16);
    let session = profiler.session("names", &[]).unwrap();
    for i in 0..40 {
        drop(profiler.stage(&format!("stage {i}")));
    }
    let outcome = session.finish().unwrap();
    let payload = spilled(&outcome);
    let folded = payload.header.overflow.names_folded;
    let json = report_json(&outcome);
    assert_eq!(json["ranks"][0]["overhead"]["stage_calls"], 40);
    // The program's names fold; the profiler's own never do, nor count.
    assert_eq!(
        folded,
        40 - (16 - 1 - 7),
        "16 names: the thread's, the profiler's 7 (4 sections, 3 overhead rows), 8 stages"
    );
}

#[test]
fn an_idle_session_writes_no_flush() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| {
        no_telemetry(c);
        c.flush_interval_s = 0.05;
    });
    let session = profiler.session("idle", &[]).unwrap();
    let dir = session.dir().unwrap();
    // Files only: the control folder (rankscope trigger's) is no flush.
    let files = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_file())
            .count()
    };
    // Eight intervals with nothing recorded: nothing written.
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(files(), 0, "nothing recorded, nothing flushed");
    // The flusher was alive all along: a row recorded now is flushed.
    profiler.record_metric("woke", 1.0);
    let waited = std::time::Instant::now();
    while files() == 0 {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "the flusher never wrote the new row"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    session.finish().unwrap();
}

/// A flush asked for writes what is new as a part of its own, while the
/// session goes on; the final spill holds every row once.
#[test]
fn a_flush_writes_a_part_and_the_session_goes_on() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| {
        no_telemetry(c);
        c.flush_interval_s = 0.0;
    });
    let session = profiler.session("flushed", &[]).unwrap();
    let dir = session.dir().unwrap();
    let files = || {
        // Files only: the control folder (rankscope trigger's) is no flush.
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().unwrap().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert!(!session.flush().unwrap(), "nothing recorded yet");
    assert!(files().is_empty());
    for _ in 0..3 {
        drop(profiler.stage("before"));
    }
    assert!(session.flush().unwrap());
    let written = files();
    assert_eq!(written.len(), 1, "{written:?}");
    let part = payload::decode(&std::fs::read(dir.join(&written[0])).unwrap()).unwrap();
    assert_eq!(part.rows(Table::Stages), 3);
    assert!(part.header.flushed_until_ns.is_some());
    assert!(!session.flush().unwrap(), "nothing new since");
    drop(profiler.stage("after"));
    let payload = spilled(&session.finish().unwrap());
    let stages = StagesView::new(payload.table(Table::Stages).unwrap()).unwrap();
    let names: Vec<&str> = (0..stages.len).map(|i| stages.name.get(i)).collect();
    assert_eq!(names, ["before", "before", "before", "after"]);
    assert!(
        files().iter().all(|p| !p.ends_with(".part")),
        "the final spill replaced the part: {:?}",
        files()
    );
}

/// Flushes asked for on two threads while the periodic ones run: every
/// stage lands in the final spill once, in the order recorded.
#[test]
fn flushes_from_several_threads_keep_every_row_once_in_order() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| {
        no_telemetry(c);
        c.flush_interval_s = 0.05;
    });
    let session = profiler.session("flushed", &[]).unwrap();
    let stages = 400;
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..stages / 4 {
                session.flush().unwrap();
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
        });
        for i in 0..stages {
            drop(profiler.stage("step"));
            if i % 3 == 0 {
                session.flush().unwrap();
            }
        }
    });
    let payload = spilled(&session.finish().unwrap());
    let steps = StagesView::new(payload.table(Table::Stages).unwrap()).unwrap();
    assert_eq!(steps.call_index.to_vec(), (0..stages).collect::<Vec<u32>>());
    assert!(steps.start_ns.windows(2).all(|w| w[0] <= w[1]));
}

/// A metric or event recorded between two stages lands between them (both
/// stamped in the counter's ticks, converted at a pairing pass); telemetry
/// falls inside the session (the sampler stops before the session's length
/// is read).
#[test]
fn row_times_fall_between_the_stages_around_them() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| {
        c.gpu_source = rankscope_common::config::GpuSourceKind::Simulated;
        c.gpu_interval_s = 0.01;
    });
    let session = profiler.session("times", &[]).unwrap();
    drop(profiler.stage("before"));
    std::thread::sleep(std::time::Duration::from_millis(30));
    profiler.record_metric("between", 1.0);
    profiler.add_event("between", &serde_json::json!(null));
    std::thread::sleep(std::time::Duration::from_millis(30));
    drop(profiler.stage("after"));
    let payload = spilled(&session.finish().unwrap());
    let stages = StagesView::new(payload.table(Table::Stages).unwrap()).unwrap();
    let (before, after) = (stages.end_ns[0], stages.start_ns[1]);
    let metrics = MetricsView::new(payload.table(Table::Metrics).unwrap()).unwrap();
    let metric = (0..metrics.len)
        .find(|&i| metrics.name.get(i) == "between")
        .unwrap();
    let events = EventsView::new(payload.table(Table::Events).unwrap()).unwrap();
    for ts in [metrics.ts_ns[metric], events.ts_ns[0]] {
        assert!(before <= ts && ts <= after, "{before} <= {ts} <= {after}");
    }
    let duration = payload.header.clock.duration_ns;
    let gpu = GpuSamplesView::new(payload.table(Table::GpuSamples).unwrap()).unwrap();
    assert!(gpu.len > 0);
    assert!(
        gpu.ts_ns.iter().all(|&ts| ts <= duration),
        "{:?} past {duration}",
        gpu.ts_ns
    );
}

/// The row budget is one count for every thread, short-lived ones
/// included: exactly `max_data_points` rows kept, the rest counted.
#[test]
fn the_budget_of_record_rows_is_shared_exactly() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| {
        no_telemetry(c);
        c.max_data_points = 150;
    });
    let session = profiler.session("budget", &[]).unwrap();
    for _ in 0..50 {
        std::thread::scope(|s| {
            s.spawn(|| profiler.record_metric("short", 1.0));
        });
    }
    // 100 left: two threads of 100 rows each keep 100 between them.
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..100 {
                    profiler.record_metric("long", 1.0);
                }
            });
        }
    });
    let payload = spilled(&session.finish().unwrap());
    assert_eq!(own_metrics(&payload), 150);
    let dropped: Vec<_> = payload
        .header
        .dropped
        .iter()
        .map(|d| (d.table.as_str(), d.rows))
        .collect();
    assert_eq!(dropped, [("metrics", 100)]);
}

#[test]
fn every_record_call_lands_in_its_table() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |_| {});
    let session = profiler.session("records", &[]).unwrap();
    profiler.record_diffusion_step(DiffusionStep {
        step: 3,
        timestep: 900.0,
        block_size: 16,
        computation_ms: 40.0,
        guidance_scale: Some(5.0),
    });
    profiler.record_block_computation(BlockComputation {
        block_index: 1,
        block_size: 16,
        computation_ms: 200.0,
        memory_mb: Some(512.0),
    });
    profiler.record_model_parameters("transformer", 1_300_000_000);
    profiler.record_metric("tokens", 4096.0);
    profiler.record_throughput(100.0, Some(4.0));
    profiler.add_event("milestone", &serde_json::json!({"progress": 0.5}));
    profiler.memory_snapshot(
        "after_load",
        MemoryReading {
            gpu: Some(0),
            allocated_bytes: Some(10),
            ..MemoryReading::default()
        },
    );
    let payload = spilled(&session.finish().unwrap());

    let steps = DiffusionStepsView::new(payload.table(Table::DiffusionSteps).unwrap()).unwrap();
    assert_eq!((steps.step[0], steps.guidance_scale.get(0)), (3, Some(5.0)));
    let blocks = BlocksView::new(payload.table(Table::Blocks).unwrap()).unwrap();
    assert_eq!(blocks.memory_mb.get(0), Some(512.0));
    let params = ModelParametersView::new(payload.table(Table::ModelParameters).unwrap()).unwrap();
    assert_eq!(
        (params.name.value(0), params.count[0]),
        ("transformer", 1_300_000_000)
    );
    let metrics = MetricsView::new(payload.table(Table::Metrics).unwrap()).unwrap();
    let got: Vec<_> = (0..metrics.len)
        .filter(|&i| metrics.section.get(i) != OVERHEAD_SECTION)
        .map(|i| {
            (
                metrics.section.get(i),
                metrics.name.get(i),
                metrics.value[i],
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("custom", "tokens", 4096.0),
            ("throughput", "items", 100.0),
            ("throughput", "items_per_s", 25.0)
        ]
    );
    let events = EventsView::new(payload.table(Table::Events).unwrap()).unwrap();
    assert_eq!(events.payload.get(0), Some(r#"{"progress":0.5}"#));
    let snaps = MemorySnapshotsView::new(payload.table(Table::MemorySnapshots).unwrap()).unwrap();
    assert_eq!(snaps.label.value(0), "after_load");
    assert_eq!(snaps.allocated_bytes.get(0), Some(10));
    assert_eq!(snaps.reserved_bytes.get(0), None);
}

#[test]
fn each_thread_is_its_own_track() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |_| {});
    let session = profiler.session("threads", &[]).unwrap();
    std::thread::scope(|scope| {
        for worker in 0..4 {
            let profiler = profiler.clone();
            std::thread::Builder::new()
                .name(format!("worker-{worker}"))
                .spawn_scoped(scope, move || {
                    for _ in 0..100 {
                        let _outer = profiler.stage("work");
                        let _inner = profiler.stage("inner");
                    }
                })
                .unwrap();
        }
    });
    let payload = spilled(&session.finish().unwrap());
    let stages = StagesView::new(payload.table(Table::Stages).unwrap()).unwrap();
    assert_eq!(stages.len, 800);
    let mut per_thread = std::collections::BTreeMap::new();
    for i in 0..stages.len {
        *per_thread
            .entry((stages.thread[i], stages.thread_name.get(i)))
            .or_insert(0) += 1;
    }
    assert_eq!(per_thread.len(), 4);
    assert!(per_thread.values().all(|&n| n == 200));
    assert!(per_thread
        .keys()
        .all(|(_, name)| name.starts_with("worker-")));
    let ids: std::collections::HashSet<u64> = stages.stage_id.iter().copied().collect();
    assert_eq!(ids.len(), 800, "stage ids are unique within the rank");
}

#[test]
fn tables_are_bounded_and_drops_are_counted() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| c.max_data_points = 10);
    let session = profiler.session("bounded", &[]).unwrap();
    for i in 0..25 {
        let _s = profiler.stage("s");
        profiler.record_metric("m", f64::from(i));
    }
    let payload = spilled(&session.finish().unwrap());
    assert_eq!(payload.rows(Table::Stages), 10);
    assert_eq!(own_metrics(&payload), 10);
    let dropped: Vec<_> = payload
        .header
        .dropped
        .iter()
        .map(|d| (d.table.as_str(), d.rows))
        .collect();
    assert_eq!(dropped, vec![("stages", 15), ("metrics", 15)]);

    // The budget starts afresh with the next session.
    let session = profiler.session("bounded", &[]).unwrap();
    profiler.record_metric("m", 1.0);
    let payload = spilled(&session.finish().unwrap());
    assert_eq!(own_metrics(&payload), 1);
    assert!(payload.header.dropped.is_empty());
}

#[test]
fn a_disabled_profiler_records_nothing_and_writes_nothing() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| c.enabled = false);
    assert!(!profiler.is_enabled());
    let session = profiler.session("off", &[]).unwrap();
    let guard = profiler.stage("s");
    assert!(!guard.is_recording());
    drop(guard);
    profiler.record_metric("m", 1.0);
    let outcome = session.finish().unwrap();
    assert!(outcome.gathered.is_none());
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

#[test]
fn nothing_is_recorded_outside_a_session_and_stale_stages_are_dropped() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |_| {});
    profiler.record_metric("before", 1.0);
    let first = profiler.session("one", &[]).unwrap();
    assert!(matches!(
        profiler.session("two", &[]),
        Err(rankscope::SessionError::AlreadyRunning(_))
    ));
    let straddling = profiler.stage("straddles");
    first.finish().unwrap();
    let second = profiler.session("one", &[]).unwrap();
    drop(straddling); // began in the first session: belongs to neither
    {
        let _s = profiler.stage("inside");
    }
    let payload = spilled(&second.finish().unwrap());
    let stages = StagesView::new(payload.table(Table::Stages).unwrap()).unwrap();
    assert_eq!(stages.len, 1);
    assert_eq!(stages.name.get(0), "inside");
    assert_eq!(own_metrics(&payload), 0);
}

#[test]
fn a_dropped_session_still_spills_its_payload() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| c.session_id = Some("job".into()));
    let session = profiler.session("dropped", &[]).unwrap();
    profiler.record_metric("m", 1.0);
    let dir = session.dir().unwrap();
    drop(session);
    let files = spill::find(&dir, Some(0), None, std::time::UNIX_EPOCH)
        .unwrap()
        .files;
    assert_eq!(files.len(), 1);
    let payload = payload::decode(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(own_metrics(&payload), 1);
}

#[test]
fn a_multi_rank_job_without_a_job_id_is_refused_clearly() {
    let out = tempfile::tempdir().unwrap();
    let env = RankEnv {
        launcher: Launcher::Torchrun,
        rank: 1,
        world_size: 2,
        ..RankEnv::single()
    };
    let config = Config {
        output_dir: out.path().into(),
        ..Config::default()
    };
    let profiler = Profiler::with_rank_env(config, env);
    let err = profiler.session("t2v", &[]).err().unwrap().to_string();
    assert!(err.contains("RANKSCOPE_SESSION_ID"), "{err}");
}

#[test]
fn rank_zero_names_the_ranks_that_never_wrote() {
    let out = tempfile::tempdir().unwrap();
    let env = |rank| RankEnv {
        launcher: Launcher::Rankscope,
        rank,
        world_size: 3,
        job_id: Some("j1".into()),
        ..RankEnv::single()
    };
    let config = Config {
        output_dir: out.path().into(),
        gather_timeout_s: 0.3,
        ..Config::default()
    };
    // Rank 1 finishes first; rank 2 never does.
    let rank1 = Profiler::with_rank_env(config.clone(), env(1));
    rank1.session("job", &[]).unwrap().finish().unwrap();
    let rank0 = Profiler::with_rank_env(config, env(0));
    let started = std::time::Instant::now();
    let outcome = rank0.session("job", &[]).unwrap().finish().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let gathered = outcome.gathered.unwrap();
    assert_eq!(gathered.reporting, vec![0, 1]);
    assert_eq!(gathered.missing, vec![2]);

    let again = accept(
        spill::read_dir(&outcome.session_dir, 1_000).unwrap(),
        &Expect::default(),
    );
    assert_eq!(again.world_size, 3);
    assert_eq!(again.missing, vec![2]);
}

#[test]
fn a_file_left_over_from_an_earlier_run_is_not_taken_for_a_rank() {
    let out = tempfile::tempdir().unwrap();
    let config = Config {
        output_dir: out.path().into(),
        gather_timeout_s: 0.3,
        ..Config::default()
    };
    let env = |rank| RankEnv {
        launcher: Launcher::Rankscope,
        rank,
        world_size: 2,
        job_id: Some("same-id".into()),
        ..RankEnv::single()
    };
    let rank0 = Profiler::with_rank_env(config, env(0));
    let session = rank0.session("job", &[]).unwrap();
    // Rank 1's file from a run an hour ago, under the same session id.
    let mut stale = Payload {
        header: rankscope_common::PayloadHeader::new("same-id", "job", 1, 2),
        tables: Default::default(),
    };
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    stale.header.clock.start_unix_ns = now_ns - 3_600_000_000_000;
    stale.header.clock.duration_ns = 60_000_000_000;
    let bytes = payload::encode(&stale, payload::Compression::Zstd).unwrap();
    let dir = session.dir().unwrap();
    let file = std::fs::File::create(dir.join("rank-00001.rsp")).unwrap();
    std::io::Write::write_all(&mut &file, &bytes).unwrap();
    file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3000))
        .unwrap();

    let started = std::time::Instant::now();
    let gathered = session.finish().unwrap().gathered.unwrap();
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(300),
        "rank 0 waited for a fresh file from rank 1 until the deadline"
    );
    assert_eq!(gathered.reporting, vec![0]);
    assert_eq!(
        gathered.missing,
        vec![1],
        "the old file is not rank 1 of this run"
    );
}

#[test]
fn a_reused_session_id_never_mixes_two_runs() {
    let out = tempfile::tempdir().unwrap();
    let config = Config {
        output_dir: out.path().into(),
        gather_timeout_s: 0.5,
        gpu_source: rankscope_common::config::GpuSourceKind::None,
        ..Config::default()
    };
    let env = |rank, run: &str| RankEnv {
        launcher: Launcher::Torchrun,
        rank,
        world_size: 2,
        job_id: Some("none".into()),
        run_id: Some(run.into()),
        ..RankEnv::single()
    };
    // Run 1: both ranks finish; their files stay in the session directory.
    let run1_rank1 = Profiler::with_rank_env(config.clone(), env(1, "none.0"));
    let s = run1_rank1.session("job", &[]).unwrap();
    drop(run1_rank1.stage("run-1-work"));
    let run1_file = s.finish().unwrap().spill_file;
    let run1_rank0 = Profiler::with_rank_env(config.clone(), env(0, "none.0"));
    run1_rank0.session("job", &[]).unwrap().finish().unwrap();

    // Run 2 (the restart: same session id, restart count 1): rank 1 is late.
    let run2_rank0 = Profiler::with_rank_env(config.clone(), env(0, "none.1"));
    let session = run2_rank0.session("job", &[]).unwrap();
    let outcome = session.finish().unwrap();
    let gathered = outcome.gathered.as_ref().unwrap();
    assert_eq!(gathered.reporting, vec![0]);
    assert_eq!(
        gathered.missing,
        vec![1],
        "run 1's fresh rank-1 file is not run 2's"
    );
    let report = report_json(&outcome);
    assert_eq!(report["session"]["run_id"], "none.1");
    assert!(!report.to_string().contains("run-1-work"));

    // Run 2's rank 1 arrives later: its file does not replace run 1's.
    let run2_rank1 = Profiler::with_rank_env(config, env(1, "none.1"));
    let run2_file = run2_rank1
        .session("job", &[])
        .unwrap()
        .finish()
        .unwrap()
        .spill_file;
    assert_ne!(run1_file, run2_file);
    assert!(run1_file.is_file() && run2_file.is_file());
}

#[test]
fn two_processes_claiming_one_rank_are_both_kept_and_named() {
    let out = tempfile::tempdir().unwrap();
    let config = Config {
        output_dir: out.path().into(),
        gather_timeout_s: 5.0,
        gpu_source: rankscope_common::config::GpuSourceKind::None,
        ..Config::default()
    };
    let env = |rank| RankEnv {
        launcher: Launcher::Rankscope,
        rank,
        world_size: 2,
        job_id: Some("dup".into()),
        run_id: Some("dup-run".into()),
        ..RankEnv::single()
    };
    let first = Profiler::with_rank_env(config.clone(), env(1));
    let first_file = first
        .session("job", &[])
        .unwrap()
        .finish()
        .unwrap()
        .spill_file;
    let second = Profiler::with_rank_env(config.clone(), env(1));
    let second_file = second
        .session("job", &[])
        .unwrap()
        .finish()
        .unwrap()
        .spill_file;
    assert_ne!(first_file, second_file, "neither replaces the other");

    let rank0 = Profiler::with_rank_env(config, env(0));
    let gathered = rank0
        .session("job", &[])
        .unwrap()
        .finish()
        .unwrap()
        .gathered
        .unwrap();
    assert_eq!(gathered.reporting, vec![0, 1]);
    assert_eq!(gathered.skipped.len(), 1);
    assert!(
        matches!(
            gathered.skipped[0].reason,
            Rejection::DuplicateRank { rank: 1, .. }
        ),
        "{:?}",
        gathered.skipped
    );
    assert!(
        first_file.is_file() && second_file.is_file(),
        "both inputs stay on disk"
    );
}

#[cfg(unix)]
#[test]
fn planted_links_at_temporary_names_are_never_followed() {
    // The names the writers once used for their temporary files, each a
    // link to a file an attacker wants overwritten.
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| c.session_id = Some("links".into()));
    let session = profiler.session("job", &[]).unwrap();
    let dir = session.dir().unwrap();
    let victim = out.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let pid = std::process::id();
    for name in [
        format!(".rank-00000.rsp.{pid}.tmp"),
        format!("report.tmp.{pid}"),
        format!("summary.tmp.{pid}"),
        format!("stages.tmp.{pid}"),
    ] {
        std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
    }
    drop(profiler.stage("work"));
    let outcome = session.finish().unwrap();
    assert!(outcome.report.is_some());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let temporary = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.ends_with(".tmp") && !std::fs::symlink_metadata(dir.join(n)).unwrap().is_symlink()
        })
        .count();
    assert_eq!(temporary, 0, "no temporary file is left behind");
}

#[cfg(unix)]
#[test]
fn rank_zero_names_a_special_file_in_its_gather_and_never_reads_it() {
    let out = tempfile::tempdir().unwrap();
    let config = Config {
        output_dir: out.path().into(),
        gather_timeout_s: 0.3,
        gpu_source: rankscope_common::config::GpuSourceKind::None,
        ..Config::default()
    };
    let env = RankEnv {
        launcher: Launcher::Rankscope,
        rank: 0,
        world_size: 2,
        job_id: Some("special".into()),
        run_id: Some("special-run".into()),
        ..RankEnv::single()
    };
    let rank0 = Profiler::with_rank_env(config, env);
    let session = rank0.session("job", &[]).unwrap();
    let dir = session.dir().unwrap();
    let name = spill::SpillName {
        rank: 1,
        run_id: Some("special-run"),
        process: 9,
    }
    .file_name();
    std::os::unix::fs::symlink("/dev/zero", dir.join(name)).unwrap();
    let gathered = session.finish().unwrap().gathered.unwrap();
    assert_eq!(gathered.missing, vec![1], "a link is not rank 1's file");
    assert!(
        gathered
            .skipped
            .iter()
            .any(|s| matches!(s.reason, Rejection::NotAFile)),
        "{:?}",
        gathered.skipped
    );
}

/// A reporter the program gives the builder gets the gathered payloads in
/// place of the default report.
#[test]
fn a_reporter_the_program_gives_writes_the_report() {
    struct Counting(std::sync::Mutex<Vec<(u32, usize)>>);
    impl rankscope::Reporter for Counting {
        fn report(
            &self,
            gathered: &rankscope::Gathered,
            session_dir: &std::path::Path,
            _config: &Config,
        ) -> Result<rankscope::ReportFiles, Box<dyn std::error::Error + Send + Sync>> {
            let stages = gathered.payloads[0]
                .table(Table::Stages)
                .map_or(0, |batch| batch.num_rows());
            self.0
                .lock()
                .unwrap()
                .push((gathered.payloads.len() as u32, stages));
            let file = session_dir.join("mine.txt");
            std::fs::write(&file, "my report")?;
            Ok(rankscope::ReportFiles {
                files: vec![file],
                summary: "mine".into(),
            })
        }
    }
    let out = tempfile::tempdir().unwrap();
    let mut config = Config {
        output_dir: out.path().to_path_buf(),
        ..Config::default()
    };
    no_telemetry(&mut config);
    let mine = std::sync::Arc::new(Counting(Default::default()));
    let profiler = Profiler::builder(config)
        .rank_env(RankEnv::single())
        .reporter(mine.clone())
        .build()
        .unwrap();
    let session = profiler.session("mine", &[]).unwrap();
    drop(profiler.stage("work"));
    let outcome = session.finish().unwrap();
    assert_eq!(*mine.0.lock().unwrap(), [(1, 1)]);
    let report = outcome.report.unwrap();
    assert_eq!(report.summary, "mine");
    assert!(!outcome.session_dir.join("report.json").exists());
}

/// `end_named` ends the innermost open stage of that name on this thread,
/// begun any way; `false` where none is open.
#[test]
fn end_named_ends_the_innermost_stage_of_its_name() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), no_telemetry);
    let step = rankscope::StageName::new("step");
    let session = profiler.session("named", &[]).unwrap();
    let outer = profiler.begin(&step, None).unwrap();
    // Begun by the name's text, as Python's `prof.start` does.
    #[allow(deprecated)]
    profiler.start("step");
    assert!(profiler.end_named(&step), "the inner `step`");
    assert_eq!(profiler.live_state().open_stages, ["step"]);
    profiler.end(outer);
    assert!(!profiler.end_named(&step), "none left");
    let outcome = session.finish().unwrap();
    let payload = payload::decode(&std::fs::read(outcome.spill_file).unwrap()).unwrap();
    let stages = StagesView::new(payload.table(Table::Stages).unwrap()).unwrap();
    assert_eq!(stages.len, 2);
}
