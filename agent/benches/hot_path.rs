//! The cost of the hot path: a stage begun and ended, a metric recorded, on
//! an enabled profiler inside a session, on a disabled one, and the floor:
//! two clock readings, which any timer pays; then the payload size of a
//! session of 100 000 stages.
//!
//! `cargo bench -p rankscope --bench hot_path`. Results go to BENCHMARKS.md.

use std::hint::black_box;
use std::time::Instant;

use rankscope::{Config, Profiler, RankEnv};

const CALLS: u32 = 1_000_000;

/// Nanoseconds per call of `f`, the best of three rounds.
fn per_call(mut f: impl FnMut(u32)) -> f64 {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            for i in 0..CALLS {
                f(i);
            }
            start.elapsed().as_nanos() as f64 / f64::from(CALLS)
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let out = tempfile::tempdir().unwrap();
    let config = Config {
        output_dir: out.path().into(),
        // Room for every call of every round: no row is dropped.
        max_data_points: 20 * CALLS as usize,
        gpu_source: rankscope_common::config::GpuSourceKind::None,
        collect_host: false,
        ..Config::default()
    };
    let enabled = Profiler::with_rank_env(config.clone(), RankEnv::single());
    let disabled = Profiler::with_rank_env(
        Config {
            enabled: false,
            ..config
        },
        RankEnv::single(),
    );

    let floor = per_call(|_| {
        black_box(Instant::now());
        black_box(Instant::now());
    });
    let off = per_call(|_| drop(black_box(disabled.stage("decode"))));
    let outside = per_call(|_| drop(black_box(enabled.stage("decode"))));
    let session = enabled.session("bench", &[]).unwrap();
    let stage = per_call(|_| drop(black_box(enabled.stage("decode"))));
    let nested = per_call(|_| {
        let _outer = enabled.stage("block");
        drop(black_box(enabled.stage("step")));
    }) / 2.0;
    let metric = per_call(|i| enabled.record_metric("tokens", f64::from(i)));
    drop(session);

    println!("{:<46} {:>10}", "call", "ns / call");
    for (name, ns) in [
        ("two Instant::now() readings (the floor)", floor),
        ("stage begin + end, disabled profiler", off),
        ("stage begin + end, enabled, no session", outside),
        ("stage begin + end, in a session", stage),
        ("stage begin + end, nested, in a session", nested),
        ("record_metric, in a session", metric),
    ] {
        println!("{name:<46} {ns:>10.1}");
    }
    println!("stage in a session / floor: {:.1}x", stage / floor);

    // What a long session's stages cost on disk: 100 000 stages of 10 names,
    // nested two deep, in the zstd payload.
    let session = enabled.session("size", &[]).unwrap();
    let names: Vec<String> = (0..10).map(|i| format!("stage_{i}")).collect();
    for i in 0..50_000 {
        let _outer = enabled.stage(&names[i % 10]);
        drop(enabled.stage(&names[(i + 1) % 10]));
    }
    let started = Instant::now();
    let outcome = session.finish().unwrap();
    println!(
        "payload of 100000 stages: {} bytes ({:.1} bytes per stage), session finish {:.1} ms",
        outcome.payload_bytes,
        outcome.payload_bytes as f64 / 100_000.0,
        started.elapsed().as_secs_f64() * 1e3
    );
}
