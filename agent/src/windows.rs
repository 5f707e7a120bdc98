//! Windows of a running session: spans of steps that every rank profiles at
//! once, each with its own cross-rank report in `<session dir>/window-<k>/`
//! while the job goes on.
//!
//! `Profiler::step` counts steps ([`Steps`]: an atomic count, and the count
//! at which the session's windows thread wants to hear of it). The thread
//! ([`WindowsThread`]) opens and closes windows at those counts: rolling
//! windows every `window_every_steps` steps, which every rank knows alike,
//! or windows rank 0 plans on request (`rankscope trigger`, `SIGUSR1`) and
//! the other ranks read from the session directory's control files
//! ([`rankscope_common::window`]). At a window's open and close the rank
//! flushes, so the window's rows are the flush parts between the two; at
//! its close it writes them as one payload into `window-<k>/`, where rank 0
//! gathers every rank's by the directory transport's rules and writes the
//! window's report, on a thread of its own. The session's own payload still
//! holds every row: the parts stay until the session ends.
//!
//! A window's edge is as sharp as the windows thread is quick: `step()`
//! wakes it at the edge, and rows recorded between the edge and its flush
//! (microseconds, unless the machine is overloaded) fall on the side before.
//!
//! The ranks meet in the session directory: it must be one that every rank
//! sees (one machine, or a shared file system); a rank that cannot see it
//! is named missing in each window's report, by the gather's deadline.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rankscope_common::error::Chain;
use rankscope_common::window::{self, Plan, Refusal, Trigger, WindowMeta};

use crate::notice::{notice, say};
use crate::session::{self, Hub, WindowPayload};
use crate::stop::StopSignal;
use crate::transport::dir::DirTransport;
use crate::transport::Transport;

/// How often the windows thread looks at the step count and the control
/// files when no step boundary wakes it.
const POLL: Duration = Duration::from_millis(50);
/// Steps between rank 0's plan and the window's first step, besides the
/// delay asked for: time for the other ranks to read the plan.
const PLAN_LEAD_STEPS: u64 = 2;
/// Requests read per look: a flood of them waits on disk, a look at a time.
const REQUESTS_PER_LOOK: usize = 16;
/// Window reports rank 0 writes at once; another window's waits for one.
const REPORTS_AT_ONCE: usize = 2;

/// The steps of the running session (`Profiler::step`), and the step
/// count at which its windows thread wants to hear of it.
pub(crate) struct Steps {
    count: AtomicU64,
    /// The count at which [`Steps::advance`] wakes the thread: a window
    /// opens or closes there. `u64::MAX`: none due.
    boundary: AtomicU64,
    signal: StopSignal,
    /// Whether the thread, when stopped, closes an open window (the
    /// session finishes) or leaves it (the session is spilled or dropped).
    close_on_stop: AtomicBool,
}

impl Default for Steps {
    fn default() -> Self {
        Steps {
            count: AtomicU64::new(0),
            boundary: AtomicU64::new(u64::MAX),
            signal: StopSignal::default(),
            close_on_stop: AtomicBool::new(false),
        }
    }
}

impl Steps {
    /// Ends a step: one count more, and a nudge to the windows thread where
    /// a window opens or closes at the new count.
    #[inline]
    pub(crate) fn advance(&self) {
        let count = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        if count == self.boundary.load(Ordering::Relaxed) {
            self.signal.nudge();
        }
    }

    /// Steps ended since the session started.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn reset(&self) {
        self.count.store(0, Ordering::Relaxed);
        self.boundary.store(u64::MAX, Ordering::Relaxed);
        self.close_on_stop.store(false, Ordering::Relaxed);
        self.signal.reset();
    }
}

/// The windows thread of one session.
pub(crate) struct WindowsThread {
    steps: Arc<Steps>,
    thread: Option<JoinHandle<()>>,
}

