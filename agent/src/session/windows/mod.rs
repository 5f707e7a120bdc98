//! Windows of a running session: spans of steps that every rank profiles at
//! once, each with its own cross-rank report in `<session dir>/window-<k>/`
//! while the job goes on.
//!
//! `Profiler::step` counts steps ([`Steps`]). At the counts where a window
//! opens or closes, the step notes an [`Edge`]: the time, and how many
//! flush parts hold only rows from before it. The session's windows thread
//! ([`WindowsThread`]) takes the edges in order: rolling windows every
//! `window_every_steps` steps, which every rank knows alike, or windows
//! rank 0 plans on request (its inbox, [`crate::WindowControl`], and the
//! control folder: `rankscope trigger`; `SIGUSR1`), every
//! `window_every_s` seconds, or as one rank's steps begin to lag the
//! others' ([`imbalance`]), and the other ranks follow, from the plan
//! files of rank 0's folder where they share it, else from the plans rank
//! 0 sends them ([`rankscope_common::window`]); rank 0 may end one early
//! (`rankscope trigger --cancel`, or a plan whose first step does not
//! come: [`requests`]). When a window closes, the thread
//! flushes, keeps of the parts since its opening edge the rows that
//! happened between its two edges, and writes them as one payload into
//! `window-<k>/`, where rank 0 gathers every rank's by the directory
//! transport's rules and writes the window's report on a thread of its own.
//! The edges are exact however late the thread runs; the session's own
//! payload still holds every row (the parts stay until the session ends).
//!
//! The ranks meet in rank 0's session directory: one machine, a shared
//! file system, or, under the TCP and MPI transports, rank 0's listener,
//! through which a rank apart from it gets the plans and sends its
//! statuses and window payloads (`transport::tcp::mirror`,
//! `Transport::window_written`); a rank that reaches it none
//! of these ways is named missing in each window's report, by the
//! gather's deadline.

use std::path::PathBuf;
// What `step_count.rs` takes from its parent module (loom's, in its test).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rankscope_common::error::Chain;
use rankscope_common::payload::DroppedRows;
use rankscope_common::table::Table;
use rankscope_common::window::{self, Plan, Trigger, WindowMeta};

use super::{Hub, WindowPayload, WindowRows};
use crate::control::{Inbox, WindowAnswer};
use crate::notice::{notice, say, spawn_with_notices};
use crate::transport::dir::DirTransport;
use crate::transport::Transport;

mod imbalance;
mod live_status;
mod requests;
mod sigusr1;
mod step_count;
mod steps;

use imbalance::ImbalanceWatch;
use live_status::StatusSharing;
use sigusr1::Sigusr1;
use step_count::NONE;
use steps::Edge;
pub use steps::PlannedWindow;
pub(crate) use steps::Steps;

/// How often the windows thread looks at the control files when no edge
/// wakes it.
const POLL: Duration = Duration::from_millis(50);
/// Time between rank 0's plan and the window's first step, besides the
/// delay asked for: for the other ranks to read the plan (they look every
/// [`POLL`]). Rank 0 turns it into steps at the rate its steps go, and
/// leads by at least [`MIN_LEAD_STEPS`].
const PLAN_LEAD: Duration = Duration::from_millis(300);
/// The longest one request may hold the windows, its delay and steps
/// together at rank 0's pace: no later window can be planned meanwhile.
const MAX_WINDOW_HOLD: Duration = Duration::from_secs(3600);
/// The most steps (delay and steps together) one request may hold the
/// windows for while rank 0's pace is not known yet.
const MAX_SPAN_UNPACED: u64 = 100_000;
/// How long the pace of steps is measured over before it is taken anew.
const PACE_MEASURE: Duration = Duration::from_secs(1);
/// The fewest steps between a plan and its window.
const MIN_LEAD_STEPS: u64 = 2;
/// The most: a rank racing through tiny steps waits no longer than this.
const MAX_LEAD_STEPS: u64 = 100_000;
/// Requests read per look: a flood of them waits on disk, a look at a time.
const REQUESTS_PER_LOOK: usize = 16;
/// Window reports rank 0 writes at once; another window's waits for one.
const REPORTS_AT_ONCE: usize = 2;
/// How long a window's gather waits where ranks were missing from the
/// last: long enough for ranks a step behind.
const MISSING_AGAIN_WAIT: Duration = Duration::from_secs(2);
/// The windows thread of one session.
pub(crate) struct WindowsThread {
    steps: Arc<Steps>,
    thread: Option<JoinHandle<()>>,
}

