//! The `rankscope` command: argument parsing, then library calls. The exit
//! status is chosen in one place, [`main`].

mod demo;
mod launch;
mod launcher;
mod progress;
mod reach;
mod top;
mod trigger;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use rankscope_common::error::Chain;
use rankscope_common::kineto::TraceLimits;
use rankscope_common::parallel::ParallelLayout;
use rankscope_common::text::terminal;
use rankscope_common::Config;
use rankscope_coordinator::model::SkippedInput;
use rankscope_coordinator::AnalysisConfig;
use rankscope_coordinator::{aggregate, compare, import, inspect, read, report};

/// Exit status of an error.
const EXIT_ERROR: u8 = 1;
/// Exit status of `compare` on a regression...
const EXIT_REGRESSION: u8 = 1;
/// ... and when it cannot compare: a report it cannot read is a usage
/// error here, since 1 means a regression.
const EXIT_COMPARE_FAILED: u8 = 2;
/// Exit status when a report was written but some ranks or inputs are
/// missing from it. (2 is clap's, for usage errors.)
const EXIT_PARTIAL: u8 = 3;
/// The most ranks `rankscope demo` starts on one machine.
const DEMO_MAX_RANKS: u32 = 256;
/// The most rank processes `rankscope launch` starts on one machine.
const LAUNCH_MAX_RANKS: u32 = 4096;

