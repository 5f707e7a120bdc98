//! Asking a background thread (the sampler, the flusher, the windows'
//! thread) to stop or to look now: a flag and a condition variable, so
//! that the thread sleeps until its next task, a nudge or the stop request,
//! whichever comes first.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::sync::lock;

/// A stop request (or a nudge) a thread can wait on.
#[derive(Default)]
pub(crate) struct StopSignal {
    state: Mutex<Asked>,
    wake: Condvar,
}

#[derive(Default)]
struct Asked {
    stopped: bool,
    nudged: bool,
}

impl StopSignal {
    /// Asks the thread to stop, waking it.
    pub(crate) fn stop(&self) {
        lock(&self.state).stopped = true;
        self.wake.notify_all();
    }

    /// Wakes the thread without stopping it: its task is due now.
    pub(crate) fn nudge(&self) {
        lock(&self.state).nudged = true;
        self.wake.notify_all();
    }

    /// Takes back a stop asked before: the thread to come waits again.
    pub(crate) fn reset(&self) {
        *lock(&self.state) = Asked::default();
    }

    /// Whether a stop was asked.
    pub(crate) fn is_stopped(&self) -> bool {
        lock(&self.state).stopped
    }

    /// Sleeps for `timeout`, until nudged or until a stop is asked; returns
    /// whether it was.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let state = lock(&self.state);
        let (mut state, _) = self
            .wake
            .wait_timeout_while(state, timeout, |asked| !asked.stopped && !asked.nudged)
            .unwrap_or_else(|e| e.into_inner());
        state.nudged = false;
        state.stopped
    }
}