impl WindowsThread {
    /// Starts the windows thread of the session that `hub` runs in
    /// `session_dir`, counting steps from 0, taking requests from `inbox`
    /// too. A rolling window opens at once.
    pub(crate) fn start(
        hub: &Arc<Hub>,
        (session_dir, run): (PathBuf, Option<String>),
        inbox: Inbox,
    ) -> Option<WindowsThread> {
        let steps = Arc::clone(hub.recording().steps());
        let rolling = hub.config.window_every_steps;
        let on_imbalance = hub.config.window_on_imbalance_pct;
        let host = hub
            .session
            .with_running(|s| s.host.clone())
            .unwrap_or_default();
        steps.reset(rolling);
        inbox.set_rolling(rolling);
        let mut windows = Windows {
            hub: Arc::downgrade(hub),
            steps: Arc::clone(&steps),
            dir: session_dir,
            run,
            rank: hub.env.rank,
            rolling,
            default_steps: hub.config.window_steps.max(1),
            next_index: 1,
            inbox,
            waiting: None,
            expiry: Duration::from_secs_f64(hub.config.window_expiry_s),
            expires: None,
            planned: None,
            armed: false,
            open: None,
            reports: Vec::new(),
            parts_reported: 0,
            pace: (Instant::now(), 0, None),
            ranks_were_missing: Arc::default(),
            refused_files: 0,
            unreadable_plan: None,
            // Every rank takes it (a scheduler may signal them all); rank
            // 0's asks for a window, the others' are ignored.
            sigusr1: Sigusr1::take(),
            signals_taken: 0,
            every: (hub.env.rank == 0 && hub.config.window_every_s > 0.0).then(|| {
                (
                    Duration::from_secs_f64(hub.config.window_every_s),
                    Instant::now(),
                )
            }),
            periodic_taken: 0,
            // Rolling windows leave no room for others.
            imbalance: ImbalanceWatch::new(on_imbalance, hub.config.straggler_min_s)
                .filter(|_| rolling == 0 && hub.env.rank == 0),
            status: StatusSharing::new(rolling == 0 && on_imbalance > 0.0, host),
            imbalances_taken: 0,
        };
        if hub.env.rank == 0 && rolling > 0 && on_imbalance > 0.0 {
            notice!(
                "no windows on imbalance (window_on_imbalance_pct): rolling windows run \
                 (window_every_steps = {rolling}), and each already gets a report"
            );
        }
        if hub.env.rank == 0 {
            let host = gethostname::gethostname().to_string_lossy().into_owned();
            if let Err(e) = window::write_live(&windows.dir, &host) {
                notice!("rankscope trigger cannot reach this session: {e}");
            }
        }
        if rolling > 0 {
            let plan = windows.rolling_plan(0);
            windows.open(hub, plan, edge_now(hub));
        }
        let thread = spawn_with_notices("rankscope-windows", move || windows.run());
        match thread {
            Ok(thread) => Some(WindowsThread {
                steps,
                thread: Some(thread),
            }),
            Err(e) => {
                notice!("windows off: cannot start their thread: {e}");
                None
            }
        }
    }

    /// Stops the thread. With `close_open` (the session finishes), a window
    /// open now closes with the steps it had and gets its report (rank 0
    /// waits for it); without, it is left (a stop signal spills the
    /// session: no time to gather).
    pub(crate) fn stop(mut self, close_open: bool) {
        self.steps
            .close_on_stop
            .store(close_open, Ordering::Relaxed);
        self.halt();
    }

