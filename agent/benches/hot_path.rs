//! The cost of the hot path against its peers, in one process: a stage
//! begun and ended (by name, by `stage!`, nested, on two threads at once,
//! as the `step_stage` whose end is a step), a
//! metric recorded, a step ended (`step()`, windows' clock), a disabled
//! profiler; puffin's scope (top level and
//! nested) and a `tracing` span with a subscriber that does nothing; the
//! floors any timer pays (two monotonic clock readings, two `rdtsc`). Each
//! variant runs 200 000 calls per round, the rounds interleaved; the best
//! of nine rounds is shown. Between rounds the session is flushed, as its
//! periodic flushes do, so that rows go into memory the session already
//! holds: a long session's steady state. Then the payload size of 100 000
//! stages.
//!
//! `cargo bench -p rankscope --bench hot_path`. Results go to BENCHMARKS.md.

use std::hint::black_box;
use std::sync::{mpsc, Arc, Barrier};
use std::time::Instant;

use rankscope::{Config, Profiler, RankEnv};

const CALLS: u32 = 200_000;
const ROUNDS: usize = 9;

/// Nanoseconds per call of `f` over one round; `f` is inlined into the
/// loop, as a call site in a program's loop is.
fn round(mut f: impl FnMut(u32)) -> f64 {
    let start = Instant::now();
    for i in 0..CALLS {
        f(i);
    }
    start.elapsed().as_nanos() as f64 / f64::from(CALLS)
}

/// A `tracing` subscriber that enables everything and records nothing: what
/// a span costs in `tracing`'s own machinery.
struct NoOp;

