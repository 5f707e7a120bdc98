//! The steps of a running session (`Profiler::step`) and the edges they
//! note: the step count the hot path advances ([`StepCount`]), and, at the
//! counts where a window opens or closes, the time and the flush parts
//! taken, queued for the windows thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use rankscope_common::window::Plan;

use super::step_count::StepCount;
use crate::control::Stepping;
use crate::stop::StopSignal;
use crate::sync::lock;

/// Edges kept for the thread; past this (a thread that cannot keep up with
/// one-step windows) the oldest go, counted.
const MAX_EDGES: usize = 1024;

/// A step count at which a window opens or closes, as the step that
/// reached it saw it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Edge {
    /// The step count.
    pub(super) count: u64,
    /// When, nanoseconds into the session.
    pub(super) ns: u64,
    /// Flush parts whose rows were all taken before then.
    pub(super) parts: u32,
}

/// The steps of the running session (`Profiler::step`), and the counts at
/// which a step notes an edge for the windows thread.
pub(crate) struct Steps {
    count: StepCount,
    edges: Mutex<Edges>,
    /// The window planned or open now, as the program may ask for it.
    current: Mutex<Option<PlannedWindow>>,
    pub(super) signal: StopSignal,
    /// Whether the thread, when stopped, closes an open window (the
    /// session finishes) or leaves it (the session is spilled or dropped).
    pub(super) close_on_stop: AtomicBool,
}

#[derive(Default)]
struct Edges {
    queue: VecDeque<Edge>,
    dropped: u64,
}

impl Default for Steps {
    fn default() -> Self {
        Steps {
            count: StepCount::new(),
            edges: Mutex::default(),
            current: Mutex::default(),
            signal: StopSignal::default(),
            close_on_stop: AtomicBool::new(false),
        }
    }
}

impl Steps {
    /// Ends a step: one count more and, where a window opens or closes at
    /// the new count, an edge noted at the time and parts `edge` gives.
    #[inline]
    pub(crate) fn advance(&self, edge: impl Fn() -> (u64, u32)) {
        self.count.advance(|count| {
            let (ns, parts) = edge();
            self.queue(Edge { count, ns, parts });
        });
    }

    /// Queues an edge for the thread, and wakes it.
    #[cold]
    fn queue(&self, edge: Edge) {
        let mut edges = lock(&self.edges);
        if edges.queue.len() >= MAX_EDGES {
            edges.queue.pop_front();
            edges.dropped += 1;
        }
        edges.queue.push_back(edge);
        drop(edges);
        self.signal.nudge();
    }

    /// Steps ended since the session started.
    pub(crate) fn count(&self) -> u64 {
        self.count.count()
    }

    /// Asks the steps for an edge at `at`, then one at `then`. `false`
    /// where the count passed `at` first: no edge comes for it.
    pub(super) fn arm(&self, at: u64, then: u64) -> bool {
        self.count.arm(at, then)
    }

    /// The window planned or open now on this rank.
    pub(crate) fn current(&self) -> Option<PlannedWindow> {
        lock(&self.current).clone()
    }

    pub(super) fn set_current(&self, plan: Option<&Plan>) {
        *lock(&self.current) = plan.map(|plan| PlannedWindow {
            index: plan.index,
            first_step: plan.first_step,
            steps: plan.steps,
            torch: plan.torch,
            python: plan.python,
        });
    }

    pub(super) fn take_edges(&self) -> (Vec<Edge>, u64) {
        let mut edges = lock(&self.edges);
        let dropped = std::mem::take(&mut edges.dropped);
        (edges.queue.drain(..).collect(), dropped)
    }

    pub(super) fn reset(&self, period: u64) {
        self.count.reset(period);
        *lock(&self.edges) = Edges::default();
        *lock(&self.current) = None;
        self.close_on_stop.store(false, Ordering::Relaxed);
        self.signal.reset();
    }
}

impl Stepping for Steps {
    fn wake(&self) {
        self.signal.nudge();
    }

    fn count(&self) -> u64 {
        Steps::count(self)
    }
}

/// A window of the running session, planned or open: what a program (the
/// Python package's torch.profiler capture) needs to follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWindow {
    /// The window's number, from 1.
    pub index: u32,
    /// The step count at which it opens (`Profiler::step_count`).
    pub first_step: u64,
    /// Steps it covers: it closes when the count reaches `first_step + steps`.
    pub steps: u64,
    /// Whether it was asked for with `--torch`: torch.profiler captures it.
    pub torch: bool,
    /// Whether it was asked for with `--python`: the Python package traces
    /// Python functions in it.
    pub python: bool,
}