/// rankscope: a profiler for multi-rank GPU inference jobs.
///
/// Exit status: 0 complete; 1 error; 2 usage error; 3 a report was written
/// but it is partial (ranks missing or inputs skipped).
#[derive(Parser)]
#[command(name = "rankscope", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
enum Commands {
    /// Run a simulated tensor-parallel text-to-video job (real rank
    /// processes, simulated GPUs, one slow rank) and print its report.
    ///
    /// Needs no GPU and no MPI. The ranks hand their data to rank 0 over
    /// TCP on this machine; rank 0 writes the report into the session
    /// directory.
    Demo {
        /// Number of rank processes (1 to 256).
        #[arg(long, default_value_t = 4,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(DEMO_MAX_RANKS)))]
        ranks: u32,
        /// Rank made ~40% slower in vae_decode (default: 2 when there are 3+ ranks).
        #[arg(long)]
        straggler: Option<u32>,
        /// Rank that crashes halfway, to show a report with a missing rank.
        #[arg(long)]
        kill_rank: Option<u32>,
        /// Output directory; the session gets its own directory inside.
        #[arg(long, default_value = "profiling_reports")]
        out: PathBuf,
        /// Who starts the ranks: this program (the ranks gather over TCP on
        /// this machine), or a real `mpirun` (they gather over MPI;
        /// needs Open MPI and a build with `--features mpi`).
        #[arg(long, value_enum, default_value = "local")]
        launcher: launcher::Launch,
    },
    /// Start N ranks of a program on this machine with the variables
    /// torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, a fresh
    /// TORCHELASTIC_RUN_ID, ...), so that ranks linking the agent gather
    /// over TCP.
    ///
    /// Each rank's output lines are prefixed with its rank; SIGINT and
    /// SIGTERM are passed on to every rank; the exit status is the worst of
    /// the ranks' (128 + the signal for a rank a signal ended).
    Launch {
        /// Number of ranks.
        #[arg(short = 'n', long = "nproc", value_parser = clap::value_parser!(u32).range(1..=i64::from(LAUNCH_MAX_RANKS)))]
        ranks: u32,
        /// MASTER_PORT for the program's own rendezvous (default: a free one;
        /// rankscope listens at it + 1, or RANKSCOPE_PORT).
        #[arg(long)]
        master_port: Option<u16>,
        /// Run the ranks as this many nodes of consecutive ranks, simulated
        /// on this machine: each rank gets its node's LOCAL_RANK,
        /// LOCAL_WORLD_SIZE and GROUP_RANK, and the reports name its node
        /// `simulated-node-<n>` (RANKSCOPE_NODE). The ranks must divide
        /// evenly.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        nodes: u32,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Ask a running session for a window: a span of steps that every rank
    /// profiles at once, with its own report in <session dir>/window-<k>/,
    /// while the job goes on.
    ///
    /// With --dir, writes a request into the session directory's control
    /// folder (who can write there can ask); with ENDPOINT, sends it to
    /// rank 0's TCP listener, proving it knows the job's token
    /// (RANKSCOPE_TOKEN). Rank 0 plans the window a few steps ahead, so
    /// that every rank opens it at the same step, and this prints the
    /// window's number and steps. The ranks count steps where the program
    /// calls Profiler::step (prof.step() in Python), and must all see the
    /// session directory (one machine, or a shared file system).
    #[command(group(clap::ArgGroup::new("session").required(true)))]
    Trigger {
        /// Rank 0's TCP listener (`host:port`: RANKSCOPE_ADDR and
        /// RANKSCOPE_PORT, by default MASTER_ADDR and MASTER_PORT + 1).
        #[arg(group = "session")]
        endpoint: Option<String>,
        /// The running session's directory.
        #[arg(long, group = "session")]
        dir: Option<PathBuf>,
        /// Steps the window covers (default: the job's window_steps, 20).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
        steps: Option<u64>,
        /// A window of about this many seconds instead: rank 0 turns it into
        /// steps at the pace its steps go (at most an hour: rank 0 refuses
        /// a window whose delay and steps would hold the windows longer).
        #[arg(long, conflicts_with = "steps", value_parser = window_seconds)]
        seconds: Option<Duration>,
        /// Steps to let pass before the window opens.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(..=1_000_000_000))]
        delay_steps: u64,
        /// Python ranks also capture the window with torch.profiler (its
        /// kernels, collectives and CPU operators in the window's report).
        #[arg(long)]
        torch: bool,
        /// Python ranks also trace their Python functions in the window
        /// (its `python_functions` and the calls on its timeline), whatever
        /// `python_tracing` says.
        #[arg(long)]
        python: bool,
        /// Also wait for the window's report, and print its folder.
        #[arg(long)]
        wait: bool,
        /// End the window planned or open now instead (with K, only if it
        /// is window K): a planned one never opens, an open one closes a
        /// few steps from now, at the same step on every rank not past it
        /// yet (its report says it ended early).
        #[arg(
            long,
            value_name = "K",
            num_args = 0..=1,
            conflicts_with_all = ["steps", "seconds", "delay_steps", "torch", "python", "wait"]
        )]
        cancel: Option<Option<u32>>,
        /// Seconds to wait for rank 0's answer (and, with --wait, for the report).
        #[arg(long, default_value_t = 60.0)]
        timeout: f64,
    },
    /// Watch a running session: per rank its steps, pace, open stage and
    /// GPUs, the slowest rank marked, refreshed each interval.
    ///
    /// While this runs, every rank shares a status once a second in the
    /// session directory's control folder (nothing is written while nobody
    /// watches); the ranks must all see the session directory (one machine,
    /// or a shared file system). With ENDPOINT, rank 0 reads them for this
    /// command and sends them over its TCP listener (the job's token in
    /// RANKSCOPE_TOKEN). A rank with no status in the last 5 s is named
    /// missing.
    #[command(group(clap::ArgGroup::new("session").required(true)))]
    Top {
        /// Rank 0's TCP listener (`host:port`).
        #[arg(group = "session")]
        endpoint: Option<String>,
        /// The running session's directory.
        #[arg(long, group = "session")]
        dir: Option<PathBuf>,
        /// One JSON object per view, a line each, for scripts (one view
        /// unless --count says more).
        #[arg(long)]
        json: bool,
        /// Seconds between views.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Views to show (default: until the session ends; 1 with --json).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// Merge the rank spill files (rank-NNNNN.….rsp) of a session directory
    /// into one report, as rank 0 does at the end of a job.
    ///
    /// Files that cannot be used (truncated, corrupt, of another format or
    /// version, a second file for one rank) are named with the reason and
    /// left out; the rest are merged. Exit status 3 says the report is partial.
    Aggregate {
        /// The session directory holding the spill files.
        #[arg(long)]
        reports_dir: PathBuf,
        /// Where to write the report (default: the reports directory).
        #[arg(long)]
        output: Option<PathBuf>,
        /// The run to report, when the directory holds several runs that
        /// shared a session id (default: the one with the most ranks, then
        /// the newest; the others are named).
        #[arg(long)]
        run: Option<String>,
        /// Write report.json, report.html, summary.txt and stages.csv only,
        /// not trace.json.gz and raw/ (which take most of the time at
        /// scale).
        #[arg(long)]
        report_only: bool,
    },
    /// Compare a run's report with a baseline's: for each stage and headline
    /// metric (session time, frames/s, blocks/s, peak GPU memory) the
    /// change; a change worse than the threshold is a regression, unless it
    /// stays inside the spread across ranks.
    ///
    /// Exit status: 0 no regression, 1 a regression, 2 a usage error or a
    /// report that cannot be read. A CI job can gate on it.
    Compare {
        /// The baseline's report.json, or its session directory.
        baseline: PathBuf,
        /// The current run's report.json, or its session directory.
        current: PathBuf,
        /// A change worse than this many percent is a regression.
        #[arg(long, default_value_t = 10.0, value_parser = threshold_pct)]
        threshold: f64,
        /// Print the comparison as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Render report.html again from a session's report.json (after an
    /// upgrade of rankscope, or to put the page elsewhere). A report written
    /// before the page's charts existed renders with empty charts.
    Report {
        /// The session directory, or its report.json.
        dir: PathBuf,
        /// Where to write the page (default: report.html beside report.json).
        #[arg(long)]
        html: Option<PathBuf>,
    },
    /// Read per-rank torch.profiler / Kineto traces (`.json`, `.json.gz`,
    /// as torch.profiler, sglang and cache-dit write them) and VizTracer
    /// traces into one report and one merged timeline (trace.json.gz):
    /// each rank's GPU time (idle, compute, communication, memory, with
    /// HTA's definitions), kernels across ranks, kernel stragglers,
    /// collectives split into waiting for the last rank and the rest, and
    /// Python functions across ranks.
    ///
    /// A trace's rank comes from its `distributedInfo`, else from its name
    /// (`rank-3`, `rank_3`, `rank3`). A rank may have one trace of each
    /// kind. The traces' clocks are aligned from their collectives. Traces
    /// that cannot be used (truncated, not a trace, no rank, a second one
    /// of a kind for a rank) are named with the reason; the others are
    /// reported. Exit status 3 says the report is partial.
    Import {
        /// Trace files, or directories whose .json and .json.gz files are read.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Where to write the report.
        #[arg(long, default_value = "profiling_reports/import")]
        out: PathBuf,
        /// The most rows kept of each kind per trace (GPU activities,
        /// launches, collectives); what is past it is counted in the report.
        #[arg(long, default_value_t = TraceLimits::default().max_rows)]
        max_rows: usize,
        /// The most bytes one trace may hold, as read (a gzip trace
        /// inflated): a larger one is refused, saying so.
        #[arg(long, default_value_t = TraceLimits::default().max_bytes)]
        max_bytes: u64,
        /// Traces read at once (default: the number of cores).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
        jobs: Option<u32>,
        /// The job's parallel layout (`tp=4,dp=2`, the dimension whose
        /// neighbours are adjacent ranks first): it labels each rank whose
        /// trace's process groups do not.
        #[arg(long)]
        parallel_layout: Option<ParallelLayout>,
    },
    /// Show what a payload (spill) file holds: its header and the rows in
    /// each table.
    Inspect {
        /// The file.
        file: PathBuf,
    },
    /// One rank of the demo job (started by `rankscope demo`).
    #[command(hide = true)]
    DemoRank {
        #[arg(long)]
        straggler: Option<u32>,
        #[arg(long)]
        kill_rank: Option<u32>,
    },
}

/// What the analysis reads of the configuration (`RANKSCOPE_CONFIG` and
/// `RANKSCOPE_*` variables).
fn analysis_config() -> Result<AnalysisConfig> {
    let config = Config::from_env().context("loading the configuration")?;
    Ok(AnalysisConfig::from(&config))
}

/// Sets glibc's allocator up for the aggregation (BENCHMARKS.md, at 1024
/// ranks on 2 cores). Only the command does this, never a rank.
///
/// - At most two arenas: the main thread's, and one more that the decoding
///   threads share with it. Each arena keeps what its threads freed; with
///   two, what the decoding threads freed in the main arena serves the
///   analysis after them. One per thread: 0.35 s and 35.8 MiB; two: 0.35 s
///   and 32.5–33.0 MiB; one: 0.55 s and 32–51.5 MiB (the threads wait for
///   its lock).
/// - Up to 1 MiB freed at the top of an arena stays there for the next
///   table instead of being handed back as it is freed (glibc starts at
///   128 KiB and raises it as large blocks are freed, which a set value
///   stops: blocks of 128 KiB and more, such as a rank's stage table of
///   about 140 KB, are then mapped and unmapped each time). What is held
///   goes back at `malloc_trim` after the analysis. Handing back and
///   faulting in the tables' memory table by table took a sixth of the
///   time: 0.31 → 0.27 s, the peak unchanged (it moves by a MiB from run
///   to run with every file; BENCHMARKS.md).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator parameter; it is called before the
    // aggregation starts its threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
}

