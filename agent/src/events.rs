//! A thread's stage events. Beginning or ending a stage appends one
//! fixed-size event (what happened, the stage's sequence number and name,
//! the stage clock's ticks) to a log that only the thread writes, with no
//! lock: a few plain stores and one release store of the length. The
//! recorder pairs the events into stage rows in batches, holding the
//! thread buffer's lock: when the log is full (the thread itself, then it
//! starts the log again) and whenever anything reads the thread's rows
//! (the session's finish and flushes, the live view, the thread's exit).
//!
//! Single writer, many readers one at a time: only the owning thread
//! writes the slots and the length, and it empties the log only while it
//! holds the buffer's lock, so a reader (who holds that lock) never sees a
//! slot rewritten under it. The slots are atomics written and read relaxed;
//! the length's release store and acquire load order them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use rankscope_common::names::NameId;

/// Events a log holds: 128 KiB per thread and recorder. The sampler thread
/// pairs every log at each reading, so a thread pairs its own log only when
/// it begins and ends more than 4,096 stages between two readings.
pub(crate) const LOG_EVENTS: usize = 8192;

/// A stage's begin or end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Stage `seq` named `name` began at `ticks`.
    Begin { seq: u32, name: NameId, ticks: u64 },
    /// Stage `seq` ended at `ticks`.
    End { seq: u32, ticks: u64 },
}

/// Bit 63 of a packed event: a begin; the name in bits 32..63, the sequence
/// number in bits 0..32.
const BEGIN: u64 = 1 << 63;

impl Event {
    fn pack(self) -> (u64, u64) {
        match self {
            Event::Begin { seq, name, ticks } => {
                (BEGIN | u64::from(name) << 32 | u64::from(seq), ticks)
            }
            Event::End { seq, ticks } => (u64::from(seq), ticks),
        }
    }

    fn unpack(word: u64, ticks: u64) -> Self {
        let seq = word as u32;
        match word & BEGIN {
            0 => Event::End { seq, ticks },
            _ => Event::Begin {
                seq,
                name: ((word & !BEGIN) >> 32) as NameId,
                ticks,
            },
        }
    }
}

/// One thread's event log.
pub(crate) struct EventLog {
    words: Box<[AtomicU64]>,
    ticks: Box<[AtomicU64]>,
    /// Events written; only the owning thread stores it.
    len: AtomicUsize,
}

impl EventLog {
    pub(crate) fn new() -> Self {
        let slots = || (0..LOG_EVENTS).map(|_| AtomicU64::new(0)).collect();
        EventLog {
            words: slots(),
            ticks: slots(),
            len: AtomicUsize::new(0),
        }
    }

    /// Appends `event`; `false` when the log is full. Owning thread only.
    #[inline(always)]
    pub(crate) fn push(&self, event: Event) -> bool {
        let len = self.len.load(Ordering::Relaxed);
        if len == LOG_EVENTS {
            return false;
        }
        let (word, ticks) = event.pack();
        self.words[len].store(word, Ordering::Relaxed);
        self.ticks[len].store(ticks, Ordering::Relaxed);
        self.len.store(len + 1, Ordering::Release);
        true
    }

    /// The events from `from` on, and the position after them. The caller
    /// holds the thread buffer's lock.
    pub(crate) fn read(&self, from: usize) -> (impl Iterator<Item = Event> + '_, usize) {
        let end = self.len.load(Ordering::Acquire);
        let events = (from.min(end)..end).map(|i| {
            Event::unpack(
                self.words[i].load(Ordering::Relaxed),
                self.ticks[i].load(Ordering::Relaxed),
            )
        });
        (events, end)
    }

    /// Empties the log. Owning thread only, holding the thread buffer's
    /// lock, after every event was read.
    pub(crate) fn clear(&self) {
        self.len.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_the_log_until_it_is_full() {
        let log = EventLog::new();
        let events = [
            Event::Begin {
                seq: u32::MAX,
                name: 1_000_000,
                ticks: u64::MAX,
            },
            Event::End { seq: 0, ticks: 1 },
            Event::Begin {
                seq: 7,
                name: 0,
                ticks: 0,
            },
        ];
        for event in events {
            assert!(log.push(event));
        }
        let (read, end) = log.read(1);
        assert_eq!(read.collect::<Vec<_>>(), events[1..]);
        assert_eq!(end, 3);
        for i in 3..LOG_EVENTS {
            assert!(log.push(Event::End {
                seq: i as u32,
                ticks: 0
            }));
        }
        assert!(!log.push(Event::End { seq: 0, ticks: 0 }), "full");
        log.clear();
        assert_eq!(log.read(0).1, 0);
    }
}
