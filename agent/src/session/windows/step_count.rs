//! The step count and the edges it is armed for, with no lock: the hot
//! path advances the count (`Profiler::step`), and where the new count is
//! the edge armed, claims it; the windows thread arms the next edge (or
//! takes back one the count passed first). Of a step passing the count an
//! edge is armed at and the arming, one sees the other: each reads the
//! count with a read-modify-write (acquire-release), so whichever comes
//! second in the count's order sees the first (the arming's edge, or the
//! step's count). An edge is so claimed once, or taken back: never armed
//! past and never reached. (Sequentially consistent loads and stores would
//! do too, on the hot path at the same cost, but loom cannot model them.)
//! `tests/loom_step_count.rs` checks it
//! under every interleaving and ordering loom explores; the atomics come
//! from the parent module so that the test can compile this file against
//! loom's.

use super::{AtomicU64, Ordering};

/// No edge is due.
pub(crate) const NONE: u64 = u64::MAX;

/// The steps ended, and the counts at which a step claims an edge.
pub(crate) struct StepCount {
    count: AtomicU64,
    /// The count of the next edge; [`NONE`]: none due.
    next_edge: AtomicU64,
    /// The edge after it (a planned window's close), where known.
    then_edge: AtomicU64,
    /// Rolling windows: each edge is followed by one this many steps later.
    period: AtomicU64,
}

impl StepCount {
    /// No step yet, no edge armed.
    pub(crate) fn new() -> Self {
        StepCount {
            count: AtomicU64::new(0),
            next_edge: AtomicU64::new(NONE),
            then_edge: AtomicU64::new(NONE),
            period: AtomicU64::new(0),
        }
    }

    /// Ends a step: one count more and, where the new count is the edge
    /// armed, the edge claimed: `note` is called with its count (before the
    /// next edge is armed, so that edges come in order), and again for
    /// each next edge other threads' steps passed meanwhile.
    #[inline]
    pub(crate) fn advance(&self, note: impl FnMut(u64)) {
        // Acquires what an arming before it in the count's order released
        // (its edge); releases this count to an arming after it.
        let count = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        if count == self.next_edge.load(Ordering::Acquire) {
            self.claim(count, note);
        }
    }

    /// The edge at `count`, claimed from the windows thread (which takes
    /// back an edge the count passed before it was set), noted, and the
    /// next armed; an edge the count passed before it was armed is noted
    /// too (late), not lost.
    #[cold]
    fn claim(&self, mut edge: u64, mut note: impl FnMut(u64)) {
        let claimed =
            self.next_edge
                .compare_exchange(edge, NONE, Ordering::AcqRel, Ordering::Acquire);
        if claimed.is_err() {
            return;
        }
        loop {
            // The next edge is taken before this one is noted: once noted,
            // the windows thread may arm a new plan's edges, which this
            // claim must leave be.
            let next = match self.period.load(Ordering::Relaxed) {
                0 => self.then_edge.swap(NONE, Ordering::AcqRel),
                period => edge.saturating_add(period),
            };
            note(edge);
            if next == NONE || self.arm_next(next) {
                return;
            }
            edge = next;
        }
    }

    /// Arms the edge at `at`: `true` where a step will claim it (or did),
    /// `false` where the count passed it first and it was taken back.
    fn arm_next(&self, at: u64) -> bool {
        self.next_edge.store(at, Ordering::Release);
        // A read-modify-write, not a load: a step after it in the count's
        // order sees the edge; one before it, it sees.
        if self.count.fetch_add(0, Ordering::AcqRel) < at {
            return true;
        }
        // Passed: a step claimed the edge, or none ever will.
        let taken_back = self
            .next_edge
            .compare_exchange(at, NONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        !taken_back
    }

    /// Steps ended.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Arms an edge at `at`, then one at `then`. `false` where the count
    /// passed `at` first: no edge comes for it.
    pub(crate) fn arm(&self, at: u64, then: u64) -> bool {
        self.then_edge.store(then, Ordering::Release);
        let armed = self.arm_next(at);
        if !armed {
            self.then_edge.store(NONE, Ordering::Release);
        }
        armed
    }

    /// Counts from 0 again; with a `period`, an edge every that many steps
    /// from the first.
    pub(crate) fn reset(&self, period: u64) {
        self.count.store(0, Ordering::Relaxed);
        self.next_edge
            .store(if period > 0 { period } else { NONE }, Ordering::Release);
        self.then_edge.store(NONE, Ordering::Release);
        self.period.store(period, Ordering::Relaxed);
    }
}