fn main() -> ExitCode {
    // Usage errors exit here, with clap's status 2.
    let cli = Cli::parse();
    match run(cli) {
        Ok(Finished::Complete) => ExitCode::SUCCESS,
        Ok(Finished::Partial) => ExitCode::from(EXIT_PARTIAL),
        Ok(Finished::Status(code)) => ExitCode::from(code),
        Err(error) => {
            print_error(&error);
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Prints an error and its causes line by line: a multi-line error keeps
/// its lines, each made safe for the terminal.
fn print_error(error: &anyhow::Error) {
    let chain = Chain(error.as_ref()).to_string();
    let mut lines = chain.lines();
    eprintln!(
        "rankscope: error: {}",
        terminal(lines.next().unwrap_or_default())
    );
    for line in lines {
        eprintln!("{}", terminal(line));
    }
}

/// `--seconds`: more than 0, at most an hour (`MAX_WINDOW_MS`).
fn window_seconds(text: &str) -> Result<Duration, String> {
    let most = rankscope_common::window::MAX_WINDOW_MS as f64 / 1e3;
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= most => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "`{text}` is not a number of seconds above 0 and at most {most}"
        )),
    }
}

/// `--threshold`: a percentage, 0 or more.
fn threshold_pct(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(pct) if pct.is_finite() && pct >= 0.0 => Ok(pct),
        _ => Err(format!("`{text}` is not a percentage of 0 or more")),
    }
}

