//! `rankscope demo`: a simulated tensor-parallel text-to-video job. The
//! parent starts N real rank processes (this program again, `demo-rank`,
//! through [`crate::launcher`]),
//! shows their progress, and prints the report rank 0 wrote. The ranks sleep
//! instead of computing: every number in the demo is simulated.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rankscope::{BlockComputation, DiffusionStep, Profiler};
use rankscope_coordinator::report::{REPORT_HTML, REPORT_JSON, STAGES_CSV, SUMMARY_TXT};

use crate::launcher::{self, Launch, Output};

/// Blocks of frames each rank generates.
const BLOCKS: u64 = 3;
/// Denoising steps per block.
const STEPS: u64 = 4;
/// Frames per block.
const FRAMES_PER_BLOCK: u64 = 16;
/// How much slower the straggler's VAE decode is.
const STRAGGLER_FACTOR: f64 = 1.4;
/// Settings the demo's ranks get unless the environment says otherwise: a
/// short gather deadline and sampling fast enough for a job under a second.
const DEMO_DEFAULTS: &[(&str, &str)] = &[
    ("RANKSCOPE_GATHER_TIMEOUT_S", "10"),
    ("RANKSCOPE_GPU_INTERVAL_S", "0.02"),
    ("RANKSCOPE_HOST_INTERVAL_S", "0.1"),
];

/// What the demo runs.
pub struct DemoOptions {
    /// Ranks to start.
    pub ranks: u32,
    /// The rank whose VAE decode is slow.
    pub straggler: Option<u32>,
    /// A rank that crashes halfway.
    pub kill_rank: Option<u32>,
    /// Output directory.
    pub out: PathBuf,
    /// Who starts the ranks.
    pub launch: Launch,
}

/// Runs the demo; returns whether every rank reported.
pub fn run(options: &DemoOptions) -> Result<bool> {
    check_options(options)?;
    let started = Instant::now();
    let exe = std::env::current_exe().context("locating the rankscope executable")?;
    let job_id = rankscope_common::env::fresh_job_id();
    let gpu_source = gpu_source();
    eprintln!(
        "rankscope demo: {} rank processes of a simulated pipeline, GPU data {}, straggler {}, session {job_id}",
        options.ranks,
        if gpu_source == "simulated" { "SIMULATED (no real hardware)" } else { &gpu_source },
        options.straggler.map_or("none".into(), |r| format!("rank {r}"))
    );
    let env = rank_env(options, &gpu_source);
    let args = rank_args(options);
    let progress = Progress::new();
    let job = launcher::Job {
        program: &exe,
        args: &args,
        ranks: options.ranks,
        env: &env,
        master_port: None,
        nodes: 1,
    };
    let ranks = launcher::start(options.launch, &job, &job_id, progress.on_line())?;
    let statuses = ranks.wait(progress.shower(options.ranks))?;
    if progress.tty {
        eprintln!();
    }
    tell_failures(options, &statuses);
    let session_dir = progress
        .session_dir
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .context("rank 0 did not start its session")?;
    if !statuses[0].success() {
        bail!(
            "rank 0 failed; its session directory is {}",
            session_dir.display()
        );
    }
    print_report(&session_dir)?;
    println!("demo finished in {:.2} s", started.elapsed().as_secs_f64());
    Ok(statuses.iter().all(|s| s.success()))
}

/// Refuses options the demo cannot run.
fn check_options(options: &DemoOptions) -> Result<()> {
    if options.ranks == 0 {
        bail!("--ranks must be at least 1");
    }
    for (flag, rank) in [
        ("--straggler", options.straggler),
        ("--kill-rank", options.kill_rank),
    ] {
        if let Some(rank) = rank.filter(|&r| r >= options.ranks) {
            bail!(
                "{flag} {rank} is not a rank of a {}-rank job",
                options.ranks
            );
        }
    }
    if options.kill_rank == Some(0) {
        bail!("--kill-rank 0 would kill the rank that writes the report; pick another rank");
    }
    if options.launch == Launch::Mpirun {
        if !cfg!(feature = "mpi") {
            bail!(
                "this rankscope was built without MPI: build it with \
                 `cargo build --release -p rankscope-cli --features mpi`"
            );
        }
        if options.kill_rank.is_some() {
            bail!("--kill-rank needs --launcher local: mpirun ends the whole job when a rank dies");
        }
    }
    Ok(())
}

/// Real GPUs when NVML is here (and the user did not choose); else simulated ones.
fn gpu_source() -> String {
    match std::env::var("RANKSCOPE_GPU_SOURCE") {
        Ok(chosen) => chosen,
        Err(_) if rankscope::nvml_available(None) => "nvml".to_string(),
        Err(_) => "simulated".to_string(),
    }
}

