//! A rank program that owns MPI, as an mpi4py or C++ host would: it
//! initialises MPI before the profiler and uses it after the session. With
//! `--hand-communicator` it gives the profiler its world communicator;
//! without, the profiler finds MPI already initialised and leaves it alone.
//! With `--funneled-session-on-thread` it initialises MPI at
//! `MPI_THREAD_FUNNELED` (only the main thread may call MPI) and runs the
//! session on another thread.

use mpi::traits::*;
use mpi::Threading;
use rankscope::transport::mpi::MpiTransport;
use rankscope::{Config, Outcome, Profiler};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let funneled = std::env::args().any(|a| a == "--funneled-session-on-thread");
    let level = if funneled {
        Threading::Funneled
    } else {
        Threading::Serialized
    };
    let (universe, _) =
        mpi::initialize_with_threading(level).ok_or("MPI was initialised before main")?;
    let world = universe.world();
    let config = Config::from_env()?;
    let mut builder = Profiler::builder(config.clone());
    if std::env::args().any(|a| a == "--hand-communicator") {
        builder = builder.transport(MpiTransport::with_communicator(&world, &config));
    }
    let profiler = builder.build()?;
    let run = move || -> Result<Outcome, rankscope::SessionError> {
        let session = profiler.session("owned", &[])?;
        drop(profiler.stage("work"));
        session.finish()
    };
    let outcome = if funneled {
        std::thread::spawn(run)
            .join()
            .map_err(|_| "the session thread panicked")??
    } else {
        run()?
    };
    // The program's MPI still works after rankscope is done with it.
    world.barrier();
    let mut sum = 0u32;
    world.all_reduce_into(&1u32, &mut sum, mpi::collective::SystemOperation::sum());
    if world.rank() == 0 {
        println!("ranks {sum}; report {}", outcome.report.is_some());
    }
    Ok(())
}
