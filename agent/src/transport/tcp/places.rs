//! Room for connections of one kind at a listener (each rank's, window
//! controllers', mirrors'): a count of places taken, each given back as it
//! drops.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Places of one kind at rank 0's listener (window controllers, mirrors):
/// at most `most` taken at once, each given back as its [`Place`] drops.
pub(super) struct Places {
    taken: AtomicUsize,
    most: usize,
}

/// A place taken; dropped, it is free again.
pub(super) struct Place<'a>(&'a AtomicUsize);

impl Places {
    pub(super) fn new(most: usize) -> Self {
        Places {
            taken: AtomicUsize::new(0),
            most,
        }
    }

    /// A place, where one is free; with `anyway`, one past the most too.
    pub(super) fn take(&self, anyway: bool) -> Option<Place<'_>> {
        if self.taken.fetch_add(1, Ordering::SeqCst) >= self.most && !anyway {
            self.taken.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Place(&self.taken))
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