/// The environment the ranks get: output directory, transport, the demo's
/// defaults the environment does not override, and the simulated GPUs.
fn rank_env(options: &DemoOptions, gpu_source: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        (
            "RANKSCOPE_OUTPUT_DIR".into(),
            options.out.display().to_string(),
        ),
        (
            "RANKSCOPE_TRANSPORT".into(),
            match options.launch {
                Launch::Local => "tcp",
                Launch::Mpirun => "mpi",
            }
            .into(),
        ),
    ];
    env.extend(
        DEMO_DEFAULTS
            .iter()
            .filter(|(key, _)| std::env::var_os(key).is_none())
            .map(|(key, value)| (key.to_string(), value.to_string())),
    );
    if gpu_source == "simulated" {
        env.push(("RANKSCOPE_GPU_SOURCE".into(), "simulated".into()));
    }
    if let Some(straggler) = options.straggler {
        // The slow rank's simulated GPU runs hot and throttles.
        env.push(("RANKSCOPE_SIMULATED_HOT_RANK".into(), straggler.to_string()));
    }
    env
}

/// The ranks' arguments: `demo-rank` and the straggler and rank to kill.
fn rank_args(options: &DemoOptions) -> Vec<String> {
    let mut args = vec!["demo-rank".to_string()];
    if let Some(straggler) = options.straggler {
        args.extend(["--straggler".into(), straggler.to_string()]);
    }
    if let Some(kill) = options.kill_rank {
        args.extend(["--kill-rank".into(), kill.to_string()]);
    }
    args
}

/// What the ranks' output tells the parent: blocks done, and rank 0's
/// session directory.
struct Progress {
    /// Blocks generated by all ranks.
    blocks_done: Arc<AtomicU32>,
    /// Rank 0's session directory, once it said it.
    session_dir: Arc<Mutex<Option<PathBuf>>>,
    /// Whether stderr is a terminal (the progress line redrawn in place).
    tty: bool,
}

impl Progress {
    /// No progress yet.
    fn new() -> Self {
        Progress {
            blocks_done: Arc::default(),
            session_dir: Arc::default(),
            tty: std::io::stderr().is_terminal(),
        }
    }

    /// Reads the ranks' lines: their stderr passed on, their stdout counted.
    fn on_line(&self) -> launcher::LineHandler {
        let (blocks_done, session_dir) =
            (Arc::clone(&self.blocks_done), Arc::clone(&self.session_dir));
        Arc::new(move |_rank, output, line| {
            if output == Output::Err {
                // The ranks' notices and live display, as they are (one write).
                let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
            } else if line == "block-done" {
                blocks_done.fetch_add(1, Ordering::Relaxed);
            } else if let Some(dir) = line.strip_prefix("session-dir ") {
                *session_dir.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir.into());
            }
        })
    }

    /// Shows the blocks generated and ranks finished of `ranks`, when they change.
    fn shower(&self, ranks: u32) -> impl FnMut(usize) + '_ {
        let total = ranks * BLOCKS as u32;
        let mut shown = None;
        move |finished| {
            let done = self.blocks_done.load(Ordering::Relaxed);
            if shown != Some((done, finished)) {
                shown = Some((done, finished));
                let line = format!(
                    "rankscope demo: {done}/{total} blocks generated, {finished}/{ranks} ranks finished"
                );
                // One write per line: the ranks' live display shares stderr.
                let text = if self.tty {
                    format!("\r{line}")
                } else {
                    format!("{line}\n")
                };
                let _ = std::io::stderr().write_all(text.as_bytes());
            }
        }
    }
}

/// Tells each rank that failed, and why where the demo knows.
fn tell_failures(options: &DemoOptions, statuses: &[ExitStatus]) {
    for (rank, status) in statuses.iter().enumerate() {
        if !status.success() {
            if options.launch == Launch::Mpirun {
                eprintln!("rankscope demo: mpirun failed: {status}");
            } else if options.kill_rank == Some(rank as u32) {
                eprintln!("rankscope demo: rank {rank} crashed, as asked (--kill-rank)");
            } else {
                eprintln!("rankscope demo: rank {rank} failed: {status}");
            }
        }
    }
}

