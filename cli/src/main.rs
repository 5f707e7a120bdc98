//! The `rankscope` command: argument parsing, then library calls. The exit
//! status is chosen in one place, [`main`].

mod demo;
mod launch;
mod launcher;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use rankscope_common::error::Chain;
use rankscope_common::text::terminal;
use rankscope_common::Config;
use rankscope_coordinator::{aggregate, inspect};

/// Exit status of an error.
const EXIT_ERROR: u8 = 1;
/// Exit status when a report was written but some ranks or inputs are
/// missing from it. (2 is clap's, for usage errors.)
const EXIT_PARTIAL: u8 = 3;
/// The most ranks `rankscope demo` starts on one machine.
const DEMO_MAX_RANKS: u32 = 256;

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
    /// Needs no GPU and no MPI. The ranks hand their data to rank 0 through
    /// the session directory; rank 0 writes report.json, summary.txt and
    /// stages.csv there.
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
        /// Who starts the ranks: this program (the ranks gather through the
        /// session directory), or a real `mpirun` (they gather over MPI;
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
        #[arg(short = 'n', long = "nproc", value_parser = clap::value_parser!(u32).range(1..=i64::from(DEMO_MAX_RANKS)))]
        ranks: u32,
        /// MASTER_PORT for the program's own rendezvous (default: a free one;
        /// rankscope listens at it + 1, or RANKSCOPE_PORT).
        #[arg(long)]
        master_port: Option<u16>,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Merge the rank spill files (rank-NNNNN.rsp) of a session directory
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
        /// shared a session id (default: the newest; the others are named).
        #[arg(long)]
        run: Option<String>,
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

fn main() -> ExitCode {
    // Usage errors exit here, with clap's status 2.
    let cli = Cli::parse();
    match run(cli) {
        Ok(Finished::Complete) => ExitCode::SUCCESS,
        Ok(Finished::Partial) => ExitCode::from(EXIT_PARTIAL),
        Ok(Finished::Launched(code)) => ExitCode::from(code),
        Err(error) => {
            // Line by line: a multi-line error keeps its lines, each made
            // safe for the terminal.
            let chain = Chain(error.as_ref()).to_string();
            let mut lines = chain.lines();
            eprintln!(
                "rankscope: error: {}",
                terminal(lines.next().unwrap_or_default())
            );
            for line in lines {
                eprintln!("{}", terminal(line));
            }
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// How a command that did not fail ended.
enum Finished {
    /// Everything done.
    Complete,
    /// A report was written, but ranks or inputs are missing from it.
    Partial,
    /// `launch`: the worst exit status of the ranks.
    Launched(u8),
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
    let complete = match cli.command {
        Commands::Demo {
            ranks,
            straggler,
            kill_rank,
            out,
            launcher,
        } => demo::run(&demo::DemoOptions {
            ranks,
            straggler: straggler.or((ranks >= 3).then_some(2)),
            kill_rank,
            out,
            launch: launcher,
        })?,
        Commands::Aggregate {
            reports_dir,
            output,
            run,
        } => {
            let config = Config::from_env().context("loading the configuration")?;
            let aggregated =
                aggregate::aggregate(&reports_dir, output.as_deref(), run.as_deref(), &config)?;
            print!("{}", aggregated.files.summary);
            for file in &aggregated.files.files {
                println!("wrote {}", file.display());
            }
            let session = &aggregated.report.session;
            for skipped in &session.skipped {
                eprintln!(
                    "rankscope: skipped {}: {}",
                    terminal(&skipped.source),
                    terminal(&skipped.reason)
                );
            }
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
            if !aggregated.report.session.ranks_missing.is_empty() {
                eprintln!(
                    "rankscope: ranks missing from the report: {}",
                    aggregated.report.session.missing_text()
                );
            }
            aggregated.is_complete()
        }
        Commands::Inspect { file } => {
            print!("{}", inspect::inspect(&file)?);
            true
        }
        Commands::Launch {
            ranks,
            master_port,
            command,
        } => {
            return Ok(Finished::Launched(launch::run(&launch::LaunchOptions {
                ranks,
                master_port,
                command,
            })?))
        }
        Commands::DemoRank {
            straggler,
            kill_rank,
        } => {
            demo::run_rank(straggler, kill_rank)?;
            true
        }
    };
    Ok(complete.into())
}
