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
//! - [`say!`]: about this process's own fate (stopped by a signal, a spill
//!   that failed), after its payload was written: always printed.

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
        CURRENT.with(|current| *current.borrow_mut() = before);
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

    /// Sends this thread's notices here until the guard drops.
    pub(crate) fn enter(self: &Arc<Self>) -> Entered {
        let before = CURRENT.with(|current| current.replace(Some(Arc::clone(self))));
        Entered {
            before,
            _on_this_thread: PhantomData,
        }
    }

    /// Whether this rank leaves its notices to rank 0.
    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// The notices kept since the last call.
    pub(crate) fn take_kept(&self) -> Vec<String> {
        std::mem::take(&mut lock(&self.kept))
    }

    /// Keeps `text` (once, up to [`MAX_KEPT`]); whether to print it too.
    fn keep(&self, text: &str) -> bool {
        let mut kept = lock(&self.kept);
        if kept.len() < MAX_KEPT && !kept.iter().any(|k| k == text) {
            kept.push(text.to_string());
        }
        !self.quiet
    }
}

/// The notices this thread's work goes to, to enter on a thread it starts.
pub(crate) fn current() -> Option<Arc<Notices>> {
    CURRENT.with(|current| current.borrow().clone())
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

/// Keeps `message` for the payload of the profiler whose work this is,
/// and prints it unless that rank is quiet.
pub(crate) fn keep(message: fmt::Arguments<'_>) {
    let text = message.to_string();
    let print = current().is_none_or(|notices| notices.keep(&text));
    if print {
        print_line(who(), &text);
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

pub(crate) use {notice, say};
