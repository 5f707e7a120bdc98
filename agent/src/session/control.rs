//! What runs a profiler's sessions beside what they record
//! ([`SessionControl`]): the transport kept between sessions, the running
//! session's windows thread, its flushes and their thread, what a stop
//! signal does to it, and the count of sessions started. The hub reaches
//! them through these methods alone; their locks are taken in the order
//! [`crate::lock_order`] writes down.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rankscope_common::env::RankEnv;
use rankscope_common::Config;

use super::flush::Flushes;
use super::windows::WindowsThread;
use super::SessionError;
use crate::flusher::Flusher;
use crate::lock_order::{Level, OrderedGuard, OrderedMutex};
use crate::signals::{self, OnStop};
use crate::transport::{self, Transport};

/// The control side of a profiler's sessions, one session at a time.
pub(super) struct SessionControl {
    /// The transport, made at the first session unless one was handed in;
    /// each session takes it while it runs.
    transport: OrderedMutex<Option<Box<dyn Transport>>>,
    /// The running session's windows thread; stopped before the session
    /// leaves its slot, whose flushes a closing window needs.
    windows: OrderedMutex<Option<WindowsThread>>,
    /// The running session's flushes, one at a time.
    flushes: OrderedMutex<Flushes>,
    /// The running session's periodic flushes, where configured.
    flusher: OrderedMutex<Option<Flusher>>,
    /// What a stop signal does to the running session, where configured:
    /// watched while held here.
    on_stop: OrderedMutex<Option<Arc<OnStop>>>,
    /// Sessions this process started or tried to
    /// ([`crate::transport::SessionInfo::index`]).
    started: AtomicU32,
}

impl SessionControl {
    /// The control of a profiler given `transport`, or none (it is made at
    /// the first session).
    pub(super) fn new(transport: Option<Box<dyn Transport>>) -> Self {
        SessionControl {
            transport: OrderedMutex::new(Level::Alone, transport),
            windows: OrderedMutex::default_at(Level::Alone),
            flushes: OrderedMutex::default_at(Level::Flushes),
            flusher: OrderedMutex::default_at(Level::Alone),
            on_stop: OrderedMutex::default_at(Level::Alone),
            started: AtomicU32::new(0),
        }
    }

    /// Counts a session's start, before anything that can fail; returns
    /// its place among those this process started, from 0.
    pub(super) fn count_start(&self) -> u32 {
        self.started.fetch_add(1, Ordering::Relaxed)
    }

    /// The transport: the one handed in (or put back), else the one
    /// `config` and the launcher call for.
    pub(super) fn take_transport(
        &self,
        config: &Config,
        env: &RankEnv,
    ) -> Result<Box<dyn Transport>, SessionError> {
        let given = self.transport.lock().take();
        match given {
            Some(transport) => Ok(transport),
            None => transport::for_rank(config, env).map_err(|source| SessionError::Transport {
                stage: "rendezvous",
                source,
            }),
        }
    }

    /// Keeps `transport` for the next session.
    pub(super) fn put_back(&self, transport: Box<dyn Transport>) {
        *self.transport.lock() = Some(transport);
    }

    /// Runs `thread` as the running session's windows thread.
    pub(super) fn run_windows(&self, thread: Option<WindowsThread>) {
        *self.windows.lock() = thread;
    }

    /// Stops the running session's windows thread, if any; with
    /// `close_open`, a window open now closes and is reported first.
    pub(super) fn stop_windows(&self, close_open: bool) {
        let windows = self.windows.lock().take();
        if let Some(windows) = windows {
            windows.stop(close_open);
        }
    }

    /// The running session's flushes, locked: a flush runs alone, and the
    /// session's end waits for the one under way.
    pub(super) fn flushes(&self) -> OrderedGuard<'_, Flushes> {
        self.flushes.lock()
    }

    /// Runs `flusher` as the running session's periodic flushes.
    pub(super) fn run_flusher(&self, flusher: Option<Flusher>) {
        *self.flusher.lock() = flusher;
    }

    /// Stops the running session's periodic flushes, if any; a flush under
    /// way completes first.
    pub(super) fn stop_flusher(&self) {
        let flusher = self.flusher.lock().take();
        if let Some(flusher) = flusher {
            flusher.stop();
        }
    }

    /// Runs `on_stop` when a stop signal comes, until
    /// [`SessionControl::unwatch_stop_signals`].
    pub(super) fn watch_stop_signals(&self, on_stop: Option<Arc<OnStop>>) {
        if let Some(on_stop) = &on_stop {
            signals::watch(on_stop);
        }
        *self.on_stop.lock() = on_stop;
    }

    /// A stop signal no longer touches the session: it takes its course.
    pub(super) fn unwatch_stop_signals(&self) {
        let on_stop = self.on_stop.lock().take();
        drop(on_stop);
    }
}