    fn halt(&mut self) {
        self.steps.signal.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for WindowsThread {
    fn drop(&mut self) {
        self.halt();
    }
}

/// An edge now, for a window opened or closed by the thread rather than at
/// a step: late, or at the session's end.
fn edge_now(hub: &Hub) -> Edge {
    let parts = hub.recording().parts_taken();
    Edge {
        count: hub.recording().steps().count(),
        ns: hub.recording().recorder().now_ns(),
        parts,
    }
}

/// Rows this rank dropped so far per table (past `max_data_points`).
fn dropped_now(hub: &Hub) -> Vec<(Table, u64)> {
    hub.recording()
        .recorder()
        .row_counts()
        .into_iter()
        .map(|(table, _, dropped)| (table, dropped))
        .collect()
}

/// Rows dropped per table since `before`: a window's share.
fn dropped_since(hub: &Hub, before: &[(Table, u64)]) -> Vec<DroppedRows> {
    dropped_now(hub)
        .into_iter()
        .filter_map(|(table, now)| {
            let then = before.iter().find(|(t, _)| *t == table).map_or(0, |d| d.1);
            let rows = now.saturating_sub(then);
            (rows > 0).then(|| DroppedRows {
                table: table.name().to_string(),
                rows,
            })
        })
        .collect()
}

/// A window open on this rank.
struct Open {
    plan: Plan,
    /// Where it opened here.
    edge: Edge,
    /// Rows dropped per table when it opened.
    dropped: Vec<(Table, u64)>,
    /// The step count at which it closes.
    close_step: u64,
}

/// What the windows thread keeps.
struct Windows {
    hub: Weak<Hub>,
    steps: Arc<Steps>,
    dir: PathBuf,
    /// The session's run identity: the plans it follows carry it.
    run: Option<String>,
    rank: u32,
    /// `window_every_steps`; 0 where windows come from requests.
    rolling: u64,
    /// Steps of a requested window that names none.
    default_steps: u64,
    /// The number of the next window to open.
    next_index: u32,
    /// Requests from within the process (rank 0's TCP desk).
    inbox: Inbox,
    /// Where the answers of the window planned or open now go, where it
    /// was asked through the inbox: its report's, or why it has none.
    waiting: Option<Sender<WindowAnswer>>,
    /// `window_expiry_s`.
    expiry: Duration,
    /// Rank 0: when the planned window expires, where its first step has
    /// not come by then.
    expires: Option<Instant>,
    planned: Option<Plan>,
    /// Whether the steps were asked for the planned window's edges.
    armed: bool,
    open: Option<Open>,
    /// Rank 0's window reports under way.
    reports: Vec<JoinHandle<()>>,
    /// The last flush part a closed window read.
    parts_reported: u32,
    /// The pace of steps: since when it is measured, the count then, and
    /// the steps per second of the last full measure.
    pace: (Instant, u64, Option<f64>),
    /// Whether ranks were missing from the last window rank 0 gathered:
    /// the next gather does not wait long for them again.
    ranks_were_missing: Arc<AtomicBool>,
    /// Control files refused (unreadable requests), counted.
    refused_files: u64,
    /// The plan that could not be read, said once.
    unreadable_plan: Option<u32>,
    /// `SIGUSR1`, where the program left it at its default action.
    sigusr1: Option<Sigusr1>,
    /// Windows asked for by `SIGUSR1` so far.
    signals_taken: u64,
    /// Rank 0's periodic windows (`window_every_s`): the period, and when
    /// the last was planned (or the session started).
    every: Option<(Duration, Instant)>,
    /// Periodic windows planned so far.
    periodic_taken: u64,
    /// Rank 0's watch for imbalance, where windows open on it.
    imbalance: Option<ImbalanceWatch>,
    /// This rank's live status, shared where it is read.
    status: StatusSharing,
    /// Windows on imbalance planned so far.
    imbalances_taken: u64,
}

impl Windows {
    fn run(mut self) {
        loop {
            let stopped = self.steps.signal.wait(POLL);
            let close = self.steps.close_on_stop.load(Ordering::Relaxed);
            if stopped && !close {
                // A stop signal spills the session: no window is written,
                // no report waited for.
                if self.rank == 0 {
                    window::remove_live(&self.dir);
                }
                return;
            }
            let Some(hub) = self.hub.upgrade() else {
                return;
            };
            self.take_edges(&hub);
            if stopped {
                if let Some(open) = self.open.take() {
                    self.close(&hub, open, edge_now(&hub));
                }
                if self.rank == 0 {
                    window::remove_live(&self.dir);
                }
                drop(hub);
                for report in self.reports.drain(..) {
                    let _ = report.join();
                }
                return;
            }
            self.look(&hub);
        }
    }

    /// Opens and closes windows at the edges the steps noted, in order.
    fn take_edges(&mut self, hub: &Arc<Hub>) {
        let (edges, dropped) = self.steps.take_edges();
        if dropped > 0 {
            notice!(
                "{dropped} window edges were lost: windows every {} steps come faster than \
                 this rank can write them",
                self.rolling
            );
        }
        for edge in edges {
            if let Some(open) = self.open.take() {
                if edge.count >= open.close_step {
                    self.close(hub, open, edge);
                } else {
                    self.open = Some(open);
                }
            }
            if self.open.is_some() {
                continue;
            }
            if self.rolling > 0 {
                let plan = self.rolling_plan(edge.count);
                self.open(hub, plan, edge);
            } else if let Some(plan) = self.planned.take() {
                if edge.count < plan.first_step {
                    self.planned = Some(plan);
                    continue;
                }
                let late = edge.count > plan.first_step;
                self.open(hub, plan, edge);
                if late {
                    // An edge a cancelled plan left armed opened it: its
                    // own close may not be armed.
                    self.arm_close(hub);
                }
            }
        }
    }

    /// Answers requests (rank 0) or reads plans (the others), and asks the
    /// steps for the edges of a window planned.
    fn look(&mut self, hub: &Arc<Hub>) {
        let lag = self.watch_imbalance(hub);
        if self.rank == 0 {
            // Kept measured, for the lead of the next plan.
            self.steps_per_second();
            self.answer_requests(hub);
            if let Some(lag) = lag {
                self.answer_imbalance(hub, lag);
            }
            self.expire(hub);
        }
        if self.rolling > 0 {
            return;
        }
        if self.rank != 0 {
            self.follow_plans(hub);
        }
        if self.armed || self.open.is_some() {
            return;
        }
        let Some(plan) = self.planned.take() else {
            return;
        };
        self.steps.set_current(Some(&plan));
        self.armed = self.steps.arm(plan.first_step, plan.close_step());
        if self.armed {
            self.planned = Some(plan);
            return;
        }
        // Heard of too late to open at its step: opened now, and said so
        // in the window's report (this rank's first step is later).
        self.open(hub, plan, edge_now(hub));
        self.arm_close(hub);
    }

    /// Arms the close of the window open now, a step after its opening at
    /// least; closes it now where the count passed its close.
    fn arm_close(&mut self, hub: &Arc<Hub>) {
        let Some(open) = self.open.as_mut() else {
            return;
        };
        open.close_step = open.close_step.max(open.edge.count + 1);
        if !self.steps.arm(open.close_step, NONE) {
            let open = self.open.take().expect("open just above");
            self.close(hub, open, edge_now(hub));
        }
    }

    /// The rolling window that opens at step `count`: numbered by the
    /// count, so that every rank numbers it alike even where edges were
    /// lost.
    fn rolling_plan(&self, count: u64) -> Plan {
        let index = u32::try_from(count / self.rolling + 1).unwrap_or(u32::MAX);
        Plan {
            index,
            first_step: u64::from(index - 1).saturating_mul(self.rolling),
            steps: self.rolling,
            trigger: Trigger::Rolling,
            nonce: String::new(),
            torch: false,
            python: false,
            run: self.run.clone(),
            cancelled: None,
        }
    }

    /// The window planned or open now, if any.
    fn current_plan(&self) -> Option<&Plan> {
        let open = self.open.as_ref().map(|open| &open.plan);
        open.or(self.planned.as_ref())
    }

    /// A rank other than 0: reads the next window's plan where none is
    /// planned or open here, else follows rank 0's rewriting of the one
    /// that is (it ended it early).
    fn follow_plans(&mut self, hub: &Arc<Hub>) {
        let Some(current) = self.current_plan() else {
            // The next window's plan; where rank 0 sent later ones but not
            // it (this rank's mirror was down meanwhile), the first of those.
            let next = self.next_index;
            self.planned = self
                .read_plan(next)
                .or_else(|| self.inbox.delivered_from(next));
            // Cancelled before it opened: the next is the one after it.
            if let Some(plan) = self.planned.take_if(|plan| plan.steps == 0) {
                self.next_index = plan.index + 1;
            }
            return;
        };
        if current.cancelled.is_some() {
            return;
        }
        let index = current.index;
        if let Some(revised) = self.read_plan(index).filter(|p| p.cancelled.is_some()) {
            self.revise(hub, revised);
        }
    }

    /// Takes `revised` as the plan of the window planned or open now (rank
    /// 0 ended it early): one that never opens is dropped, and the next
    /// window is the one after it; an open one closes at its new close
    /// step (at once, where the count passed it).
    fn revise(&mut self, hub: &Arc<Hub>, revised: Plan) {
        if let Some(open) = self.open.as_mut() {
            open.close_step = revised.close_step();
            open.plan = revised;
            self.steps.set_current(Some(&open.plan));
            self.arm_close(hub);
            return;
        }
        if self.planned.take().is_none() {
            return;
        }
        // Its edges are armed anew from the revised plan at the next look
        // (an opening edge a step claimed meanwhile opens it as revised).
        self.steps.arm(NONE, NONE);
        self.armed = false;
        self.expires = None;
        if revised.steps > 0 {
            // Rank 0 opened it already: this rank follows, late.
            self.planned = Some(revised);
            return;
        }
        self.steps.set_current(None);
        self.next_index = revised.index + 1;
        if self.rank == 0 {
            // No rank's payload of it is taken, and none is kept.
            self.inbox.never_opens(revised.index);
            let _ = std::fs::remove_dir_all(window::window_dir(&self.dir, revised.index));
        }
        if let (Some(waiting), Some(cancelled)) = (self.waiting.take(), revised.cancelled) {
            let _ = waiting.send(WindowAnswer::Unreported(format!(
                "window {} will not open: {}",
                revised.index, cancelled.reason
            )));
        }
    }

    /// Window `index`'s plan, where rank 0 sent it over this rank's
    /// mirror, or wrote it into the folder this rank shares with it.
    fn read_plan(&mut self, index: u32) -> Option<Plan> {
        if let Some(plan) = self.inbox.delivered(index) {
            return Some(plan);
        }
        match window::read_plan(&self.dir, index) {
            // An earlier launch's plan, left in the same folder: not ours
            // (this run's rank 0 will write its own in its place).
            Ok(Some(plan)) if plan.run != self.run => None,
            Ok(plan) => plan,
            Err(e) => {
                if self.unreadable_plan != Some(index) {
                    self.unreadable_plan = Some(index);
                    notice!("window {index} is not opened: {}", Chain(&e));
                }
                None
            }
        }
    }

    /// Shares this rank's live status where it is read; on rank 0, once a
    /// second where windows open on imbalance and none is planned or open
    /// now, the rank whose lag begins now among every rank's (an imbalance
    /// that begins while a window is planned or open is found once that
    /// window closed, if it lasts).
    fn watch_imbalance(&mut self, hub: &Hub) -> Option<imbalance::Lag> {
        let run = self.run.as_deref();
        let told = self.inbox.watched_within(live_status::WATCHED_FOR);
        let sharing = (self.dir.as_path(), &self.inbox, told);
        let shared = self.status.share(hub, sharing, run, self.steps.count());
        let free = self.busy().is_none();
        let watch = self.imbalance.as_mut().filter(|_| shared && free)?;
        watch.begun(&self.dir, hub.env.world_size, run)
    }

    /// Opens `plan`'s window at `edge`.
    fn open(&mut self, hub: &Hub, plan: Plan, edge: Edge) {
        self.armed = false;
        self.expires = None;
        self.inbox.planned(plan.index);
        self.steps.set_current(Some(&plan));
        self.open = Some(Open {
            close_step: plan.close_step(),
            plan,
            edge,
            dropped: dropped_now(hub),
        });
    }

    /// Closes `open` at `edge`: writes this rank's payload of it, and on
    /// rank 0 has every rank's gathered and reported.
    fn close(&mut self, hub: &Arc<Hub>, open: Open, edge: Edge) {
        self.next_index = open.plan.index + 1;
        self.steps.set_current(None);
        let waiting = self.waiting.take();
        let unreported = |why: String| {
            if let Some(waiting) = &waiting {
                let _ = waiting.send(WindowAnswer::Unreported(why));
            }
        };
        if edge.count == open.edge.count {
            // Opened as the session ended: no step to report.
            unreported(format!("window {} closed before a step", open.plan.index));
            return;
        }
        let written = hub.flush_parts().and_then(|upto| {
            let rows = WindowRows {
                after: open.edge.parts,
                // Parts an earlier window read already are its own.
                timeless_after: open.edge.parts.max(self.parts_reported),
                upto,
                span: open.edge.ns..edge.ns,
            };
            let meta = WindowMeta {
                index: open.plan.index,
                trigger: open.plan.trigger,
                planned_first_step: open.plan.first_step,
                planned_steps: open.plan.steps,
                first_step: open.edge.count,
                steps: edge.count.saturating_sub(open.edge.count),
                started_ns: open.edge.ns,
                duration_ns: edge.ns.saturating_sub(open.edge.ns),
                cancelled: open.plan.cancelled.as_ref().map(|c| c.reason.clone()),
            };
            self.parts_reported = upto;
            let dropped = dropped_since(hub, &open.dropped);
            hub.write_window(&rows, meta, dropped)
        });
        match written {
            Ok(Some(payload)) if self.rank == 0 => self.report(hub, payload, waiting),
            Ok(Some(payload)) => hub.window_written(open.plan.index, &payload.gather.file),
            Ok(None) => unreported("the session records nothing now".into()),
            Err(e) => {
                let why = format!(
                    "window {}: this rank's data could not be written: {}",
                    open.plan.index,
                    Chain(&e)
                );
                notice!("{why}");
                unreported(why);
            }
        }
    }

    /// Rank 0: gathers the window's payloads and writes its report, on a
    /// thread of its own (the next window opens meanwhile), and tells
    /// `waiting` whether it was written.
    fn report(
        &mut self,
        hub: &Arc<Hub>,
        payload: WindowPayload,
        waiting: Option<Sender<WindowAnswer>>,
    ) {
        self.reports.retain(|report| !report.is_finished());
        if self.reports.len() >= REPORTS_AT_ONCE {
            let _ = self.reports.remove(0).join();
        }
        let hub = Arc::clone(hub);
        let missing = Arc::clone(&self.ranks_were_missing);
        let thread = spawn_with_notices("rankscope-window-report", move || {
            let answer = match report_window(&hub, &payload, &missing) {
                Ok(dir) => WindowAnswer::Reported(dir),
                Err(why) => WindowAnswer::Unreported(why),
            };
            if let Some(waiting) = waiting {
                let _ = waiting.send(answer);
            }
        });
        match thread {
            Ok(thread) => self.reports.push(thread),
            Err(e) => notice!("a window's report is not written: cannot start its thread: {e}"),
        }
    }
}

/// Gathers the payloads of the window whose own is `payload` from its
/// folder, by `gather_timeout_s`, and writes its report there; that
/// folder, or why no report was written.
fn report_window(
    hub: &Hub,
    payload: &WindowPayload,
    ranks_were_missing: &AtomicBool,
) -> Result<PathBuf, String> {
    let info = payload.gather.info(&hub.env);
    // Ranks missing from the last window (dead, or blind to the folder)
    // are not waited for in full again: the windows must keep up.
    let wait = match ranks_were_missing.load(Ordering::Relaxed) {
        true => MISSING_AGAIN_WAIT.min(Duration::from_secs_f64(hub.config.gather_timeout_s)),
        false => Duration::from_secs_f64(hub.config.gather_timeout_s),
    };
    let deadline = Instant::now() + wait;
    let dir = &payload.gather.dir;
    let unreported = |why: String| {
        say!("{why}");
        Err(why)
    };
    let gathered = match DirTransport.gather(&payload.bytes, &info, deadline) {
        Ok(Some(gathered)) => gathered,
        Ok(None) => return Err("this rank gathers no window".into()),
        Err(e) => {
            let why = format!(
                "the window in {} was not gathered: {}",
                dir.display(),
                Chain(&e)
            );
            return unreported(why);
        }
    };
    let (reporting, world) = (gathered.payloads.len(), gathered.world_size);
    ranks_were_missing.store(!gathered.missing.is_empty(), Ordering::Relaxed);
    match hub.report(&gathered, dir) {
        Ok(Some(_)) => {
            say!(
                "window report ({reporting} of {world} ranks) in {}",
                dir.display()
            );
            Ok(dir.clone())
        }
        Ok(None) => Err("this rank writes no report (its reporter is off)".into()),
        Err(e) => unreported(format!(
            "the window in {} has no report: {}",
            dir.display(),
            Chain(&e)
        )),
    }
}
