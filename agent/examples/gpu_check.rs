//! Samples the real GPUs of this machine through NVML for a few seconds and
//! prints every field read, the time one NVML reading took and the report's
//! GPU table: the one-run check of the real-device path
//! (`scripts/gpu-check.sh`).
//!
//! `cargo run --release -p rankscope --example gpu_check -- [SECONDS]`

use std::time::Duration;

use anyhow::{bail, Context, Result};
use rankscope::{Config, MemoryReading, Profiler, RankEnv};
use rankscope_common::config::GpuSourceKind;
use rankscope_common::payload;
use rankscope_common::table::{GpuSamplesView, MemorySnapshotsView};

fn main() -> Result<()> {
    let seconds: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()
        .context("SECONDS must be a number")?
        .unwrap_or(10.0);
    // RANKSCOPE_NVML_LIBRARY points at another NVML (the tests' fake, say).
    let library = std::env::var_os("RANKSCOPE_NVML_LIBRARY").map(std::path::PathBuf::from);
    if !rankscope::nvml_available(library.as_deref()) {
        bail!("NVML does not load on this machine: no NVIDIA driver?");
    }
    let out = std::env::temp_dir().join(format!("rankscope-gpu-check-{}", std::process::id()));
    let config = Config {
        output_dir: out.clone(),
        gpu_source: GpuSourceKind::Nvml,
        nvml_library: library,
        gpu_devices: Some(std::env::var("RANKSCOPE_GPU_DEVICES").unwrap_or_else(|_| "all".into())),
        gpu_interval_s: 0.5,
        pcie_interval_s: Some(2.0),
        live_display: true,
        display_interval_s: 2.0,
        ..Config::default()
    };
    let profiler = Profiler::with_rank_env(config.clone(), RankEnv::single());
    let session = profiler.session("gpu-check", &[])?;
    profiler.memory_snapshot("start", MemoryReading::default());
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let outcome = session.finish()?;
    let payload = payload::decode(&std::fs::read(&outcome.spill_file)?)?;
    let header = &payload.header;

    println!(
        "gpu_source {} — {}",
        header.gpu_source.as_str(),
        header.gpu_selection
    );
    for gpu in &header.gpus {
        println!("device {gpu:?}");
    }
    let samples: GpuSamplesView = payload.view()?.context("no GPU readings")?;
    let shown = |v: Option<String>| v.unwrap_or_else(|| "missing (not supported)".into());
    for position in 0..header.gpus.len() as u32 {
        let rows: Vec<usize> = (0..samples.len)
            .filter(|&i| samples.gpu[i] == position)
            .collect();
        println!("\ngpu {position}: {} readings", rows.len());
        for &i in rows.first().into_iter().chain(rows.last()) {
            println!("  at {:.3} s", samples.ts_ns[i] as f64 / 1e9);
            let fields = [
                (
                    "memory_used_bytes",
                    samples.memory_used_bytes.get(i).map(|v| v.to_string()),
                ),
                (
                    "memory_total_bytes",
                    samples.memory_total_bytes.get(i).map(|v| v.to_string()),
                ),
                (
                    "memory_reserved_bytes",
                    samples.memory_reserved_bytes.get(i).map(|v| v.to_string()),
                ),
                (
                    "util_gpu_pct",
                    samples.util_gpu_pct.get(i).map(|v| v.to_string()),
                ),
                (
                    "util_mem_pct",
                    samples.util_mem_pct.get(i).map(|v| v.to_string()),
                ),
                (
                    "temperature_c",
                    samples.temperature_c.get(i).map(|v| v.to_string()),
                ),
                ("power_w", samples.power_w.get(i).map(|v| v.to_string())),
                (
                    "power_limit_w",
                    samples.power_limit_w.get(i).map(|v| v.to_string()),
                ),
                (
                    "sm_clock_mhz",
                    samples.sm_clock_mhz.get(i).map(|v| v.to_string()),
                ),
                (
                    "mem_clock_mhz",
                    samples.mem_clock_mhz.get(i).map(|v| v.to_string()),
                ),
                (
                    "throttle_reasons",
                    samples.throttle_reasons.get(i).map(|v| format!("{v:#x}")),
                ),
                (
                    "pcie_tx_kbps",
                    samples.pcie_tx_kbps.get(i).map(|v| v.to_string()),
                ),
                (
                    "pcie_rx_kbps",
                    samples.pcie_rx_kbps.get(i).map(|v| v.to_string()),
                ),
            ];
            for (name, value) in fields {
                println!("    {name:<22} {}", shown(value));
            }
        }
    }
    if let Some(snaps) = payload.view::<MemorySnapshotsView>()? {
        for i in 0..snaps.len {
            println!(
                "\nmemory snapshot `{}` from {}: allocated {:?} reserved {:?}",
                snaps.label.value(i),
                snaps.source.get(i),
                snaps.allocated_bytes.get(i),
                snaps.reserved_bytes.get(i)
            );
        }
    }
    let cost = &header.sampler;
    println!(
        "\none NVML reading of {} GPU(s): {:.3} ms on average, {:.3} ms at most, over {} readings",
        header.gpus.len(),
        cost.gpu_read_ns_mean as f64 / 1e6,
        cost.gpu_read_ns_max as f64 / 1e6,
        cost.gpu_readings
    );
    let report = outcome.report.context("rank 0 wrote no report")?;
    print!("\n{}", report.summary);
    let _ = std::fs::remove_dir_all(out);
    Ok(())
}
