//! A thread's event log (`src/recorder/events.rs`) under loom: the owning
//! thread pushes events with no lock and, when its chunk is full, hands
//! the chunk over (or empties it) holding the buffer's lock, while a
//! reader holding that lock reads what was pushed. Under every
//! interleaving and every value a weakly ordered CPU may let a load see,
//! the reader sees whole events (a slot's two words from the same push),
//! in order, none twice and none lost. The file is compiled here against
//! loom's atomics, with chunks of two events.

// What `events.rs` takes from its parent module.
use loom::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
/// Events a chunk holds: two, so that a handful of pushes fills one.
const CHUNK_EVENTS: usize = 2;

#[allow(dead_code)]
#[path = "../src/recorder/events.rs"]
mod events;

use events::{Chunk, Event, EventLog};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// Events pushed by the owning thread: stage `seq` ends at tick `10 * seq + 1`.
const PUSHED: u32 = 3;

fn event(seq: u32) -> Event {
    Event::End {
        seq,
        ticks: u64::from(seq) * 10 + 1,
    }
}

/// A thread buffer: the log, and behind its lock the events read so far
/// (the pairing's) and where reading stopped in the current chunk.
struct Buffer {
    log: EventLog,
    read: Mutex<(Vec<Event>, usize)>,
}

impl Buffer {
    /// What a pairing pass does, holding the lock: reads the current
    /// chunk's events past where it stopped.
    fn pair(&self, read: &mut (Vec<Event>, usize)) {
        // SAFETY: the buffer's lock is held (`read` is its guard's).
        let (events, end) = unsafe { self.log.read(read.1) };
        read.0.extend(events);
        read.1 = end;
    }
}

/// Runs the owning thread's pushes beside a reader, `full` saying what the
/// owner does with a full chunk (under the lock); then checks what was
/// read, with what a last pass reads after the owner is done.
fn check(full: fn(&Buffer, &mut (Vec<Event>, usize))) {
    loom::model(move || {
        let buffer = Arc::new(Buffer {
            log: EventLog::new(),
            read: Mutex::new((Vec::new(), 0)),
        });
        let owner = {
            let buffer = Arc::clone(&buffer);
            thread::spawn(move || {
                for seq in 0..PUSHED {
                    if !buffer.log.push(event(seq)) {
                        full(&buffer, &mut buffer.read.lock().unwrap());
                        assert!(buffer.log.push(event(seq)));
                    }
                }
            })
        };
        // A pass while the owner pushes.
        buffer.pair(&mut buffer.read.lock().unwrap());
        owner.join().unwrap();
        let mut read = buffer.read.lock().unwrap();
        buffer.pair(&mut read);
        let expected: Vec<Event> = (0..PUSHED).map(event).collect();
        assert_eq!(read.0, expected);
    });
}

/// A full chunk handed over: the pass pairs it first, then goes on in the
/// fresh chunk from its start.
#[test]
fn events_handed_over_in_a_full_chunk_are_read_whole_and_in_order() {
    check(|buffer, read| {
        // What the pairing of the handed-over chunk does: its events past
        // where reading stopped, then the fresh chunk from 0.
        // SAFETY: the owning thread, holding the lock.
        let full: Chunk = unsafe { buffer.log.replace(Chunk::new()) };
        read.0.extend(full.events(read.1, CHUNK_EVENTS));
        read.1 = 0;
    });
}

/// Past the budget of chunks: the owner pairs its chunk itself and
/// empties it.
#[test]
fn a_chunk_paired_and_emptied_by_its_owner_loses_no_event() {
    check(|buffer, read| {
        buffer.pair(read);
        buffer.log.clear();
        read.1 = 0;
    });
}