impl tracing::Subscriber for NoOp {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[cfg(target_arch = "x86_64")]
fn rdtsc() -> u64 {
    #[allow(unused_unsafe)]
    // SAFETY: RDTSC exists on every x86-64 processor.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtsc() -> u64 {
    0
}

fn main() {
    let out = tempfile::tempdir().unwrap();
    let config = Config {
        output_dir: out.path().into(),
        // Room for every call of every round: no row is dropped.
        max_data_points: 50_000_000,
        gpu_source: rankscope_common::config::GpuSourceKind::None,
        collect_host: false,
        flush_interval_s: 0.0,
        ..Config::default()
    };
    let enabled = Arc::new(Profiler::with_rank_env(config.clone(), RankEnv::single()));
    // A profiler whose `denoise` stage's end is a step (`step_stage`).
    let stepping = Profiler::with_rank_env(
        Config {
            step_stage: Some("denoise".into()),
            ..config.clone()
        },
        RankEnv::single(),
    );
    let disabled = Profiler::with_rank_env(
        Config {
            enabled: false,
            ..config
        },
        RankEnv::single(),
    );
    puffin::set_scopes_on(true);
    let dispatch = tracing::Dispatch::new(NoOp);

    let session = enabled.session("bench", &[]).unwrap();
    let stepping_session = stepping.session("bench-step-stage", &[]).unwrap();
    let outer_scope = || {
        puffin::profile_scope!("outer");
        // A scope nested in another, as puffin's own benchmarks time it.
        let nested = |_: u32| {
            puffin::profile_scope!("step");
        };
        round(nested)
    };
    // Two threads recording at once, each into its own buffer through every
    // round, as a job's threads do: the cost per stage on each. They wait at
    // the barrier for the next round until the process exits.
    let start = Arc::new(Barrier::new(3));
    let (done, rounds_done) = mpsc::channel::<f64>();
    for _ in 0..2 {
        let (enabled, start, done) = (Arc::clone(&enabled), Arc::clone(&start), done.clone());
        std::thread::spawn(move || loop {
            start.wait();
            let ns = round(|_| drop(black_box(rankscope::stage!(enabled, "decode"))));
            if done.send(ns).is_err() {
                return;
            }
        });
    }
    let two_threads = || {
        start.wait();
        (rounds_done.recv().unwrap() + rounds_done.recv().unwrap()) / 2.0
    };
    type Variant<'a> = (&'a str, Box<dyn FnMut() -> f64 + 'a>);
    let mut variants: Vec<Variant<'_>> = vec![
        (
            "two Instant::now() readings (the floor)",
            Box::new(|| {
                round(|_| {
                    black_box(Instant::now());
                    black_box(Instant::now());
                })
            }),
        ),
        (
            "two rdtsc readings",
            Box::new(|| {
                round(|_| {
                    black_box(rdtsc());
                    black_box(rdtsc());
                })
            }),
        ),
        (
            "stage, disabled profiler",
            Box::new(|| round(|_| drop(black_box(disabled.stage("decode"))))),
        ),
        (
            "stage!, disabled profiler",
            Box::new(|| round(|_| drop(black_box(rankscope::stage!(disabled, "decode"))))),
        ),
        (
            "stage(\"decode\"), in a session",
            Box::new(|| round(|_| drop(black_box(enabled.stage("decode"))))),
        ),
        (
            "stage!(p, \"decode\"), in a session",
            Box::new(|| round(|_| drop(black_box(rankscope::stage!(enabled, "decode"))))),
        ),
        (
            "stage!(p, \"denoise\"), the step_stage: its end a step",
            Box::new(|| round(|_| drop(black_box(rankscope::stage!(stepping, "denoise"))))),
        ),
        (
            "stage!, nested in another, in a session",
            Box::new(|| {
                let _outer = rankscope::stage!(enabled, "block");
                round(|_| drop(black_box(rankscope::stage!(enabled, "step"))))
            }),
        ),
        (
            "stage!, bursts of 2000, paired between them",
            Box::new(|| {
                // What a recording thread pays when the sampler thread pairs
                // its events between readings: bursts shorter than the log,
                // timed alone, the events paired in between (by
                // `live_state`, as the sampler does).
                let mut total = std::time::Duration::ZERO;
                for _ in 0..CALLS / 2000 {
                    let start = Instant::now();
                    for _ in 0..2000 {
                        drop(black_box(rankscope::stage!(enabled, "decode")));
                    }
                    total += start.elapsed();
                    black_box(enabled.live_state());
                }
                total.as_nanos() as f64 / f64::from(CALLS)
            }),
        ),
        (
            "stage!, 2 threads at once (per thread)",
            Box::new(two_threads),
        ),
        (
            "record_metric, in a session",
            Box::new(|| round(|i| enabled.record_metric("tokens", f64::from(i)))),
        ),
        (
            "step(), no window due, in a session",
            Box::new(|| round(|_| enabled.step())),
        ),
        (
            "step(), disabled profiler",
            Box::new(|| round(|_| disabled.step())),
        ),
        (
            "an atomic increment (step's floor)",
            Box::new(|| {
                let counter = std::sync::atomic::AtomicU64::new(0);
                round(|_| {
                    black_box(&counter).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                })
            }),
        ),
        (
            "puffin profile_scope!, top level",
            Box::new(|| {
                round(|_| {
                    puffin::profile_scope!("decode");
                })
            }),
        ),
        ("puffin profile_scope!, nested", Box::new(outer_scope)),
        (
            "tracing span entered, no-op subscriber",
            Box::new(|| {
                tracing::dispatcher::with_default(&dispatch, || {
                    round(|_| {
                        let _span = black_box(tracing::info_span!("decode").entered());
                    })
                })
            }),
        ),
    ];
    let mut best = vec![f64::INFINITY; variants.len()];
    for _ in 0..ROUNDS {
        for (slot, (_, run)) in best.iter_mut().zip(variants.iter_mut()) {
            *slot = slot.min(run());
        }
        // puffin keeps its scopes until a frame ends; rankscope's rows go
        // to a part file, their memory kept for the next rounds.
        puffin::GlobalProfiler::lock().new_frame();
        session.flush().unwrap();
        stepping_session.flush().unwrap();
    }
    drop(session);
    drop(stepping_session);

    println!(
        "{:<46} {:>10}   best of {ROUNDS} rounds of {CALLS} calls",
        "call", "ns / call"
    );
    for ((name, _), ns) in variants.iter().zip(&best) {
        println!("{name:<46} {ns:>10.1}");
    }
    let by_name = |name: &str| best[variants.iter().position(|v| v.0 == name).unwrap()];
    println!(
        "puffin nested / stage! nested: {:.2}x",
        by_name("puffin profile_scope!, nested")
            / by_name("stage!, nested in another, in a session")
    );

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
