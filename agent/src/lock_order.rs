//! The order in which a session's locks are taken, written once
//! ([`Level`]) and checked in debug builds ([`OrderedMutex`]): a thread
//! takes a lock only above every one it holds, and the locks that are
//! taken alone only when it holds none, so no two threads can each hold
//! what the other waits for. Release builds check nothing and keep
//! nothing.
//!
//! The order: a session's flushes, then its slot (held only to read the
//! running session), then what exited threads recorded, then a thread's
//! buffer in the recorder. The transport and the windows thread's handle
//! are taken and put back with no other of these held. Every other lock
//! of the agent (the recorder's list of buffers and its chunks, the steps'
//! edges, the notices, the control plane's) is a leaf: nothing is taken
//! while it is held.

use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::sync::lock;

/// Where a lock stands in the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// A session's flushes (`SessionControl::flushes`).
    Flushes,
    /// The session slot (`Hub::session`).
    Session,
    /// What exited threads recorded, in the recorder.
    Retired,
    /// One thread's buffer in the recorder.
    ThreadBuffer,
    /// Taken with none of the others held: the transport, the windows
    /// thread's and the flusher's handles, the stop signals' hook.
    Alone,
}

/// A mutex with its place in the order.
pub(crate) struct OrderedMutex<T> {
    level: Level,
    mutex: Mutex<T>,
}

/// An [`OrderedMutex`]'s guard.
pub(crate) struct OrderedGuard<'a, T> {
    guard: MutexGuard<'a, T>,
    _held: Held,
}

impl<T> OrderedMutex<T> {
    /// `value` behind a lock at `level`.
    pub(crate) fn new(level: Level, value: T) -> Self {
        OrderedMutex {
            level,
            mutex: Mutex::new(value),
        }
    }

    /// Locks it (taking the data even if a holder panicked); in a debug
    /// build, panics where the thread holds a lock it must not.
    pub(crate) fn lock(&self) -> OrderedGuard<'_, T> {
        let held = Held::enter(self.level);
        OrderedGuard {
            guard: lock(&self.mutex),
            _held: held,
        }
    }
}

impl<T: Default> OrderedMutex<T> {
    /// The default value behind a lock at `level`.
    pub(crate) fn default_at(level: Level) -> Self {
        Self::new(level, T::default())
    }
}

impl<'a, T> OrderedGuard<'a, T> {
    /// Waits on `changed`, the lock given up meanwhile (and still counted
    /// as held: the thread takes nothing else while it waits).
    pub(crate) fn wait(self, changed: &Condvar) -> Self {
        OrderedGuard {
            guard: changed.wait(self.guard).unwrap_or_else(|e| e.into_inner()),
            _held: self._held,
        }
    }
}

impl<T> Deref for OrderedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for OrderedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// A lock held by this thread, as the check counts it.
struct Held {
    #[cfg(debug_assertions)]
    level: Level,
}

#[cfg(debug_assertions)]
thread_local! {
    /// The levels of the ordered locks this thread holds, in the order taken.
    static HELD: std::cell::RefCell<Vec<Level>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Held {
    /// Checks and counts `level`, where this thread's count is still
    /// there (a thread's exit may take a lock after it is gone).
    #[cfg(debug_assertions)]
    fn enter(level: Level) -> Held {
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            let wrong = match level {
                Level::Alone => held.last().copied(),
                _ => held.iter().copied().find(|&h| h >= level),
            };
            if let Some(holding) = wrong {
                panic!("lock order: {level:?} taken while {holding:?} is held ({held:?})");
            }
            held.push(level);
        });
        Held { level }
    }

    #[cfg(not(debug_assertions))]
    #[inline(always)]
    fn enter(_level: Level) -> Held {
        Held {}
    }
}

#[cfg(debug_assertions)]
impl Drop for Held {
    fn drop(&mut self) {
        // Guards may drop in any order.
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held.iter().rposition(|&h| h == self.level) {
                held.remove(at);
            }
        });
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn locks_taken_in_order_pass_and_guards_drop_in_any_order() {
        let flushes = OrderedMutex::new(Level::Flushes, 1);
        let session = OrderedMutex::new(Level::Session, 2);
        let buffer = OrderedMutex::new(Level::ThreadBuffer, 3);
        let outer = flushes.lock();
        let middle = session.lock();
        let inner = buffer.lock();
        assert_eq!(*outer + *middle + *inner, 6);
        drop(outer);
        drop(inner);
        drop(middle);
        let alone = OrderedMutex::new(Level::Alone, ());
        drop(alone.lock());
    }

    #[test]
    #[should_panic(expected = "lock order: Flushes taken while Session is held")]
    fn a_lock_below_one_held_panics() {
        let flushes = OrderedMutex::new(Level::Flushes, ());
        let session = OrderedMutex::new(Level::Session, ());
        let _session = session.lock();
        let _flushes = flushes.lock();
    }

    #[test]
    #[should_panic(expected = "lock order: Alone taken while ThreadBuffer is held")]
    fn a_lock_taken_alone_panics_with_another_held() {
        let buffer = OrderedMutex::new(Level::ThreadBuffer, ());
        let transport = OrderedMutex::new(Level::Alone, ());
        let _buffer = buffer.lock();
        let _transport = transport.lock();
    }

    #[test]
    #[should_panic(expected = "lock order: Session taken while Session is held")]
    fn the_same_level_twice_panics() {
        let one = OrderedMutex::new(Level::Session, ());
        let other = OrderedMutex::new(Level::Session, ());
        let _one = one.lock();
        let _other = other.lock();
    }
}
