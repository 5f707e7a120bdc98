//! The session slot: which phase the profiler's one session is in, so that
//! a session is never started while another is still starting or
//! finishing, and a stop signal that comes mid-finish waits for that
//! finish's spill instead of finding nothing to spill.
//!
//! ```text
//! Idle ─start→ Starting ─opened→ Running ─finish→ Finishing ─spilled→ Finishing(spilled) ─done→ Idle
//! ```

use crate::lock_order::{Level, OrderedGuard, OrderedMutex};
use std::sync::Condvar;

/// The phase of a profiler's session, holding its state while it runs.
pub(crate) enum Phase<T> {
    /// No session.
    Idle,
    /// A session is opening its transport.
    Starting,
    /// A session records.
    Running(Box<T>),
    /// A session is finishing; `spilled` once its spill file is written.
    Finishing { spilled: bool },
}

/// A [`Phase`] behind a mutex, with a condition variable for its changes.
pub(crate) struct Slot<T> {
    phase: OrderedMutex<Phase<T>>,
    changed: Condvar,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            phase: OrderedMutex::new(Level::Session, Phase::Idle),
            changed: Condvar::new(),
        }
    }
}

/// Marks a slot idle again when dropped (a start that failed, a finish done).
pub(crate) struct BackToIdle<'a, T>(&'a Slot<T>);

impl<T> Drop for BackToIdle<'_, T> {
    fn drop(&mut self) {
        self.0.set(Phase::Idle);
    }
}

impl<'a, T> BackToIdle<'a, T> {
    /// A start that opened: the session runs (the slot stays busy).
    pub(crate) fn running(self, state: T) {
        self.0.set(Phase::Running(Box::new(state)));
        std::mem::forget(self);
    }

    /// A finish wrote its spill file: a stop signal need not wait longer.
    pub(crate) fn spilled(&self) {
        self.0.set(Phase::Finishing { spilled: true });
    }
}

impl<T> Slot<T> {
    fn lock(&self) -> OrderedGuard<'_, Phase<T>> {
        self.phase.lock()
    }

    fn set(&self, phase: Phase<T>) {
        *self.lock() = phase;
        self.changed.notify_all();
    }

    /// Claims an idle slot for a start; otherwise the current phase is
    /// handed to `busy` to say why not.
    pub(crate) fn start<E>(
        &self,
        busy: impl FnOnce(&Phase<T>) -> E,
    ) -> Result<BackToIdle<'_, T>, E> {
        let mut phase = self.lock();
        match *phase {
            Phase::Idle => {
                *phase = Phase::Starting;
                Ok(BackToIdle(self))
            }
            ref other => Err(busy(other)),
        }
    }

    /// Takes the running session's state to finish it; `None` when none runs.
    pub(crate) fn finish(&self) -> Option<(Box<T>, BackToIdle<'_, T>)> {
        let mut phase = self.lock();
        match std::mem::replace(&mut *phase, Phase::Finishing { spilled: false }) {
            Phase::Running(state) => Some((state, BackToIdle(self))),
            other => {
                *phase = other;
                None
            }
        }
    }

    /// Like [`Slot::finish`], but first waits for a finish in progress to
    /// spill (then there is nothing left to take).
    pub(crate) fn finish_after_spill(&self) -> Option<(Box<T>, BackToIdle<'_, T>)> {
        let mut phase = self.lock();
        while matches!(*phase, Phase::Finishing { spilled: false }) {
            phase = phase.wait(&self.changed);
        }
        drop(phase);
        self.finish()
    }

    /// `f` of the running session's state.
    pub(crate) fn with_running<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        match &*self.lock() {
            Phase::Running(state) => Some(f(state)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_session_at_a_time_and_a_signal_waits_for_the_spill() {
        let slot: Arc<Slot<&str>> = Arc::default();
        let starting = slot.start(|_| "busy").unwrap();
        assert!(slot.start(|_| "busy").is_err(), "not while starting");
        starting.running("session");
        assert!(slot.start(|_| "busy").is_err(), "not while running");
        let (state, finishing) = slot.finish().unwrap();
        assert_eq!(*state, "session");
        assert!(slot.finish().is_none());

        let waiter = {
            let slot = Arc::clone(&slot);
            std::thread::spawn(move || slot.finish_after_spill().is_none())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        finishing.spilled();
        assert!(waiter.join().unwrap(), "the spill was this finish's to do");
        drop(finishing);
        assert!(slot.start(|_| "busy").is_ok(), "idle again");
    }
}
