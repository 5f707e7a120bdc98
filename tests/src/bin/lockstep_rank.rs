//! A rank of a lockstep job, for the known-answer tests of the verdict:
//! every step it runs `attention` (its work, then `barrier`, a real barrier
//! with the other ranks: each rank leaves a file for the step in the shared
//! `--barrier` folder and waits until every rank's is there), then `mlp`.
//! The barrier is recorded with `Profiler::record_collective` unless
//! `--unrecorded`, as a Rust job that records none.
//!
//! `--slow-rank R` makes rank R's attention work three times the others'
//! (or `--factor F` times); `--stall-rank R --stall-step S` sleeps 300 ms
//! in rank R's `mlp` at step S; `--warmup-ms M` makes every rank's first
//! step M ms longer. `--steps N` steps (20).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rankscope::Profiler;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| -> Option<&str> {
        let at = args.iter().position(|a| a == flag)?;
        args.get(at + 1).map(String::as_str)
    };
    let number = |flag: &str| value(flag).and_then(|v| v.parse::<f64>().ok());
    let barrier = PathBuf::from(value("--barrier").ok_or("--barrier DIR is needed")?);
    let steps = number("--steps").unwrap_or(20.0) as u32;
    let recorded = !args.iter().any(|a| a == "--unrecorded");
    let profiler = Profiler::from_env()?;
    let env = profiler.rank_env().ok_or("no rank environment")?;
    let (rank, world) = (env.rank, env.world_size);
    let slow = number("--slow-rank").map(|r| r as u32) == Some(rank);
    let factor = if slow {
        number("--factor").unwrap_or(3.0)
    } else {
        1.0
    };
    let stall_step = (number("--stall-rank").map(|r| r as u32) == Some(rank))
        .then(|| number("--stall-step").unwrap_or(7.0) as u32);
    let warmup = Duration::from_secs_f64(number("--warmup-ms").unwrap_or(0.0) / 1e3);
    let ms = |ms: f64| Duration::from_secs_f64(ms / 1e3);

    let session = profiler.session("lockstep", &[("parallel", "cp")])?;
    for step in 0..steps {
        {
            let _step = profiler.stage("step");
            {
                let _attention = profiler.stage("attention");
                std::thread::sleep(ms(40.0 * factor));
                if step == 0 {
                    std::thread::sleep(warmup);
                }
                let _barrier = profiler.stage("barrier");
                let start = profiler.collective_begin();
                meet(&barrier, step, rank, world)?;
                if let (true, Some(start)) = (recorded, start) {
                    profiler.record_collective("barrier", Some("world"), None, start);
                }
            }
            let _mlp = profiler.stage("mlp");
            std::thread::sleep(ms(15.0));
            if stall_step == Some(step) {
                std::thread::sleep(ms(300.0));
            }
        }
        profiler.step();
    }
    session.finish()?;
    Ok(())
}

/// Waits until every rank of `world` has reached `step`: leaves this
/// rank's file for it in `dir` and looks for the others' every 200 µs.
fn meet(dir: &Path, step: u32, rank: u32, world: u32) -> std::io::Result<()> {
    std::fs::write(dir.join(format!("{step}-{rank}")), b"")?;
    let arrived = |r: u32| dir.join(format!("{step}-{r}")).exists();
    while !(0..world).all(arrived) {
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}