/// How a command that did not fail ended.
enum Finished {
    /// Everything done.
    Complete,
    /// A report was written, but ranks or inputs are missing from it.
    Partial,
    /// An exit status the command chose: `launch`, the worst of its
    /// ranks'; `compare`, whether it found a regression.
    Status(u8),
}

impl From<bool> for Finished {
    fn from(complete: bool) -> Self {
        if complete {
            Finished::Complete
        } else {
            Finished::Partial
        }
    }
}

/// Runs one command.
fn run(cli: Cli) -> Result<Finished> {
    match cli.command {
        Commands::Demo {
            ranks,
            straggler,
            kill_rank,
            out,
            launcher,
        } => Ok(demo::run(&demo::DemoOptions {
            ranks,
            straggler: straggler.or((ranks >= 3).then_some(2)),
            kill_rank,
            out,
            launch: launcher,
        })?
        .into()),
        Commands::Aggregate {
            reports_dir,
            output,
            run,
            report_only,
        } => run_aggregate(&reports_dir, output.as_deref(), run.as_deref(), report_only),
        Commands::Compare {
            baseline,
            current,
            threshold,
            json,
        } => Ok(Finished::Status(compare_reports(
            &baseline, &current, threshold, json,
        ))),
        Commands::Report { dir, html } => run_report(&dir, html),
        Commands::Import {
            paths,
            out,
            max_rows,
            max_bytes,
            jobs,
            parallel_layout,
        } => run_import(&paths, &out, (max_rows, max_bytes), jobs, parallel_layout),
        Commands::Inspect { file } => {
            print!("{}", inspect::inspect(&file)?);
            Ok(Finished::Complete)
        }
        Commands::Top {
            endpoint,
            dir,
            json,
            interval,
            count,
        } => {
            top::run(&top::TopOptions {
                session: reach::Reach::of(endpoint, dir)?,
                json,
                interval: Duration::try_from_secs_f64(interval)
                    .context("--interval must be a number of seconds, 0 or more")?,
                count,
            })?;
            Ok(Finished::Complete)
        }
        Commands::Trigger {
            endpoint,
            dir,
            steps,
            seconds,
            delay_steps,
            torch,
            python,
            wait,
            cancel,
            timeout,
        } => {
            trigger::run(&trigger::TriggerOptions {
                session: reach::Reach::of(endpoint, dir)?,
                steps,
                seconds,
                delay_steps,
                torch,
                python,
                cancel,
                wait,
                timeout: Duration::try_from_secs_f64(timeout)
                    .context("--timeout must be a number of seconds, 0 or more")?,
            })?;
            Ok(Finished::Complete)
        }
        Commands::Launch {
            ranks,
            master_port,
            nodes,
            command,
        } => Ok(Finished::Status(launch::run(&launch::LaunchOptions {
            ranks,
            master_port,
            nodes,
            command,
        })?)),
        Commands::DemoRank {
            straggler,
            kill_rank,
        } => {
            demo::run_rank(straggler, kill_rank)?;
            Ok(Finished::Complete)
        }
    }
}

