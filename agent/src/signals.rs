//! Stop signals: when a scheduler or torchrun stops a rank with SIGTERM (or
//! a user presses Ctrl-C), the running session spills what it recorded
//! before the signal takes its course, so a stopped rank's data is not lost.
//!
//! A watcher thread receives the signals (signal-hook's self-pipe: nothing
//! runs in the signal handler itself), spills every running session, then
//! lets the signal do what it would have done: end the process. A signal
//! whose action the program set itself (Python's SIGINT, a server's
//! graceful shutdown) is left alone: that program finishes its session.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::notice::say;
use crate::sync::lock;

/// What a stop signal does for one profiler: spill its running session
/// (given the signal).
pub(crate) type OnStop = dyn Fn(i32) + Send + Sync;

/// Profilers' spills, run when a stop signal comes (while their owners
/// live).
static WATCHED: OnceLock<Mutex<Vec<Weak<OnStop>>>> = OnceLock::new();

/// Runs `on_stop` on SIGTERM or SIGINT while its owner holds it, starting
/// the watcher on first use.
pub(crate) fn watch(on_stop: &Arc<OnStop>) {
    let watched = WATCHED.get_or_init(|| {
        start_watcher();
        Mutex::default()
    });
    let mut watched = lock(watched);
    watched.retain(|w| w.strong_count() > 0);
    if !watched
        .iter()
        .any(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(on_stop)))
    {
        watched.push(Arc::downgrade(on_stop));
    }
}

/// The stop signals whose action is still the default one.
fn default_signals() -> Vec<i32> {
    [SIGTERM, SIGINT]
        .into_iter()
        .filter(|&signal| has_default_action(signal))
        .collect()
}

/// Whether `signal`'s action is still the default one (the program set
/// none of its own).
pub(crate) fn has_default_action(signal: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one
    // into `old`, which is a valid, zeroed sigaction.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_DFL
    }
}

fn start_watcher() {
    let wanted = default_signals();
    if wanted.is_empty() {
        return;
    }
    // A second stop signal while the first one's spill runs ends the
    // process at once, as it would without rankscope.
    let stopping = Arc::new(AtomicBool::new(false));
    for &signal in &wanted {
        if let Err(e) =
            signal_hook::flag::register_conditional_default(signal, Arc::clone(&stopping))
        {
            say!("a second stop signal will wait for the spill: {e}");
        }
    }
    let mut signals = match Signals::new(&wanted) {
        Ok(signals) => signals,
        Err(e) => {
            say!("stop signals will not spill the session's data: {e}");
            return;
        }
    };
    // A forked child (a data-loader worker) has the handlers but not the
    // watcher thread that acts on them: it gets the default actions back,
    // so that a stop signal ends it.
    for &signal in &wanted {
        TAKEN.fetch_or(signal_bit(signal), Ordering::Relaxed);
    }
    // SAFETY: the child handler only loads an atomic and calls `signal`,
    // both async-signal-safe, as a handler run after fork must be.
    unsafe {
        libc::pthread_atfork(None, None, Some(default_actions_in_child));
    }
    let started = std::thread::Builder::new()
        .name("rankscope-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                stopping.store(true, Ordering::SeqCst);
                spill_all(signal);
                // The signal's own course: the default action ends the process.
                let _ = signal_hook::low_level::emulate_default_handler(signal);
            }
        });
    if let Err(e) = started {
        say!("stop signals will not spill the session's data: {e}");
    }
}

/// The stop signals the watcher took (their action was the default), as
/// bits of [`signal_bit`].
static TAKEN: AtomicU8 = AtomicU8::new(0);

fn signal_bit(signal: i32) -> u8 {
    match signal {
        SIGTERM => 1,
        _ => 2,
    }
}

/// In a forked child: the stop signals the watcher took get their default
/// action back; the others keep what the program set.
extern "C" fn default_actions_in_child() {
    let taken = TAKEN.load(Ordering::Relaxed);
    for signal in [SIGTERM, SIGINT] {
        if taken & signal_bit(signal) != 0 {
            // SAFETY: restoring the default action is async-signal-safe.
            unsafe {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
    }
}

/// Runs every watched profiler's spill.
fn spill_all(signal: i32) {
    let watched: Vec<Arc<OnStop>> = WATCHED
        .get()
        .map(|w| lock(w).clone())
        .unwrap_or_default()
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for on_stop in watched {
        on_stop(signal);
    }
}
