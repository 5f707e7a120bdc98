//! A rank program that links the agent and nothing else, as the README tells
//! a user to: it records a few stages and finishes its session. Rank 0
//! writes the report. Run it under any launcher; the tests run it with
//! torchrun's variables.
//!
//! With `--wait-for-signal` it stops after recording, says `ready` and
//! waits to be stopped, as a rank a scheduler cancels mid-job. With
//! `--exit-rank R`, rank R leaves without finishing its session, as a
//! crashed rank does. With `--steps N` it runs N steps of about 10 ms
//! (`--slow-rank R`: rank R's take three times as long, or M ms with
//! `--slow-ms M`, from step S on with `--slow-from S`), calling
//! `Profiler::step` after each, as a job with windows does; with
//! `--exit-at-step S` too, the rank of `--exit-rank` leaves at step S
//! (once its payloads of the rolling windows closed before S are written);
//! with `--step-inside`, each step ends inside its stage; with
//! `--no-step`, it never calls `Profiler::step` (a `step_stage` counts the
//! steps). With
//! `--late-rank R`, rank R finishes only once every other rank's finish
//! has returned (each leaves `finished-<rank>` in the output directory),
//! as a rank 0 busy elsewhere while the others end; `--bulk N` records N
//! metrics of distinct values first, for a payload past MPI's eager size.
//! With `--sessions N` it runs N sessions one after another, and with
//! `--stalled-rank R --stall-ms M` rank R finishes its first session M ms
//! late, as a rank held up while the others go on to the next session.

use std::io::Write;

use rankscope::Profiler;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let wait_for_signal = args.iter().any(|a| a == "--wait-for-signal");
    let step_inside = args.iter().any(|a| a == "--step-inside");
    let no_step = args.iter().any(|a| a == "--no-step");
    let number_after = |flag: &str| -> Option<u32> {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1)?.parse().ok())
    };
    let steps = number_after("--steps");
    let slow_rank = number_after("--slow-rank");
    let slow_from = number_after("--slow-from").unwrap_or(0);
    let slow_ms = number_after("--slow-ms").map_or(30, u64::from);
    let exit_rank = number_after("--exit-rank");
    let exit_at_step = number_after("--exit-at-step");
    let late_rank = number_after("--late-rank");
    let bulk = number_after("--bulk").unwrap_or(0);
    let sessions = number_after("--sessions").unwrap_or(1);
    let stalled_rank = number_after("--stalled-rank");
    let stall_ms = number_after("--stall-ms").map_or(0, u64::from);
    let profiler = Profiler::from_env()?;
    let rank = profiler.rank_env().map_or(0, |env| env.rank);
    for k in 0..sessions {
        let session = profiler.session("agent-only", &[("linked", "agent")])?;
        match steps {
            Some(steps) => {
                for step in 0..steps {
                    let slow = slow_rank == Some(rank) && step >= slow_from;
                    let ms = if slow { slow_ms } else { 10 };
                    if exit_rank == Some(rank) && exit_at_step == Some(step) {
                        if let Some(dir) = session.dir() {
                            wait_for_closed_windows(&dir, rank, u64::from(step));
                        }
                        std::process::exit(3);
                    }
                    let stage = profiler.stage("denoise_step");
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                    profiler.record_metric("step", f64::from(step));
                    if step_inside {
                        // The step ends inside the stage: the stage is open
                        // across every window's edge.
                        profiler.step();
                        std::thread::sleep(std::time::Duration::from_millis(ms / 2));
                        drop(stage);
                    } else {
                        drop(stage);
                        if !no_step {
                            profiler.step();
                        }
                    }
                }
            }
            None => {
                for step in 0..3 {
                    let _step = profiler.stage("denoise_step");
                    std::thread::sleep(std::time::Duration::from_millis(5 + 5 * u64::from(rank)));
                    profiler.record_metric("step", f64::from(step));
                }
            }
        }
        for i in 0..bulk {
            // Values that do not compress away.
            let value = f64::from(i.wrapping_mul(2_654_435_761) ^ rank);
            profiler.record_metric("bulk", value);
        }
        if exit_rank == Some(rank) && exit_at_step.is_none() {
            // The others are in their gather by now.
            std::thread::sleep(std::time::Duration::from_secs(2));
            std::process::exit(3);
        }
        if wait_for_signal {
            let _open = profiler.stage("waiting");
            println!("ready {}", session.dir().unwrap_or_default().display());
            std::io::stdout().flush()?;
            std::thread::sleep(std::time::Duration::from_secs(120));
        }
        let out = std::env::var_os("RANKSCOPE_OUTPUT_DIR").map(std::path::PathBuf::from);
        let world = profiler.rank_env().map_or(1, |env| env.world_size);
        if let (Some(out), true) = (&out, late_rank == Some(rank)) {
            wait_for_the_others(out, rank, world);
        }
        if k == 0 && stalled_rank == Some(rank) {
            std::thread::sleep(std::time::Duration::from_millis(stall_ms));
        }
        let outcome = session.finish()?;
        if let (Some(out), Some(_)) = (&out, late_rank) {
            std::fs::write(out.join(format!("finished-{rank}")), b"")?;
        }
        if let Some(report) = outcome.report {
            for file in report.files {
                println!("wrote {}", file.display());
            }
        }
    }
    Ok(())
}

/// Waits (at most a minute) until every rank but `rank` has left
/// `finished-<rank>` in `out`; says so where they had not.
/// Waits (up to a minute) until this rank's payloads of the rolling
/// windows (`RANKSCOPE_WINDOW_EVERY_STEPS`) that closed before `step` are
/// written: a rank that leaves at `step` leaves in its window, not in one
/// it had finished.
fn wait_for_closed_windows(dir: &std::path::Path, rank: u32, step: u64) {
    let every: u64 = std::env::var("RANKSCOPE_WINDOW_EVERY_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let closed = step.checked_div(every).unwrap_or(0);
    let gave_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let written = |window: u64| {
        std::fs::read_dir(dir.join(format!("window-{window}")))
            .map(|entries| {
                entries.filter_map(Result::ok).any(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("rank-{rank:05}"))
                })
            })
            .unwrap_or(false)
    };
    while !(1..=closed).all(written) && std::time::Instant::now() < gave_up {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn wait_for_the_others(out: &std::path::Path, rank: u32, world: u32) {
    let gave_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let all_finished = || {
        (0..world)
            .filter(|&r| r != rank)
            .all(|r| out.join(format!("finished-{r}")).exists())
    };
    while !all_finished() {
        if std::time::Instant::now() >= gave_up {
            eprintln!("rank {rank}: the others had not finished after a minute");
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
