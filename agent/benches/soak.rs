//! A rank over a long simulated session: 8 fake GPUs and the host sampled
//! at their default rates, a stage loop of three stages per step, and the
//! default periodic flush, all 100 times faster than real time (a GPU
//! reading every 5 ms for the default 0.5 s, the host every 10 ms for 1 s,
//! a flush every 0.3 s for 30 s), so that an hour passes in 36 s. Prints the
//! process's resident memory every simulated 10 minutes, and its peak (as
//! the kernel counts it, finish included), with the default flush and with
//! flushing off, each session in a process of its own: flat with the flush
//! (each flush hands its rows to a file); without it, growing until each
//! table holds `max_data_points` rows (the GPU table at about 1.7 simulated
//! hours, the stage table at 4.6).
//!
//! `cargo bench -p rankscope --bench soak [HOURS]` (default 2, 72 s per
//! run). Results go to BENCHMARKS.md.

#[path = "../tests/fake_nvml/mod.rs"]
mod fake_nvml;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rankscope::{Config, Profiler, RankEnv};
use rankscope_common::config::GpuSourceKind;

const GPUS: u32 = 8;
/// Simulated seconds per real second.
const SPEED: f64 = 100.0;
/// Simulated seconds between memory readings.
const REPORT_EVERY_S: f64 = 600.0;

/// A memory figure of this process from /proc/self/status (`VmRSS:` now,
/// `VmHWM:` its peak so far), MiB.
fn memory_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect(field);
    kb / 1024.0
}

/// Runs one simulated session of `hours`; returns the resident memory at
/// each report time.
fn session(hours: f64, flush: bool) -> Vec<f64> {
    let out = tempfile::tempdir().unwrap();
    let config = Config {
        output_dir: out.path().into(),
        gpu_source: GpuSourceKind::Nvml,
        nvml_library: Some(fake_nvml::library()),
        gpu_devices: Some("all".into()),
        gpu_interval_s: 0.5 / SPEED,
        host_interval_s: 1.0 / SPEED,
        flush_interval_s: if flush { 30.0 / SPEED } else { 0.0 },
        ..Config::default()
    };
    let profiler = Profiler::with_rank_env(config, RankEnv::single());
    let session = profiler.session("soak", &[]).unwrap();
    let done = AtomicBool::new(false);
    let mut rss = Vec::new();
    std::thread::scope(|scope| {
        // A step every simulated 0.5 s: step { denoise, decode }.
        scope.spawn(|| {
            let step = Duration::from_secs_f64(0.5 / SPEED);
            let mut next = Instant::now();
            while !done.load(Ordering::Relaxed) {
                {
                    let _step = profiler.stage("step");
                    drop(profiler.stage("denoise"));
                    drop(profiler.stage("decode"));
                }
                next += step;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        let started = Instant::now();
        let every = Duration::from_secs_f64(REPORT_EVERY_S / SPEED);
        let reports = (hours * 3600.0 / REPORT_EVERY_S).round() as u32;
        for k in 1..=reports {
            std::thread::sleep((started + every * k).saturating_duration_since(Instant::now()));
            rss.push(memory_mib("VmRSS:"));
        }
        done.store(true, Ordering::Relaxed);
    });
    drop(session.finish().unwrap());
    rss.push(memory_mib("VmHWM:"));
    rss
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::env::set_var("FAKE_NVML_DEVICES", GPUS.to_string());
    // In a process of its own: one session, its readings on stdout.
    if let [run, flush, hours] = &args[..] {
        if run == "--run" {
            for mib in session(hours.parse().unwrap(), flush == "flush") {
                println!("{mib:.1}");
            }
            return;
        }
    }
    let hours: f64 = args.iter().find_map(|arg| arg.parse().ok()).unwrap_or(2.0);
    println!(
        "{GPUS} fake GPUs, host, a 3-stage step every 0.5 s; {hours} simulated hours, {SPEED}x"
    );
    let run = |flush: &str| -> Vec<f64> {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--run", flush, &hours.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| line.parse().unwrap())
            .collect()
    };
    let (with_flush, without) = (run("flush"), run("none"));
    println!(
        "{:>14} {:>22} {:>22}",
        "simulated min", "RSS MiB, flush 30 s", "RSS MiB, no flush"
    );
    let readings = with_flush.len().min(without.len()) - 1;
    for k in 0..readings {
        let minutes = (k as f64 + 1.0) * REPORT_EVERY_S / 60.0;
        println!(
            "{minutes:>14.0} {:>22.1} {:>22.1}",
            with_flush[k], without[k]
        );
    }
    println!(
        "{:>14} {:>22.1} {:>22.1}",
        "peak (finish)", with_flush[readings], without[readings]
    );
}
