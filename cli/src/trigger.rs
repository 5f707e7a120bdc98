//! `rankscope trigger`: asks a running session for a window (or, with
//! `--cancel`, to end the one planned or open), through the control files
//! of its directory ([`rankscope_common::window`]) or its rank 0's TCP
//! listener ([`rankscope::transport::tcp::remote`]), and waits for rank
//! 0's plan (and, with `--wait`, the window's report).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rankscope::transport::tcp::remote::Remote;
use rankscope_common::remote::{
    RemoteTrigger, TriggerAnswer, MAX_PLAN_WAIT_MS, MAX_REPORT_WAIT_MS,
};
use rankscope_common::text::terminal;
use rankscope_common::window::{self, Answer, Plan, Request, Trigger};

use crate::launcher::random_hex;
use crate::reach::Reach;

/// What `rankscope trigger` was asked.
pub struct TriggerOptions {
    /// The running session.
    pub session: Reach,
    /// Steps the window covers; `None`: `seconds`, else the job's
    /// `window_steps`.
    pub steps: Option<u64>,
    /// A window of about this long, turned into steps by rank 0 at its pace.
    pub seconds: Option<Duration>,
    /// Steps to let pass before it opens.
    pub delay_steps: u64,
    /// Python ranks also capture the window with torch.profiler.
    pub torch: bool,
    /// Python ranks also trace their Python functions in the window.
    pub python: bool,
    /// End the window planned or open instead of asking for one (`Some`),
    /// only if it is this one (`Some(Some(k))`).
    pub cancel: Option<Option<u32>>,
    /// Wait for the window's report too.
    pub wait: bool,
    /// How long to wait for each answer.
    pub timeout: Duration,
}

/// Asks for the window and prints what rank 0 planned; with `wait`, also
/// the folder of the window's report once it is written.
pub fn run(options: &TriggerOptions) -> Result<()> {
    let request = Request {
        // No other request has it.
        nonce: random_hex(16, "a request nonce")?,
        steps: options.steps.unwrap_or(0),
        delay_steps: options.delay_steps,
        trigger: Trigger::Command,
        torch: options.torch,
        python: options.python,
        duration_ms: options.seconds.map_or(0, |d| {
            d.as_millis().clamp(1, u128::from(window::MAX_WINDOW_MS)) as u64
        }),
        cancel: options.cancel.is_some(),
        cancel_window: options.cancel.flatten(),
    };
    match &options.session {
        Reach::Dir(dir) => through_dir(dir, request, options),
        Reach::Endpoint(remote) => through_endpoint(remote, request, options),
    }
}

/// Asks through the session directory's control files.
fn through_dir(dir: &Path, request: Request, options: &TriggerOptions) -> Result<()> {
    check_running(dir)?;
    let deadline = Instant::now()
        .checked_add(options.timeout)
        .context("--timeout is too long")?;
    let path = window::write_request(dir, &request)
        .with_context(|| format!("writing a window request into {}", dir.display()))?;
    let asked_at = window::request_time(&path);
    // Unanswered, it is taken back: it must not open a window later, unasked.
    let answer = window::await_answer(dir, (&path, &request.nonce), deadline, &mut || false);
    let plan = match answer {
        Answer::Planned(plan) => plan,
        Answer::Refused(reason) => bail!("rank 0 refused: {reason}"),
        Answer::Unanswered => bail!(
            "rank 0 did not answer in {:.1} s: do its ranks call Profiler::step (prof.step() in \
             Python)?",
            options.timeout.as_secs_f64(),
        ),
    };
    let report_dir = window::window_dir(dir, plan.index);
    print_plan(&plan, &report_dir);
    if options.wait && options.cancel.is_none() {
        let deadline = Instant::now()
            .checked_add(options.timeout)
            .context("--timeout is too long")?;
        if !window::await_report(&report_dir, asked_at, deadline, &mut || false) {
            bail!(
                "no report in {} after {:.1} s: the window may not have closed yet (its steps \
                 have not all passed)",
                report_dir.display(),
                options.timeout.as_secs_f64()
            );
        }
        println!("{}", terminal(&report_dir.display().to_string()));
    }
    Ok(())
}

/// Asks rank 0's listener, which answers with the plan and, with
/// `--wait`, once the report is written (into its own session directory).
fn through_endpoint(remote: &Remote, request: Request, options: &TriggerOptions) -> Result<()> {
    Instant::now()
        .checked_add(options.timeout)
        .context("--timeout is too long")?;
    let millis = |most: u64| options.timeout.as_millis().min(u128::from(most)) as u64;
    let asked = RemoteTrigger {
        request,
        plan_wait_ms: millis(MAX_PLAN_WAIT_MS),
        report_wait_ms: match options.wait {
            true => millis(MAX_REPORT_WAIT_MS).max(1),
            false => 0,
        },
    };
    let mut call = remote.trigger(&asked)?;
    match call.answer(options.timeout)? {
        TriggerAnswer::Planned { plan, report_dir }
        | TriggerAnswer::Cancelled { plan, report_dir } => print_plan(&plan, &report_dir),
        TriggerAnswer::Refused { reason } => bail!("rank 0 refused: {reason}"),
        TriggerAnswer::Written { .. } | TriggerAnswer::Waiting => {
            bail!("rank 0 answered out of turn")
        }
    }
    if options.wait && options.cancel.is_none() {
        match call.answer(options.timeout)? {
            TriggerAnswer::Written { report_dir } => {
                println!("{}", terminal(&report_dir.display().to_string()))
            }
            TriggerAnswer::Refused { reason } => bail!("{reason}"),
            TriggerAnswer::Planned { .. }
            | TriggerAnswer::Cancelled { .. }
            | TriggerAnswer::Waiting => bail!("rank 0 answered out of turn"),
        }
    }
    Ok(())
}

/// Says which window rank 0 planned (or ended early) and where its report
/// goes.
fn print_plan(plan: &Plan, report_dir: &Path) {
    let shown = report_dir.display().to_string();
    let report_dir = terminal(&shown);
    match &plan.cancelled {
        None => println!(
            "window {}: steps {} to {}; its report goes to {report_dir}",
            plan.index,
            plan.first_step,
            plan.close_step(),
        ),
        Some(_) if plan.steps == 0 => {
            println!("window {}: cancelled; it will not open", plan.index)
        }
        Some(_) => println!(
            "window {}: cancelled; it closes at step {} (steps {} to {}); its report goes to \
             {report_dir}",
            plan.index,
            plan.close_step(),
            plan.first_step,
            plan.close_step(),
        ),
    }
}

/// Fails, saying why, unless a session runs in `dir`: its rank 0 keeps
/// `control/live` there, and is not a process of this machine that is gone.
pub(crate) fn check_running(dir: &Path) -> Result<()> {
    if !window::is_live(dir) {
        bail!(
            "no session runs in {}: its rank 0 keeps {}/{} there while it does",
            dir.display(),
            window::CONTROL_DIR,
            window::LIVE_FILE
        );
    }
    if let Some(pid) = gone_here(dir) {
        bail!(
            "no session runs in {}: its rank 0 (process {pid} on this machine) is gone",
            dir.display()
        );
    }
    Ok(())
}

/// The process id of the rank 0 that said a session runs in `dir`, where
/// it ran on this machine and is gone (it crashed, its file stayed).
fn gone_here(dir: &Path) -> Option<u32> {
    let (host, pid) = window::live_owner(dir)?;
    if host != gethostname::gethostname().to_string_lossy() {
        return None;
    }
    let id = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: signal 0 checks that the process exists; it sends nothing.
    let gone = unsafe { libc::kill(id, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    gone.then_some(pid)
}
