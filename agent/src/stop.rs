//! Asking a background thread (the sampler, the flusher) to stop: a flag
//! and a condition variable, so that the thread sleeps until its next task
//! or the request, whichever comes first.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::sync::lock;

/// A stop request a thread can wait on.
#[derive(Default)]
pub(crate) struct StopSignal {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl StopSignal {
    /// Asks the thread to stop, waking it.
    pub(crate) fn stop(&self) {
        *lock(&self.stopped) = true;
        self.wake.notify_all();
    }

    /// Whether a stop was asked.
    pub(crate) fn is_stopped(&self) -> bool {
        *lock(&self.stopped)
    }

    /// Sleeps for `timeout` or until a stop is asked; returns whether it was.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let stopped = lock(&self.stopped);
        let (stopped, _) = self
            .wake
            .wait_timeout_while(stopped, timeout, |stopped| !*stopped)
            .unwrap_or_else(|e| e.into_inner());
        *stopped
    }
}
