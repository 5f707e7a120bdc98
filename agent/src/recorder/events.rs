//! A thread's stage events. Beginning or ending a stage appends one
//! fixed-size event (what happened, the stage's sequence number and name,
//! the stage clock's ticks) to a chunk of the thread's log that only the
//! thread writes, with no lock: a few plain stores and one release store
//! of the length. The recorder pairs the events into stage rows in
//! batches, holding the thread buffer's lock, whenever anything reads the
//! thread's rows (the sampler's readings, the session's finish and
//! flushes, the live view, the thread's exit). When the chunk is full the
//! thread hands it over unpaired for the next of those to pair, and writes
//! on in a fresh one; past the recorder's budget of chunks, it pairs its
//! events itself and starts its chunk again.
//!
//! Single writer, many readers one at a time: only the owning thread
//! writes the slots, the length and which chunk is current, and it empties
//! or replaces the chunk only while it holds the buffer's lock, so a reader
//! (who holds that lock) never sees a slot rewritten under it. The slots
//! are atomics written and read relaxed; the length's release store and
//! acquire load order them.

//!
//! `tests/loom_events.rs` checks the handover under every interleaving and
//! ordering loom explores: the atomics and the chunk's size come from the
//! parent module, so that the test can compile this file against loom's.

use rankscope_common::names::NameId;

use super::{AtomicPtr, AtomicU64, AtomicUsize, Ordering, CHUNK_EVENTS};

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

/// [`CHUNK_EVENTS`] slots for events.
pub(crate) struct Chunk {
    words: Box<[AtomicU64]>,
    ticks: Box<[AtomicU64]>,
}

impl Chunk {
    pub(crate) fn new() -> Self {
        let slots = || (0..CHUNK_EVENTS).map(|_| AtomicU64::new(0)).collect();
        Chunk {
            words: slots(),
            ticks: slots(),
        }
    }

    /// The events in slots `from..end`.
    pub(crate) fn events(&self, from: usize, end: usize) -> impl Iterator<Item = Event> + '_ {
        (from.min(end)..end).map(|i| {
            Event::unpack(
                self.words[i].load(Ordering::Relaxed),
                self.ticks[i].load(Ordering::Relaxed),
            )
        })
    }
}

/// One thread's event log: the chunk it writes now.
pub(crate) struct EventLog {
    /// The chunk, owned by the log: replaced only by the owning thread,
    /// holding the thread buffer's lock (so a reader, who holds it, sees
    /// one chunk throughout).
    current: AtomicPtr<Chunk>,
    /// Events written in it; only the owning thread stores it.
    len: AtomicUsize,
}

impl EventLog {
    pub(crate) fn new() -> Self {
        EventLog {
            current: AtomicPtr::new(Box::into_raw(Box::new(Chunk::new()))),
            len: AtomicUsize::new(0),
        }
    }

    fn chunk(&self) -> &Chunk {
        // SAFETY: `current` always holds a chunk from `Box::into_raw`, which
        // leaves it only when the log is dropped or by `replace`, which the
        // owning thread calls holding the buffer's lock: the owning thread
        // itself, and a reader holding the lock (as `read` requires), never
        // see it go while they use it.
        unsafe { &*self.current.load(Ordering::Relaxed) }
    }

    /// Appends `event`; `false` when the chunk is full. Owning thread only.
    #[inline(always)]
    pub(crate) fn push(&self, event: Event) -> bool {
        let len = self.len.load(Ordering::Relaxed);
        if len == CHUNK_EVENTS {
            return false;
        }
        let chunk = self.chunk();
        let (word, ticks) = event.pack();
        chunk.words[len].store(word, Ordering::Relaxed);
        chunk.ticks[len].store(ticks, Ordering::Relaxed);
        self.len.store(len + 1, Ordering::Release);
        true
    }

    /// The events of the current chunk from `from` on, and the position
    /// after them.
    ///
    /// # Safety
    ///
    /// The caller holds the thread buffer's lock until it drops the
    /// iterator: the chunk is replaced only under that lock.
    pub(crate) unsafe fn read(&self, from: usize) -> (impl Iterator<Item = Event> + '_, usize) {
        let end = self.len.load(Ordering::Acquire);
        (self.chunk().events(from, end), end)
    }

    /// Empties the chunk. Owning thread only, holding the thread buffer's
    /// lock, after every event was read.
    pub(crate) fn clear(&self) {
        self.len.store(0, Ordering::Release);
    }

    /// Hands over the (full) chunk and goes on in `fresh`, empty.
    ///
    /// # Safety
    ///
    /// Called by the owning thread (the one that pushes), holding the
    /// thread buffer's lock: nobody else reads the chunk then, and nobody
    /// writes it but this thread.
    pub(crate) unsafe fn replace(&self, fresh: Chunk) -> Chunk {
        let full = self
            .current
            .swap(Box::into_raw(Box::new(fresh)), Ordering::Relaxed);
        self.len.store(0, Ordering::Release);
        // SAFETY: from `Box::into_raw`, and no longer reachable through
        // `current`.
        *unsafe { Box::from_raw(full) }
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        // SAFETY: from `Box::into_raw`; nobody else holds the log.
        drop(unsafe { Box::from_raw(self.current.load(Ordering::Relaxed)) });
    }
}
