//! Locks that survive a panic (a thread that panicked while holding one of
//! the agent's mutexes leaves data that is still worth reporting), and
//! joins that do not wait forever on a thread stuck outside the agent.

use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Locks `mutex`, taking its data even if a holder panicked.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a thread given [`join_within`] ended.
#[derive(Debug)]
pub(crate) enum Joined<T> {
    /// It returned this.
    Returned(T),
    /// It panicked.
    Panicked,
    /// It was still running at the bound: left running, detached.
    Detached,
}

/// Joins `thread` if it ends within `bound` (a driver call that hangs must
/// not hang the program's exit); else leaves it running, detached.
pub(crate) fn join_within<T>(thread: JoinHandle<T>, bound: Duration) -> Joined<T> {
    let until = Instant::now() + bound;
    while !thread.is_finished() {
        if Instant::now() >= until {
            return Joined::Detached;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    match thread.join() {
        Ok(value) => Joined::Returned(value),
        Err(_) => Joined::Panicked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that ends is joined with what it returned or its panic; one
    /// still running at the bound is left running, and the join returns.
    #[test]
    fn a_join_within_a_bound_returns_whatever_the_thread_does() {
        let quick = std::thread::spawn(|| 7);
        assert!(matches!(
            join_within(quick, Duration::from_secs(60)),
            Joined::Returned(7)
        ));
        let panics = std::thread::spawn(|| panic!("on purpose"));
        assert!(matches!(
            join_within(panics, Duration::from_secs(60)),
            Joined::Panicked
        ));
        let (release, stuck_until) = std::sync::mpsc::channel::<()>();
        let stuck = std::thread::spawn(move || stuck_until.recv());
        assert!(matches!(
            join_within(stuck, Duration::from_millis(50)),
            Joined::Detached
        ));
        drop(release);
    }
}