/// `rankscope aggregate`: the report of the payloads in `reports_dir`,
/// with what it left out told on stderr.
fn run_aggregate(
    reports_dir: &Path,
    output: Option<&Path>,
    run: Option<&str>,
    report_only: bool,
) -> Result<Finished> {
    let config = analysis_config()?;
    tune_malloc();
    let outputs = if report_only {
        aggregate::Outputs::ReportOnly
    } else {
        aggregate::Outputs::All
    };
    let aggregated = {
        let bar = progress::Bar::stderr();
        aggregate::aggregate_with(reports_dir, output, run, outputs, &config, &bar)?
    };
    print!("{}", aggregated.files.summary);
    for file in &aggregated.files.files {
        println!("wrote {}", file.display());
    }
    let session = &aggregated.report.session;
    print_skipped(&session.skipped);
    for other in &session.other_runs {
        eprintln!(
            "rankscope: not in this report: {}: {}",
            terminal(&other.source),
            terminal(&other.reason)
        );
    }
    if !session.other_runs.is_empty() {
        eprintln!(
            "rankscope: the report covers run `{}`; choose another with --run",
            terminal(session.run_id.as_deref().unwrap_or("(no run id)"))
        );
    }
    if !session.ranks_missing.is_empty() {
        eprintln!(
            "rankscope: ranks missing from the report: {}",
            session.missing_text()
        );
    }
    Ok(aggregated.is_complete().into())
}

/// Tells each input skipped on stderr.
fn print_skipped(skipped: &[SkippedInput]) {
    for skipped in skipped {
        eprintln!(
            "rankscope: skipped {}: {}",
            terminal(&skipped.source),
            terminal(&skipped.reason)
        );
    }
}

/// `rankscope report`: `report.html` written again from the report.json in
/// (or at) `dir`, beside it unless `html` names the file.
fn run_report(dir: &Path, html: Option<PathBuf>) -> Result<Finished> {
    let report = read::read_report(dir)?;
    let json_dir = if dir.is_dir() {
        dir
    } else {
        dir.parent().unwrap_or(Path::new("."))
    };
    let html = html.unwrap_or_else(|| json_dir.join(report::REPORT_HTML));
    println!(
        "wrote {}",
        report::write_html_file(&report, &html)?.display()
    );
    Ok(Finished::Complete)
}

/// `rankscope import`: the report of the torch.profiler and VizTracer
/// traces in `paths`.
fn run_import(
    paths: &[PathBuf],
    out: &Path,
    (max_rows, max_bytes): (usize, u64),
    jobs: Option<u32>,
    layout: Option<ParallelLayout>,
) -> Result<Finished> {
    let config = analysis_config()?;
    let defaults = import::ImportOptions::default();
    let options = import::ImportOptions {
        limits: TraceLimits {
            max_rows,
            max_bytes,
            ..defaults.limits
        },
        jobs: jobs.map_or(defaults.jobs, |jobs| jobs as usize),
        layout,
        ..defaults
    };
    let imported = {
        let bar = progress::Bar::stderr();
        import::import_with(paths, out, &options, &config, &bar)?
    };
    print!("{}", imported.files.summary);
    for file in &imported.files.files {
        println!("wrote {}", terminal(&file.display().to_string()));
    }
    print_skipped(&imported.report.session.skipped);
    Ok(imported.is_complete().into())
}

/// `rankscope compare`: prints the comparison; the exit status says whether
/// anything regressed (errors exit 2 here, so that 1 means a regression).
fn compare_reports(baseline: &Path, current: &Path, threshold_pct: f64, json: bool) -> u8 {
    let read = |path: &Path| read::read_report(path).map_err(anyhow::Error::from);
    let (before, after) = match (read(baseline), read(current)) {
        (Ok(before), Ok(after)) => (before, after),
        (Err(error), _) | (_, Err(error)) => {
            print_error(&error);
            return EXIT_COMPARE_FAILED;
        }
    };
    let comparison = compare::compare(&before, &after, threshold_pct);
    if json {
        match serde_json::to_string_pretty(&comparison) {
            Ok(text) => println!("{text}"),
            Err(error) => {
                print_error(&error.into());
                return EXIT_COMPARE_FAILED;
            }
        }
    } else {
        print!(
            "{}",
            compare::render(
                &comparison,
                &baseline.display().to_string(),
                &current.display().to_string()
            )
        );
    }
    if comparison.regressed() {
        EXIT_REGRESSION
    } else {
        0
    }
}
