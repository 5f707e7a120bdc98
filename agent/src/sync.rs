//! Locks that survive a panic: a thread that panicked while holding one of
//! the agent's mutexes leaves data that is still worth reporting.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking its data even if a holder panicked.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