impl WindowsThread {
    /// Starts the windows thread of the session that `hub` runs in
    /// `session_dir`, counting steps from 0.
    pub(crate) fn start(hub: &Arc<Hub>, session_dir: PathBuf) -> Option<WindowsThread> {
        let steps = Arc::clone(&hub.steps);
        steps.reset();
        let mut windows = Windows {
            hub: Arc::downgrade(hub),
            steps: Arc::clone(&steps),
            dir: session_dir,
            rank: hub.env.rank,
            rolling: hub.config.window_every_steps,
            default_steps: hub.config.window_steps.max(1),
            next_index: 1,
            planned: None,
            open: None,
            reports: Vec::new(),
            refused_files: 0,
            unreadable_plan: None,
        };
        // A window due at step 0 opens before the program's first step.
        windows.look(hub);
        let thread = std::thread::Builder::new()
            .name("rankscope-windows".into())
            .spawn(move || windows.run());
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

/// A window open on this rank.
struct Open {
    plan: Plan,
    /// The step at which it opened here.
    first_step: u64,
    /// When it opened, nanoseconds into the session.
    started_ns: u64,
    /// The last flush part before it: its rows are in the parts after.
    after_part: u32,
}

impl Open {
    fn close_step(&self) -> u64 {
        self.plan.first_step.saturating_add(self.plan.steps)
    }
}

/// What the windows thread keeps.
struct Windows {
    hub: Weak<Hub>,
    steps: Arc<Steps>,
    dir: PathBuf,
    rank: u32,
    /// `window_every_steps`; 0 where windows come from requests.
    rolling: u64,
    /// Steps of a requested window that names none.
    default_steps: u64,
    /// The number of the next window to open.
    next_index: u32,
    planned: Option<Plan>,
    open: Option<Open>,
    /// Rank 0's window reports under way.
    reports: Vec<JoinHandle<()>>,
    /// Control files refused (unreadable requests), counted.
    refused_files: u64,
    /// The plan that could not be read, said once.
    unreadable_plan: Option<u32>,
}

impl Windows {
    fn run(mut self) {
        loop {
            let stopped = self.steps.signal.wait(POLL);
            let Some(hub) = self.hub.upgrade() else {
                return;
            };
            if stopped {
                let close = self.steps.close_on_stop.load(Ordering::Relaxed);
                if let Some(open) = self.open.take().filter(|_| close) {
                    self.close(&hub, open);
                }
                drop(hub);
                if close {
                    for report in self.reports.drain(..) {
                        let _ = report.join();
                    }
                }
                return;
            }
            self.look(&hub);
        }
    }

    /// Opens or closes what is due at the step count now, answers requests
    /// (rank 0) or reads plans (the others), and says at which count to
    /// wake next.
    fn look(&mut self, hub: &Arc<Hub>) {
        let count = self.steps.count();
        // The flush at this edge, where one was made: a window that opens
        // where the last closed starts after the same part.
        let mut edge: Option<u32> = None;
        if self
            .open
            .as_ref()
            .is_some_and(|open| count >= open.close_step())
        {
            let open = self.open.take().expect("checked just above");
            edge = self.close(hub, open);
        }
        if self.rank == 0 && self.rolling == 0 {
            self.answer_requests(count);
        }
        if self.open.is_none() && self.planned.is_none() {
            self.planned = self.next_plan();
        }
        if self.open.is_none() && self.planned.as_ref().is_some_and(|p| count >= p.first_step) {
            let plan = self.planned.take().expect("checked just above");
            self.open(hub, plan, count, edge);
        }
        let next = match (&self.open, &self.planned) {
            (Some(open), _) => open.close_step(),
            (None, Some(plan)) => plan.first_step,
            (None, None) => u64::MAX,
        };
        self.steps.boundary.store(next, Ordering::Relaxed);
        // A step ended while the boundary moved: look again at once.
        if self.steps.count() >= next {
            self.steps.signal.nudge();
        }
    }

    /// The next window's plan where one is known: rolling windows follow
    /// each other; requested ones are rank 0's plan files.
    fn next_plan(&mut self) -> Option<Plan> {
        let index = self.next_index;
        if self.rolling > 0 {
            return Some(Plan {
                index,
                first_step: u64::from(index - 1).saturating_mul(self.rolling),
                steps: self.rolling,
                trigger: Trigger::Rolling,
                nonce: String::new(),
            });
        }
        if self.rank == 0 {
            return None;
        }
        match window::read_plan(&self.dir, index) {
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

    /// Rank 0: plans the oldest request when no window is open or planned,
    /// and refuses the others, each with its reason.
    fn answer_requests(&mut self, count: u64) {
        let (paths, _beyond) = match window::pending_requests(&self.dir, REQUESTS_PER_LOOK) {
            Ok(found) => found,
            Err(_) => return,
        };
        for path in paths {
            let request = window::read_request(&path);
            // Answered or refused: never read twice.
            let _ = std::fs::remove_file(&path);
            let request = match request {
                Ok(request) => request,
                Err(e) => {
                    self.refused_files += 1;
                    if self.refused_files == 1 {
                        notice!(
                            "a window request was refused (later ones are counted): {}",
                            Chain(&e)
                        );
                    }
                    continue;
                }
            };
            let busy = self
                .open
                .as_ref()
                .map(|open| open.plan.index)
                .or(self.planned.as_ref().map(|plan| plan.index));
            if let Some(busy) = busy {
                let refusal = Refusal {
                    nonce: request.nonce,
                    reason: format!(
                        "window {busy} is planned or open; ask again when its report is written"
                    ),
                };
                let _ = window::write_refusal(&self.dir, &refusal);
                continue;
            }
            let plan = Plan {
                index: self.next_index,
                first_step: count
                    .saturating_add(request.delay_steps)
                    .saturating_add(PLAN_LEAD_STEPS),
                steps: match request.steps {
                    0 => self.default_steps,
                    steps => steps,
                },
                trigger: request.trigger,
                nonce: request.nonce,
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
    }

    /// Opens `plan`'s window at step `count`: what was recorded before it
    /// is flushed to the parts before (at this edge's flush, `edge`, where
    /// a window closed there).
    fn open(&mut self, hub: &Hub, plan: Plan, count: u64, edge: Option<u32>) {
        let after_part = match edge.map_or_else(|| session::flush_parts(hub), Ok) {
            Ok(part) => part,
            Err(e) => {
                notice!("window {} is not opened: {}", plan.index, Chain(&e));
                self.next_index += 1;
                return;
            }
        };
        self.open = Some(Open {
            first_step: count.max(plan.first_step),
            started_ns: hub.recorder.now_ns(),
            after_part,
            plan,
        });
    }

    /// Closes `open`: writes this rank's payload of it, and on rank 0 has
    /// every rank's gathered and reported. Returns the last part of its
    /// rows (`None` where the flush failed).
    fn close(&mut self, hub: &Arc<Hub>, open: Open) -> Option<u32> {
        self.next_index = open.plan.index + 1;
        let count = self.steps.count();
        let upto = session::flush_parts(hub);
        let edge = upto.as_ref().ok().copied();
        let written = upto.and_then(|upto| {
            let now = hub.recorder.now_ns();
            let meta = WindowMeta {
                index: open.plan.index,
                trigger: open.plan.trigger,
                planned_first_step: open.plan.first_step,
                planned_steps: open.plan.steps,
                first_step: open.first_step,
                steps: count.min(open.close_step()).saturating_sub(open.first_step),
                started_ns: open.started_ns,
                duration_ns: now.saturating_sub(open.started_ns),
            };
            session::write_window(hub, open.after_part, upto, meta)
        });
        match written {
            Ok(Some(payload)) if self.rank == 0 => self.report(hub, payload),
            Ok(_) => {}
            Err(e) => notice!(
                "window {}: this rank's data could not be written: {}",
                open.plan.index,
                Chain(&e)
            ),
        }
        edge
    }

    /// Rank 0: gathers the window's payloads and writes its report, on a
    /// thread of its own (the next window opens meanwhile).
    fn report(&mut self, hub: &Arc<Hub>, payload: WindowPayload) {
        self.reports.retain(|report| !report.is_finished());
        if self.reports.len() >= REPORTS_AT_ONCE {
            let _ = self.reports.remove(0).join();
        }
        let hub = Arc::clone(hub);
        let thread = std::thread::Builder::new()
            .name("rankscope-window-report".into())
            .spawn(move || report_window(&hub, &payload));
        match thread {
            Ok(thread) => self.reports.push(thread),
            Err(e) => notice!("a window's report is not written: cannot start its thread: {e}"),
        }
    }
}

/// Gathers the payloads of the window whose own is `payload` from its
/// folder, by `gather_timeout_s`, and writes its report there.
fn report_window(hub: &Hub, payload: &WindowPayload) {
    let info = payload.gather.info(&hub.env);
    let deadline = Instant::now() + Duration::from_secs_f64(hub.config.gather_timeout_s);
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
    match session::report(hub, &gathered, dir) {
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
