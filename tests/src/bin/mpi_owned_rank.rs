//! A rank program that owns MPI, as an mpi4py or C++ host would: it
//! initialises MPI before the profiler and uses it after the session. With
//! `--hand-communicator` it gives the profiler its world communicator;
//! without, the profiler finds MPI already initialised and leaves it alone.

use mpi::traits::*;
use rankscope::transport::mpi::MpiTransport;
use rankscope::{Config, Profiler};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let universe = mpi::initialize().ok_or("MPI was initialised before main")?;
    let world = universe.world();
    let config = Config::from_env()?;
    let mut builder = Profiler::builder(config.clone());
    if std::env::args().any(|a| a == "--hand-communicator") {
        builder = builder.transport(MpiTransport::with_communicator(&world, &config));
    }
    let profiler = builder.build()?;
    let session = profiler.session("owned", &[])?;
    drop(profiler.stage("work"));
    let outcome = session.finish()?;
    drop(profiler);
    // The program's MPI still works after rankscope is done with it.
    world.barrier();
    let mut sum = 0u32;
    world.all_reduce_into(&1u32, &mut sum, mpi::collective::SystemOperation::sum());
    if world.rank() == 0 {
        println!("ranks {sum}; report {}", outcome.report.is_some());
    }
    Ok(())
}
