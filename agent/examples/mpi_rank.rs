//! A rank program to copy: link the agent with the `mpi` feature, run it
//! under `mpirun`, read one report.
//!
//! ```sh
//! cargo build --release -p rankscope --features mpi --example mpi_rank
//! mpirun -n 4 target/release/examples/mpi_rank
//! ```
//!
//! The ranks gather their payloads to rank 0 over MPI (no shared file
//! system needed); rank 0 writes `profiling_reports/mpi-demo-<job id>/`.

use std::time::Duration;

use rankscope::{DiffusionStep, Profiler};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Under mpirun the launcher's variables say which rank this is, and the
    // transport is MPI (initialised here, since the program did not).
    let profiler = Profiler::from_env()?;
    let rank = profiler.rank_env().map_or(0, |env| env.rank);
    let session = profiler.session("mpi-demo", &[("parallelism", "tensor")])?;
    for step in 0..8 {
        let _step = profiler.stage("denoise_step");
        // Stand-in for the real work; rank 1 is slower.
        let ms = if rank == 1 { 30 } else { 20 };
        std::thread::sleep(Duration::from_millis(ms));
        profiler.record_diffusion_step(DiffusionStep {
            step,
            computation_ms: ms as f64,
            ..Default::default()
        });
    }
    let outcome = session.finish()?;
    if let Some(report) = outcome.report {
        print!("{}", report.summary);
    }
    Ok(())
}
