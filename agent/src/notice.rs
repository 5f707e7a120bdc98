//! What the agent tells the user on standard error. Each line is written
//! with one `write` call, so that the lines of ranks sharing a terminal or
//! pipe do not interleave mid-line, and anything in it that could drive a
//! terminal (a session id, a tag, a device name) is made harmless.
//!
//! Two kinds:
//! - [`notice!`]: about the run (GPU telemetry off, a value cut to fit).
//!   Kept for the rank's next payload, so that rank 0 can print each
//!   distinct notice once with the ranks it applies to and the report can
//!   list them; printed here only where the rank is not quiet (rank 0, or
//!   `quiet_ranks` off) — with hundreds of ranks, one line per rank is a wall.
//!   Each profiler keeps its own ([`Notices`]): a notice goes to the one
//!   whose work the thread is doing; one made outside every profiler's
//!   work (a transport made before its profiler) goes to the next payload
//!   built.
//! - [`say!`]: about this process's own fate (stopped by a signal, a spill
//!   that failed), after its payload was written: always printed.
//! - [`alarm!`]: a notice that is always printed too, for what may keep
//!   this rank out of rank 0's report (which then cannot say it).

use std::cell::RefCell;
use std::fmt;
use std::io::Write;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use crate::sync::lock;
use rankscope_common::text::terminal;

/// Distinct notices kept per payload.
const MAX_KEPT: usize = 64;

/// One profiler's notices: which rank it is, whether it keeps its notices
/// to itself, and those kept for its next payload. A notice goes to the
/// profiler whose work the thread is doing ([`Notices::enter`]): the
/// hub's calls and the threads it starts enter its notices, so two
/// profilers in one process never see each other's. A notice made outside
/// any profiler's work is printed, not kept.
#[derive(Debug)]
pub(crate) struct Notices {
    rank: u32,
    quiet: bool,
    kept: Mutex<Vec<String>>,
}

thread_local! {
    /// The notices of the profiler whose work this thread is doing.
    static CURRENT: RefCell<Option<Arc<Notices>>> = const { RefCell::new(None) };
}

/// While it lives, this thread's notices go to one profiler's
/// [`Notices`]; dropped, they go where they went before. Stays on the
/// thread that made it.
#[must_use = "the notices are entered only while this lives"]
pub(crate) struct Entered {
    before: Option<Arc<Notices>>,
    _on_this_thread: PhantomData<*const ()>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let before = self.before.take();
        // Gone only while the thread's locals are torn down: nothing to
        // restore then.
        let _ = CURRENT.try_with(|current| *current.borrow_mut() = before);
    }
}

impl Notices {
    /// The notices of rank `rank`; `quiet` keeps them to the payload
    /// (except on rank 0, which prints everything).
    pub(crate) fn new(rank: u32, quiet: bool) -> Arc<Self> {
        Arc::new(Notices {
            rank,
            quiet: quiet && rank != 0,
            kept: Mutex::default(),
        })
    }

    /// Sends this thread's notices here until the guard drops (on a thread
    /// whose locals are being torn down, a session dropped by one of them,
    /// they stay where they go: printed and, outside any profiler's work,
    /// kept for the next payload).
    pub(crate) fn enter(self: &Arc<Self>) -> Entered {
        let before = CURRENT
            .try_with(|current| current.replace(Some(Arc::clone(self))))
            .unwrap_or_default();
        Entered {
            before,
            _on_this_thread: PhantomData,
        }
    }

    /// Whether this rank leaves its notices to rank 0.
    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// The notices kept since the last call, with any made outside every
    /// profiler's work meanwhile.
    pub(crate) fn take_kept(&self) -> Vec<String> {
        let mut kept = std::mem::take(&mut *lock(&self.kept));
        for orphan in std::mem::take(&mut *lock(&ORPHANS)) {
            if kept.len() < MAX_KEPT && !kept.contains(&orphan) {
                kept.push(orphan);
            }
        }
        kept
    }

    /// Keeps `text` (once, up to [`MAX_KEPT`]); whether to print it too.
    fn keep(&self, text: &str) -> bool {
        keep_once(&mut lock(&self.kept), text);
        !self.quiet
    }
}

/// Notices made outside every profiler's work (a transport made before
/// its profiler): the next payload any profiler builds takes them.
static ORPHANS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Adds `text` to `kept` unless it is there or `kept` is full.
fn keep_once(kept: &mut Vec<String>, text: &str) {
    if kept.len() < MAX_KEPT && !kept.iter().any(|k| k == text) {
        kept.push(text.to_string());
    }
}

/// The notices this thread's work goes to, to enter on a thread it starts.
pub(crate) fn current() -> Option<Arc<Notices>> {
    CURRENT
        .try_with(|current| current.borrow().clone())
        .ok()
        .flatten()
}

/// Starts a thread named `name` whose notices go where this thread's go
/// (a profiler's threads keep their notices with it).
pub(crate) fn spawn_with_notices<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let notices = current();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _entered = notices.as_ref().map(Notices::enter);
            work()
        })
}

/// `rank N: ` for the profiler whose work this is, else nothing.
fn who() -> String {
    current().map_or_else(String::new, |n| format!("rank {}: ", n.rank))
}

/// Prints `message`, prefixed with this work's rank.
pub(crate) fn say_now(message: fmt::Arguments<'_>) {
    print_line(who(), &message.to_string());
}

/// Keeps `message` for the payload of the profiler whose work this is
/// (outside any, for the next payload built), and prints it unless that
/// rank is quiet.
pub(crate) fn keep(message: fmt::Arguments<'_>) {
    let text = message.to_string();
    if keep_text(&text) {
        print_line(who(), &text);
    }
}

/// [`keep`], printed whether or not the rank is quiet.
pub(crate) fn keep_and_print(message: fmt::Arguments<'_>) {
    let text = message.to_string();
    keep_text(&text);
    print_line(who(), &text);
}

/// Keeps `text` where [`keep`] says; whether the rank prints it.
fn keep_text(text: &str) -> bool {
    match current() {
        Some(notices) => notices.keep(text),
        None => {
            keep_once(&mut lock(&ORPHANS), text);
            true
        }
    }
}

/// Prints `rankscope: <who><text>` in one write.
pub(crate) fn print_line(who: String, text: &str) {
    let line = format!("rankscope: {}\n", terminal(&format!("{who}{text}")));
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// `notice!("GPU telemetry off: {}", why)`: see the module's documentation.
macro_rules! notice {
    ($($arg:tt)*) => {
        $crate::notice::keep(format_args!($($arg)*))
    };
}

/// `say!("stopped by signal {}", signal)`: see the module's documentation.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::notice::say_now(format_args!($($arg)*))
    };
}

/// `alarm!("rank 0 did not answer")`: see the module's documentation.
macro_rules! alarm {
    ($($arg:tt)*) => {
        $crate::notice::keep_and_print(format_args!($($arg)*))
    };
}

pub(crate) use {alarm, notice, say};