/// Prints the summary rank 0 wrote and where its files are.
fn print_report(session_dir: &Path) -> Result<()> {
    let summary_path = session_dir.join(SUMMARY_TXT);
    let summary = std::fs::read_to_string(&summary_path)
        .with_context(|| format!("reading {}", summary_path.display()))?;
    println!("{summary}");
    let html = session_dir.join(REPORT_HTML);
    println!("html:     {}", html.display());
    println!("report:   {}", session_dir.join(REPORT_JSON).display());
    println!("summary:  {}", summary_path.display());
    println!("stages:   {}", session_dir.join(STAGES_CSV).display());
    // The page is one self-contained file: it opens offline anywhere.
    if std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some() {
        println!("open it:  xdg-open {}", html.display());
    } else {
        println!("open it:  copy report.html to a machine with a browser; it needs no network");
    }
    Ok(())
}

/// One rank of the demo job: a simulated text-to-video pipeline.
pub fn run_rank(straggler: Option<u32>, kill_rank: Option<u32>) -> Result<()> {
    let profiler = Profiler::from_env().context("setting up the profiler")?;
    let env = profiler
        .rank_env()
        .context("the demo needs an enabled profiler (RANKSCOPE_ENABLED=1)")?
        .clone();
    let rank = env.rank;
    let session = profiler.session(
        "t2v-demo",
        &[
            ("pipeline", "text-to-video"),
            ("parallelism", "tensor"),
            ("data", "simulated"),
        ],
    )?;
    if rank == 0 {
        let dir = session.dir().context("the session has a directory")?;
        println!("session-dir {}", dir.display());
    }
    let world = u64::from(env.world_size);
    work(&profiler, rank, "model_load", 0, 40.0);
    profiler.record_model_parameters("text_encoder", 4_762_000_000);
    profiler.record_model_parameters("transformer_shard", 13_000_000_000 / world);
    profiler.record_model_parameters("vae", 86_000_000);
    work(&profiler, rank, "text_encoding", 0, 60.0);
    let slow = if straggler == Some(rank) {
        STRAGGLER_FACTOR
    } else {
        1.0
    };
    for block in 0..BLOCKS {
        generate_block(&profiler, rank, block);
        // Each block's frames decoded as they are made (streaming video).
        work(&profiler, rank, "vae_decode", block, 100.0 * slow);
        println!("block-done");
        if kill_rank == Some(rank) && block == 1 {
            eprintln!("rankscope demo: rank {rank} crashes now (simulated, --kill-rank)");
            std::process::abort();
        }
    }
    profiler.record_throughput((BLOCKS * FRAMES_PER_BLOCK) as f64, None);
    profiler.add_event(
        "video_done",
        &serde_json::json!({ "frames": BLOCKS * FRAMES_PER_BLOCK }),
    );
    let outcome = session.finish()?;
    if let Some(gathered) = outcome.gathered {
        if !gathered.missing.is_empty() {
            eprintln!(
                "rankscope demo: rank 0 wrote the report without ranks {:?}",
                gathered.missing
            );
        }
    }
    Ok(())
}

/// Call `call` of stage `stage` on `rank`: about `ms` milliseconds, jittered.
fn work(profiler: &Profiler, rank: u32, stage: &str, call: u64, ms: f64) {
    let _stage = profiler.stage(stage);
    simulate(ms * jitter(rank, stage, call));
}

/// One block of frames: its denoising steps inside a `diffusion_block`
/// stage, each step and the block recorded.
fn generate_block(profiler: &Profiler, rank: u32, block: u64) {
    let block_started = Instant::now();
    {
        let _block = profiler.stage_with("diffusion_block", &serde_json::json!({ "block": block }));
        for step in 0..STEPS {
            let step_started = Instant::now();
            work(profiler, rank, "denoise_step", block * STEPS + step, 30.0);
            profiler.record_diffusion_step(DiffusionStep {
                step,
                timestep: 1000.0 * (1.0 - step as f64 / STEPS as f64),
                block_size: FRAMES_PER_BLOCK,
                computation_ms: step_started.elapsed().as_secs_f64() * 1e3,
                guidance_scale: Some(5.0),
            });
        }
    }
    profiler.record_block_computation(BlockComputation {
        block_index: block,
        block_size: FRAMES_PER_BLOCK,
        computation_ms: block_started.elapsed().as_secs_f64() * 1e3,
        memory_mb: None,
    });
}

/// Stands in for GPU work.
fn simulate(ms: f64) {
    std::thread::sleep(Duration::from_secs_f64(ms / 1e3));
}

/// A repeatable factor in [0.97, 1.03) for one rank, stage and call.
fn jitter(rank: u32, stage: &str, call: u64) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in stage
        .bytes()
        .chain(rank.to_le_bytes())
        .chain(call.to_le_bytes())
    {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    0.97 + (h % 600) as f64 / 10_000.0
}
