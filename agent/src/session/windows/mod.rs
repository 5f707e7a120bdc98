//! Windows of a running session: spans of steps that every rank profiles at
//! once, each with its own cross-rank report in `<session dir>/window-<k>/`
//! while the job goes on.
//!
//! `Profiler::step` counts steps ([`Steps`]). At the counts where a window
//! opens or closes, the step notes an [`Edge`]: the time, and how many
//! flush parts hold only rows from before it. The session's windows thread
//! ([`WindowsThread`]) takes the edges in order: rolling windows every
//! `window_every_steps` steps, which every rank knows alike, or windows
//! rank 0 plans on request (`rankscope trigger`, `SIGUSR1`), every
//! `window_every_s` seconds, or as one rank's steps begin to lag the
//! others' ([`imbalance`]), and the other
//! ranks read from the session directory's control files
//! ([`rankscope_common::window`]). When a window closes, the thread
//! flushes, keeps of the parts since its opening edge the rows that
//! happened between its two edges, and writes them as one payload into
//! `window-<k>/`, where rank 0 gathers every rank's by the directory
//! transport's rules and writes the window's report on a thread of its own.
//! The edges are exact however late the thread runs; the session's own
//! payload still holds every row (the parts stay until the session ends).
//!
//! The ranks meet in rank 0's session directory: one machine, a shared
//! file system, or, under the TCP and MPI transports, rank 0's listener,
//! through which a rank apart from it mirrors the control files and is
//! handed its window payloads (`transport::tcp::mirror`,
//! `Transport::window_written`); a rank that reaches it none
//! of these ways is named missing in each window's report, by the
//! gather's deadline.

use std::path::PathBuf;
// What `step_count.rs` takes from its parent module (loom's, in its test).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rankscope_common::error::Chain;
use rankscope_common::payload::DroppedRows;
use rankscope_common::table::Table;
use rankscope_common::window::{self, Plan, Refusal, Request, Trigger, WindowMeta};

use super::{Hub, WindowPayload, WindowRows};
use crate::notice::{notice, say, spawn_with_notices};
use crate::transport::dir::DirTransport;
use crate::transport::Transport;

