//! `rankscope launch -n N -- CMD ARGS…`: a local launcher for multi-rank
//! programs, with the variables torchrun sets (a fresh run id per launch),
//! so that ranks linking the agent gather over TCP. Each rank's output
//! lines come prefixed with its rank; SIGINT and SIGTERM are passed on to
//! every rank; the exit status is the worst of the ranks'.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::launcher::{self, Launch, Output};

/// What to launch.
pub struct LaunchOptions {
    /// Ranks to start.
    pub ranks: u32,
    /// MASTER_PORT; a free one when `None`.
    pub master_port: Option<u16>,
    /// Nodes the ranks stand for (simulated on this machine past one).
    pub nodes: u32,
    /// The program and its arguments.
    pub command: Vec<String>,
}

/// Runs the ranks to the end; returns the worst exit status (a rank ended
/// by a signal counts as 128 + the signal, as a shell says).
pub fn run(options: &LaunchOptions) -> Result<u8> {
    let (program, args) = options
        .command
        .split_first()
        .context("no command to launch: rankscope launch -n N -- CMD ARGS…")?;
    if !options.ranks.is_multiple_of(options.nodes) {
        anyhow::bail!(
            "{} ranks do not divide into {} nodes of as many ranks each",
            options.ranks,
            options.nodes
        );
    }
    let job = launcher::Job {
        program: Path::new(program),
        args,
        ranks: options.ranks,
        env: &[],
        master_port: options.master_port,
        nodes: options.nodes,
    };
    let on_line: launcher::LineHandler = Arc::new(|rank, output, line| {
        let text = format!("[rank {rank}] {line}\n");
        // One write per line: the ranks' lines never interleave mid-line.
        let _ = match output {
            Output::Out => std::io::stdout().write_all(text.as_bytes()),
            Output::Err => std::io::stderr().write_all(text.as_bytes()),
        };
    });
    let job_id = rankscope_common::env::fresh_job_id();
    let ranks = launcher::start(Launch::Local, &job, &job_id, on_line)?;
    forward_stop_signals(ranks.children())?;
    let statuses = ranks.wait(|_| {})?;
    let worst = statuses
        .iter()
        .map(|status| match (status.code(), status.signal()) {
            (Some(code), _) => code.clamp(0, 255) as u8,
            (None, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
            (None, None) => 1,
        })
        .max()
        .unwrap_or(0);
    Ok(worst)
}

/// Passes SIGINT and SIGTERM on to every rank still running (never to a
/// reaped one's pid), from a thread of their own.
fn forward_stop_signals(children: launcher::Children) -> Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM]).context("watching for stop signals")?;
    std::thread::Builder::new()
        .name("rankscope-launch-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                children.signal(signal);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}
