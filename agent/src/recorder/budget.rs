//! The row budget: `max_data_points` rows kept per table, taken a row at a
//! time by record calls and a chunk at a time by pairing passes, with what
//! did not fit counted as dropped.

use super::TABLES;
use rankscope_common::table::Table;
use std::sync::atomic::{AtomicU64, Ordering};

/// Each table's rows kept and dropped, against the most kept.
pub(super) struct RowBudget {
    /// Rows kept per table at most (`max_data_points`).
    pub(super) max_rows: usize,
    pub(super) kept: [AtomicU64; TABLES],
    pub(super) dropped: [AtomicU64; TABLES],
}

impl RowBudget {
    /// A budget of `max_rows` rows per table, none taken.
    pub(super) fn new(max_rows: usize) -> Self {
        RowBudget {
            max_rows,
            kept: Default::default(),
            dropped: Default::default(),
        }
    }

    /// Takes one row of `table`'s budget: `false` (and the drop counted) when full.
    #[inline]
    pub(super) fn admit(&self, table: Table) -> bool {
        let slot = table as usize;
        if self.kept[slot].fetch_add(1, Ordering::Relaxed) < self.max_rows as u64 {
            true
        } else {
            self.dropped[slot].fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// Rows of a table's budget taken a chunk at a time, so that threads
/// pairing at once seldom write the shared counter; what is not used goes
/// back when the grant is dropped.
pub(super) struct Grant<'a> {
    pub(super) budget: &'a RowBudget,
    pub(super) table: Table,
    /// Rows taken and not used yet.
    pub(super) left: u64,
    /// Rows refused for want of budget, counted as dropped at the end;
    /// once one is, the pass asks no more.
    pub(super) refused: u64,
}

impl<'a> Grant<'a> {
    /// Rows taken from the shared counter at once.
    pub(super) const CHUNK: u64 = 256;

    pub(super) fn new(budget: &'a RowBudget, table: Table) -> Self {
        Grant {
            budget,
            table,
            left: 0,
            refused: 0,
        }
    }

    /// One row: `false` when the budget is spent.
    #[inline]
    pub(super) fn take(&mut self) -> bool {
        if self.left == 0 && self.refused == 0 {
            let kept = &self.budget.kept[self.table as usize];
            let before = kept.fetch_add(Self::CHUNK, Ordering::Relaxed);
            self.left = (self.budget.max_rows as u64)
                .saturating_sub(before)
                .min(Self::CHUNK);
            // Taken past the budget: back at once, so that the counter is
            // exact.
            give_back(kept, Self::CHUNK - self.left);
        }
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                true
            }
            None => {
                self.refused += 1;
                false
            }
        }
    }
}

impl Drop for Grant<'_> {
    fn drop(&mut self) {
        let slot = self.table as usize;
        give_back(&self.budget.kept[slot], self.left);
        if self.refused > 0 {
            self.budget.dropped[slot].fetch_add(self.refused, Ordering::Relaxed);
        }
    }
}

/// Takes `rows` off a budget counter, never below 0: a session's start
/// resets the counter, maybe while a grant is out.
pub(super) fn give_back(kept: &AtomicU64, rows: u64) {
    if rows == 0 {
        return;
    }
    let _ = kept.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |taken| {
        Some(taken.saturating_sub(rows))
    });
}