mod imbalance;
mod live_status;
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
    /// `session_dir`, counting steps from 0. A rolling window opens at once.
    pub(crate) fn start(
        hub: &Arc<Hub>,
        session_dir: PathBuf,
        run: Option<String>,
    ) -> Option<WindowsThread> {
        let steps = Arc::clone(&hub.steps);
        let rolling = hub.config.window_every_steps;
        let on_imbalance = hub.config.window_on_imbalance_pct;
        let host = hub
            .session
            .with_running(|s| s.host.clone())
            .unwrap_or_default();
        steps.reset(rolling);
        let mut windows = Windows {
            hub: Arc::downgrade(hub),
            steps: Arc::clone(&steps),
            dir: session_dir,
            run,
            rank: hub.env.rank,
            rolling,
            default_steps: hub.config.window_steps.max(1),
            next_index: 1,
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
    let parts = hub.parts_taken.load(Ordering::Acquire);
    Edge {
        count: hub.steps.count(),
        ns: hub.recorder.now_ns(),
        parts,
    }
}

/// Rows this rank dropped so far per table (past `max_data_points`).
fn dropped_now(hub: &Hub) -> Vec<(Table, u64)> {
    hub.recorder
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
                match edge.count >= plan.first_step {
                    true => self.open(hub, plan, edge),
                    false => self.planned = Some(plan),
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
            self.answer_requests();
            if let Some(lag) = lag {
                self.answer_imbalance(lag);
            }
        }
        if self.rolling > 0 {
            return;
        }
        if self.rank != 0 && self.open.is_none() && self.planned.is_none() {
            self.planned = self.read_plan();
        }
        if self.armed || self.open.is_some() {
            return;
        }
        let Some(plan) = self.planned.take() else {
            return;
        };
        let close = plan.first_step.saturating_add(plan.steps);
        self.steps.set_current(Some(&plan));
        self.armed = self.steps.arm(plan.first_step, close);
        if self.armed {
            self.planned = Some(plan);
            return;
        }
        // Heard of too late to open at its step: opened now, and said so
        // in the window's report (this rank's first step is later).
        self.open(hub, plan, edge_now(hub));
        let open = self.open.as_mut().expect("opened just above");
        open.close_step = open.close_step.max(open.edge.count + 1);
        if !self.steps.arm(open.close_step, NONE) {
            let open = self.open.take().expect("opened just above");
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
            run: self.run.clone(),
        }
    }

    /// The next window's plan file, where rank 0 wrote it.
    fn read_plan(&mut self) -> Option<Plan> {
        let index = self.next_index;
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

    /// Rank 0: answers the requests in the control folder (a look's worth),
    /// a `SIGUSR1` received since the last look, and plans the periodic
    /// window that is due.
    fn answer_requests(&mut self) {
        let due = self
            .every
            .filter(|&(period, last)| last.elapsed() >= period);
        if let (Some((period, _)), None) = (due, self.busy()) {
            self.every = Some((period, Instant::now()));
            self.periodic_taken += 1;
            self.answer(Request {
                nonce: format!("periodic-{}", self.periodic_taken),
                steps: 0,
                delay_steps: 0,
                trigger: Trigger::Periodic,
                torch: false,
                duration_ms: 0,
            });
        }
        if self
            .sigusr1
            .as_ref()
            .is_some_and(|s| s.received.swap(false, Ordering::Relaxed))
        {
            self.signals_taken += 1;
            let request = Request {
                nonce: format!("signal-{}", self.signals_taken),
                steps: 0,
                delay_steps: 0,
                trigger: Trigger::Signal,
                torch: false,
                duration_ms: 0,
            };
            self.answer(request);
        }
        let Ok((paths, _beyond)) = window::pending_requests(&self.dir, REQUESTS_PER_LOOK) else {
            return;
        };
        for path in paths {
            // Taken out of the requests first: one its writer took back
            // (tired of waiting) is not answered.
            let Some(claimed) = window::claim_request(&path) else {
                continue;
            };
            let request = window::read_request(&claimed);
            // Answered or refused: never read twice.
            let _ = std::fs::remove_file(&claimed);
            match request {
                Ok(request) => self.answer(request),
                Err(e) => {
                    self.refused_files += 1;
                    if self.refused_files == 1 {
                        notice!(
                            "a window request was refused (later ones are counted): {}",
                            Chain(&e)
                        );
                    }
                }
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
        let shared = self.status.share(hub, &self.dir, run, self.steps.count());
        let free = self.busy().is_none();
        let watch = self.imbalance.as_mut().filter(|_| shared && free)?;
        watch.begun(&self.dir, hub.env.world_size, run)
    }

    /// Rank 0: plans a window on `lag`, the imbalance that began, where
    /// none is open or planned (that one holds it).
    fn answer_imbalance(&mut self, lag: imbalance::Lag) {
        say!(
            "rank {}'s steps take {:.1} ms, the others' {:.1} ms (median): imbalance begins",
            lag.rank,
            lag.step_s * 1e3,
            lag.others_s * 1e3
        );
        self.imbalances_taken += 1;
        self.answer(Request {
            nonce: format!("imbalance-{}", self.imbalances_taken),
            steps: 0,
            delay_steps: 0,
            trigger: Trigger::Imbalance,
            torch: false,
            duration_ms: 0,
        });
    }

    /// Plans the window `request` asks for, where none is open or planned;
    /// else refuses it with the reason (written for `rankscope trigger` to
    /// read; a signal's or a period's is only skipped).
    fn answer(&mut self, request: Request) {
        let steps = match (request.steps, request.duration_ms) {
            (0, 0) => self.default_steps,
            // About that long at this rank's pace now.
            (0, ms) => ((self.steps_per_second() * ms as f64 / 1e3).ceil() as u64)
                .clamp(1, window::MAX_WINDOW_STEPS),
            (steps, _) => steps,
        };
        let refused = self
            .busy()
            .or_else(|| self.too_long(steps.saturating_add(request.delay_steps)));
        if let Some(reason) = refused {
            if request.trigger == Trigger::Command {
                let refusal = Refusal {
                    nonce: request.nonce,
                    reason,
                };
                let _ = window::write_refusal(&self.dir, &refusal);
            }
            return;
        }
        let plan = Plan {
            index: self.next_index,
            first_step: self
                .steps
                .count()
                .saturating_add(request.delay_steps)
                .saturating_add(self.lead_steps()),
            steps,
            trigger: request.trigger,
            nonce: request.nonce,
            torch: request.torch,
            run: self.run.clone(),
        };
        match window::write_plan(&self.dir, &plan) {
            Ok(()) => {
                say!(
                    "window {} planned ({}): steps {} to {}",
                    plan.index,
                    plan.trigger.as_str(),
                    plan.first_step,
                    plan.first_step.saturating_add(plan.steps)
                );
                self.planned = Some(plan);
            }
            Err(e) => notice!("window {} could not be planned: {e}", plan.index),
        }
    }

    /// The steps per second now: over the last second or more measured
    /// (a long warm-up before the loop does not slow it), else since the
    /// measure began.
    fn steps_per_second(&mut self) -> f64 {
        let (since, at, last) = self.pace;
        let seconds = since.elapsed().as_secs_f64();
        let count = self.steps.count();
        let now = match seconds > 0.0 {
            true => count.saturating_sub(at) as f64 / seconds,
            false => 0.0,
        };
        if seconds >= PACE_MEASURE.as_secs_f64() {
            self.pace = (Instant::now(), count, Some(now));
        }
        last.map_or(now, |last| last.max(now))
    }

    /// Why a window that would end `span` steps from now (its delay and
    /// its steps) is refused, where it is: at this rank's pace it would hold
    /// the windows past [`MAX_WINDOW_HOLD`] (before the pace is known, past
    /// [`MAX_SPAN_UNPACED`] steps), keeping every later request out that
    /// long.
    fn too_long(&mut self, span: u64) -> Option<String> {
        let pace = self.steps_per_second();
        if pace <= 0.0 {
            return (span > MAX_SPAN_UNPACED).then(|| {
                format!(
                    "its delay and steps ({span}) pass the {MAX_SPAN_UNPACED} one request may \
                     hold before this rank's pace is known"
                )
            });
        }
        let hold_s = span as f64 / pace;
        (hold_s > MAX_WINDOW_HOLD.as_secs_f64()).then(|| {
            format!(
                "its delay and steps ({span}) would hold the windows about {hold_s:.0} s at \
                 this pace ({pace:.1} steps/s), past the {} s one request may",
                MAX_WINDOW_HOLD.as_secs()
            )
        })
    }

    /// Steps that pass in [`PLAN_LEAD`] at this rank's pace now.
    fn lead_steps(&mut self) -> u64 {
        let lead = (self.steps_per_second() * PLAN_LEAD.as_secs_f64()).ceil() as u64;
        lead.clamp(MIN_LEAD_STEPS, MAX_LEAD_STEPS)
    }

    /// Why no window can be planned now, where none can.
    fn busy(&self) -> Option<String> {
        if self.rolling > 0 {
            return Some(format!(
                "rolling windows run (window_every_steps = {}): each already gets a report",
                self.rolling
            ));
        }
        let busy = self
            .open
            .as_ref()
            .map(|open| &open.plan)
            .or(self.planned.as_ref())?;
        Some(format!(
            "window {} is planned or open; ask again when its report is written",
            busy.index
        ))
    }

    /// Opens `plan`'s window at `edge`.
    fn open(&mut self, hub: &Hub, plan: Plan, edge: Edge) {
        self.armed = false;
        self.steps.set_current(Some(&plan));
        self.open = Some(Open {
            close_step: plan.first_step.saturating_add(plan.steps),
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
        if edge.count == open.edge.count {
            // Opened as the session ended: no step to report.
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
            };
            self.parts_reported = upto;
            let dropped = dropped_since(hub, &open.dropped);
            hub.write_window(&rows, meta, dropped)
        });
        match written {
            Ok(Some(payload)) if self.rank == 0 => self.report(hub, payload),
            Ok(Some(payload)) => hub.window_written(open.plan.index, &payload.gather.file),
            Ok(None) => {}
            Err(e) => notice!(
                "window {}: this rank's data could not be written: {}",
                open.plan.index,
                Chain(&e)
            ),
        }
    }

    /// Rank 0: gathers the window's payloads and writes its report, on a
    /// thread of its own (the next window opens meanwhile).
    fn report(&mut self, hub: &Arc<Hub>, payload: WindowPayload) {
        self.reports.retain(|report| !report.is_finished());
        if self.reports.len() >= REPORTS_AT_ONCE {
            let _ = self.reports.remove(0).join();
        }
        let hub = Arc::clone(hub);
        let missing = Arc::clone(&self.ranks_were_missing);
        let thread = spawn_with_notices("rankscope-window-report", move || {
            report_window(&hub, &payload, &missing)
        });
        match thread {
            Ok(thread) => self.reports.push(thread),
            Err(e) => notice!("a window's report is not written: cannot start its thread: {e}"),
        }
    }
}

/// Gathers the payloads of the window whose own is `payload` from its
/// folder, by `gather_timeout_s`, and writes its report there.
fn report_window(hub: &Hub, payload: &WindowPayload, ranks_were_missing: &AtomicBool) {
    let info = payload.gather.info(&hub.env);
    // Ranks missing from the last window (dead, or blind to the folder)
    // are not waited for in full again: the windows must keep up.
    let wait = match ranks_were_missing.load(Ordering::Relaxed) {
        true => MISSING_AGAIN_WAIT.min(Duration::from_secs_f64(hub.config.gather_timeout_s)),
        false => Duration::from_secs_f64(hub.config.gather_timeout_s),
    };
    let deadline = Instant::now() + wait;
    let dir = &payload.gather.dir;
    let gathered = match DirTransport.gather(&payload.bytes, &info, deadline) {
        Ok(Some(gathered)) => gathered,
        Ok(None) => return,
        Err(e) => {
            say!(
                "the window in {} was not gathered: {}",
                dir.display(),
                Chain(&e)
            );
            return;
        }
    };
    let (reporting, world) = (gathered.payloads.len(), gathered.world_size);
    ranks_were_missing.store(!gathered.missing.is_empty(), Ordering::Relaxed);
    match hub.report(&gathered, dir) {
        Ok(Some(_)) => say!(
            "window report ({reporting} of {world} ranks) in {}",
            dir.display()
        ),
        Ok(None) => {}
        Err(e) => say!(
            "the window in {} has no report: {}",
            dir.display(),
            Chain(&e)
        ),
    }
}
