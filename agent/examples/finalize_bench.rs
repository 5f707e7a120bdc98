//! Finalize time (gather, analysis, report) of one rank's session with a
//! payload the size of 10 minutes at the default sampling rates: 1 200 GPU
//! readings (0.5 s), 600 host readings (1 s) and 3 000 stages of 30 names,
//! made in about a second by sampling a simulated GPU every millisecond.
//! Rank 0 prints `finalize_ms <ms> payload_bytes <bytes> transport <name>`.
//!
//! `scripts/bench-finalize.sh` runs it under mpirun (MPI against the shared
//! directory) and under `rankscope launch` (TCP against the directory).

use std::time::{Duration, Instant};

use rankscope::{Config, Profiler};
use rankscope_common::config::GpuSourceKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config {
        gpu_source: GpuSourceKind::Simulated,
        gpu_interval_s: 0.001,
        host_interval_s: 0.002,
        ..Config::from_env()?
    };
    let profiler = Profiler::new(config)?;
    let session = profiler.session("finalize-bench", &[])?;
    let names: Vec<String> = (0..30).map(|i| format!("stage_{i:02}")).collect();
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < Duration::from_millis(1_250) {
        if i < 3_000 {
            let _stage = profiler.stage(&names[i % names.len()]);
            i += 1;
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    let finalizing = Instant::now();
    let outcome = session.finish()?;
    let ms = finalizing.elapsed().as_secs_f64() * 1e3;
    if outcome.gathered.is_some() {
        let transport = profiler.config().map_or("?", |c| match c.transport {
            rankscope_common::config::TransportKind::Dir => "dir",
            rankscope_common::config::TransportKind::Tcp => "tcp",
            _ => "mpi",
        });
        println!(
            "finalize_ms {ms:.1} payload_bytes {} transport {transport}",
            outcome.payload_bytes
        );
    }
    Ok(())
}
