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

use std::fmt;
use std::io::Write;
use std::sync::Mutex;

use crate::sync::lock;
use rankscope_common::text::terminal;

/// Distinct notices kept per payload.
const MAX_KEPT: usize = 64;

struct State {
    rank: Option<u32>,
    quiet: bool,
    kept: Vec<String>,
}

static STATE: Mutex<State> = Mutex::new(State {
    rank: None,
    quiet: false,
    kept: Vec::new(),
});

fn state() -> std::sync::MutexGuard<'static, State> {
    lock(&STATE)
}

/// Which rank this process is, and whether it keeps its notices to itself.
pub(crate) fn set_rank(rank: u32, quiet: bool) {
    let mut state = state();
    state.rank = Some(rank);
    state.quiet = quiet && rank != 0;
}

/// Whether this rank leaves its notices to rank 0.
pub(crate) fn is_quiet() -> bool {
    state().quiet
}

/// The notices kept since the last call.
pub(crate) fn take_kept() -> Vec<String> {
    std::mem::take(&mut state().kept)
}

/// Prints `message`, prefixed with this process's rank.
pub(crate) fn say_now(message: fmt::Arguments<'_>) {
    let rank = state().rank;
    print_line(
        rank.map(|r| format!("rank {r}: ")).unwrap_or_default(),
        &message.to_string(),
    );
}

/// Keeps `message` for the payload and prints it unless the rank is quiet.
pub(crate) fn keep(message: fmt::Arguments<'_>) {
    let text = message.to_string();
    let (rank, quiet) = {
        let mut state = state();
        if state.kept.len() < MAX_KEPT && !state.kept.contains(&text) {
            state.kept.push(text.clone());
        }
        (state.rank, state.quiet)
    };
    if !quiet {
        print_line(
            rank.map(|r| format!("rank {r}: ")).unwrap_or_default(),
            &text,
        );
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
