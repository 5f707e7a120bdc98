//! Periodic flushes: during a long session, every `flush_interval_s` the
//! rank writes what it recorded since the last flush to a file of its own
//! (a part, next to where its spill file will be). A rank killed mid-session
//! loses at most one interval; `rankscope aggregate` merges its parts into a
//! report marked partial. At finish the parts are merged into the final
//! spill file and removed. Each flush writes only what is new. (A program
//! can also flush when it chooses: `Session::flush`, the same flush.)

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::notice::{notice, spawn_with_notices};
use crate::stop::StopSignal;

/// The flushing thread of one session.
pub(crate) struct Flusher {
    signal: Arc<StopSignal>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Calls `flush` every `interval` until stopped (the session's flush,
    /// which holds the session by a weak reference: the flusher keeps
    /// nothing of it alive).
    pub(crate) fn start(flush: impl Fn() + Send + 'static, interval: Duration) -> Option<Flusher> {
        let signal = Arc::new(StopSignal::default());
        let thread_signal = Arc::clone(&signal);
        let thread = spawn_with_notices("rankscope-flusher", move || {
            while !thread_signal.wait(interval) {
                flush();
            }
        });
        match thread {
            Ok(thread) => Some(Flusher {
                signal,
                thread: Some(thread),
            }),
            Err(e) => {
                notice!("periodic flushes off: cannot start their thread: {e}");
                None
            }
        }
    }

    /// Stops flushing; a flush under way completes first.
    pub(crate) fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.signal.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.halt();
    }
}
