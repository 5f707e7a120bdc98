//! Which session the stages paired now belong to: the running one, else the
//! one that ended and is not drained yet, else none.
//!
//! Sessions are numbered by generation (from 1; 0 is none). A pairing pass
//! (on any thread, holding one thread buffer's lock) reads the generation
//! while the thread that ends a session writes it, with no lock between
//! them: the orderings below are what keeps a pass that sees the session
//! ended from missing which one it was (on weakly ordered CPUs it could
//! otherwise read the running generation's 0 with the ended one's stale
//! 0, and drop every stage it pairs). `tests/loom_generations.rs` checks it
//! under every interleaving and ordering loom explores.

use super::{AtomicU64, Ordering};

/// The running and the ended session's generations.
pub(crate) struct Generations {
    /// The running session's; 0 when none records.
    running: AtomicU64,
    /// The session that ended last, until it is drained; else 0.
    ended: AtomicU64,
}

impl Generations {
    /// No session, none ended.
    pub(crate) fn new() -> Self {
        Generations {
            running: AtomicU64::new(0),
            ended: AtomicU64::new(0),
        }
    }

    /// Whether a session records: a hint for the hot path, which a pass
    /// does not rely on.
    #[inline(always)]
    pub(crate) fn is_recording(&self) -> bool {
        self.running.load(Ordering::Relaxed) != 0
    }

    /// The session that stages paired now belong to (0: none).
    pub(crate) fn current(&self) -> u64 {
        // Acquire pairs with `end`'s release: a pass that reads the 0 that
        // `end` stored also reads the `ended` stored before it.
        match self.running.load(Ordering::Acquire) {
            0 => self.ended.load(Ordering::Acquire),
            running => running,
        }
    }

    /// Starts session `generation` (above 0).
    pub(crate) fn start(&self, generation: u64) {
        self.running.store(generation, Ordering::Release);
    }

    /// Ends the running session, which stages paired from now until
    /// [`Generations::forget_ended`] still belong to; returns its generation.
    pub(crate) fn end(&self) -> u64 {
        let ending = self.running.load(Ordering::Acquire);
        // `ended` first: a pass in between sees the session either way.
        self.ended.store(ending, Ordering::Release);
        self.running.store(0, Ordering::Release);
        ending
    }

    /// The ended session is drained (or a new one is about to start):
    /// stages paired from now on belong to none until the next starts.
    pub(crate) fn forget_ended(&self) {
        self.ended.store(0, Ordering::Release);
    }
}
