//! The telemetry sampler's CPU cost against the fake NVML library (8 GPUs),
//! at 10 Hz and at the default interval (0.5 s), beside the alternative many
//! tools use: starting NVML and looking the devices up again for every
//! reading. CPU time is the whole process's, from the kernel's per-thread
//! accounting (/proc/self/task/*/schedstat), so it includes everything the
//! sampler costs; the main thread sleeps.
//!
//! `cargo bench -p rankscope --bench sampler` (about 25 s). Results go to
//! BENCHMARKS.md.

#[path = "../tests/fake_nvml/mod.rs"]
mod fake_nvml;

use std::path::Path;
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::Nvml;
use rankscope::{Config, Profiler, RankEnv};
use rankscope_common::config::GpuSourceKind;
use rankscope_common::payload;

const GPUS: u32 = 8;
const RUN: Duration = Duration::from_secs(8);

/// CPU time of this process so far, nanoseconds.
fn process_cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

struct Measured {
    cpu_pct_of_core: f64,
    samples: f64,
    cpu_us_per_sample: f64,
    wall_us_per_sample: Option<f64>,
}

fn rankscope_sampler(library: &Path, interval_s: f64) -> Measured {
    let out = tempfile::tempdir().unwrap();
    let profiler = Profiler::with_rank_env(
        Config {
            output_dir: out.path().into(),
            gpu_source: GpuSourceKind::Nvml,
            nvml_library: Some(library.into()),
            gpu_devices: Some("all".into()),
            gpu_interval_s: interval_s,
            collect_host: false,
            ..Config::default()
        },
        RankEnv::single(),
    );
    // Start NVML and open the devices outside the measured window.
    drop(profiler.session("warm-up", &[]).unwrap().finish().unwrap());
    let session = profiler.session("bench", &[]).unwrap();
    let (cpu0, wall0) = (process_cpu_ns(), Instant::now());
    std::thread::sleep(RUN);
    // The window ends before the session's finish: building and writing the
    // payload is a one-off cost, not the sampler's.
    let (cpu, wall) = (process_cpu_ns() - cpu0, wall0.elapsed());
    let outcome = session.finish().unwrap();
    let payload = payload::decode(&std::fs::read(outcome.spill_file).unwrap()).unwrap();
    let cost = payload.header.sampler;
    let samples = cost.gpu_readings as f64;
    Measured {
        cpu_pct_of_core: cpu as f64 / wall.as_nanos() as f64 * 100.0,
        samples,
        cpu_us_per_sample: cpu as f64 / 1e3 / samples,
        wall_us_per_sample: Some(cost.gpu_read_ns_mean as f64 / 1e3),
    }
}

/// The alternative: NVML started and devices looked up for every reading.
fn init_per_sample(library: &Path, interval_s: f64) -> Measured {
    let interval = Duration::from_secs_f64(interval_s);
    let (cpu0, wall0) = (process_cpu_ns(), Instant::now());
    let mut samples = 0u64;
    let mut next = Instant::now();
    while wall0.elapsed() < RUN {
        let nvml = Nvml::builder()
            .lib_path(library.as_os_str())
            .init()
            .unwrap();
        for index in 0..GPUS {
            let device = nvml.device_by_index(index).unwrap();
            let _ = device.memory_info();
            let _ = device.utilization_rates();
            let _ = device.temperature(TemperatureSensor::Gpu);
            let _ = device.power_usage();
            let _ = device.enforced_power_limit();
            let _ = device.clock_info(Clock::SM);
            let _ = device.clock_info(Clock::Memory);
            let _ = device.current_throttle_reasons();
        }
        drop(nvml);
        samples += 1;
        next += interval;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let (cpu, wall) = (process_cpu_ns() - cpu0, wall0.elapsed());
    Measured {
        cpu_pct_of_core: cpu as f64 / wall.as_nanos() as f64 * 100.0,
        samples: samples as f64,
        cpu_us_per_sample: cpu as f64 / 1e3 / samples as f64,
        wall_us_per_sample: None,
    }
}

fn main() {
    std::env::set_var("FAKE_NVML_DEVICES", GPUS.to_string());
    let library = fake_nvml::library();
    println!(
        "{GPUS} fake GPUs, {} s per run, process CPU time",
        RUN.as_secs()
    );
    println!(
        "{:<36} {:>9} {:>8} {:>15} {:>16}",
        "configuration", "CPU %core", "samples", "CPU µs/sample", "read µs/sample"
    );
    let show = |name: &str, m: &Measured| {
        println!(
            "{name:<36} {:>9.3} {:>8.0} {:>15.1} {:>16}",
            m.cpu_pct_of_core,
            m.samples,
            m.cpu_us_per_sample,
            m.wall_us_per_sample
                .map_or("-".into(), |w| format!("{w:.2}"))
        );
    };
    let fast = rankscope_sampler(&library, 0.1);
    show("rankscope sampler, 10 Hz", &fast);
    let default = rankscope_sampler(&library, 0.5);
    show("rankscope sampler, default 0.5 s", &default);
    let naive = init_per_sample(&library, 0.1);
    show("NVML init per reading, 10 Hz", &naive);
    println!(
        "ratio (init per reading / rankscope) at 10 Hz: {:.1}x CPU per sample",
        naive.cpu_us_per_sample / fast.cpu_us_per_sample
    );
}
