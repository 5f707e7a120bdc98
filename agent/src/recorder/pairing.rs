//! Pairing: a thread's stage events made stage rows, under its buffer's
//! lock, by whichever thread reads the rows (the sampler's readings, a
//! flush, the session's end, or the thread itself past the budget of
//! chunks); and the pool of event chunks handed over for it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rankscope_common::payload::Overflow;

use super::budget::{Grant, RowBudget};
use super::events::{Chunk, Event};
use super::generations::Generations;
use super::thread::{OpenStage, ThreadBuffer, ThreadData};
use super::CHUNK_EVENTS;
use crate::lock_order::OrderedMutex;
use crate::sync::lock;
use crate::ticks::{Clock, Scale};
use rankscope_common::table::{Builders, StageRecord, Table};

/// What a recorder shares with its threads' buffers: the buffers, what
/// exited threads recorded, the clock, the sessions and the row budget.
pub(super) struct Registry {
    pub(super) threads: Mutex<Vec<Arc<ThreadBuffer>>>,
    pub(super) retired: OrderedMutex<Retired>,
    /// The session clock, and the hot paths' ticks.
    pub(super) clock: Clock,
    /// Which session stages paired now belong to.
    pub(super) sessions: Generations,
    /// Rows kept and dropped per table.
    pub(super) budget: RowBudget,
    /// Chunks of events paired, for any of the threads to write in again.
    pub(super) spare_chunks: Mutex<Vec<Chunk>>,
    /// Chunks there are besides the one each thread writes (handed over
    /// and waiting to be paired, or spare), and how many there may be: as
    /// many as hold `max_rows` stages, in less memory than their rows take.
    /// Never freed before the recorder.
    pub(super) chunks: AtomicUsize,
    pub(super) max_chunks: usize,
}

/// The records of threads that exited during the session, already in
/// batch builders (their names resolved), and what they overflowed.
#[derive(Default)]
pub(super) struct Retired {
    pub(super) builders: Builders,
    pub(super) overflow: Overflow,
}

impl Registry {
    pub(super) fn threads(&self) -> Vec<Arc<ThreadBuffer>> {
        lock(&self.threads).clone()
    }

    /// Pairs the events of `buffer` not paired yet, the chunks handed over
    /// first: begins become open stages of session `generation` (0: of
    /// none, never kept), ends close them into stage rows.
    pub(super) fn pair(&self, buffer: &ThreadBuffer, data: &mut ThreadData, generation: u64) {
        // SAFETY: `data` is the buffer's, locked: the lock is held while
        // the events are read.
        let (events, end) = unsafe { buffer.events.read(data.paired) };
        let unpaired = end != data.paired || !data.full.is_empty();
        if !unpaired && !data.records.unconverted() {
            return;
        }
        // After the read: every tick this pass converts was read before
        // the line's end. (Rows are pushed under the buffer's lock, held.)
        let scale = self.clock.scale();
        // The other rows recorded since the last pass: their ticks made
        // nanoseconds on the line the stages of this pass take.
        data.records.to_session_ns(&|ticks| scale.session_ns(ticks));
        if !unpaired {
            return;
        }
        let mut pass = Pass {
            generation,
            scale,
            rows: Grant::new(&self.budget, Table::Stages),
        };
        if !data.full.is_empty() {
            let mut paired = Vec::with_capacity(data.full.len());
            while let Some((chunk, from)) = data.full.pop_front() {
                Self::pair_events(data, chunk.events(from, CHUNK_EVENTS), &mut pass);
                paired.push(chunk);
            }
            lock(&self.spare_chunks).append(&mut paired);
        }
        Self::pair_events(data, events, &mut pass);
        data.paired = end;
    }

    /// Pairs `events`, the next of the thread's, in `pass`.
    pub(super) fn pair_events(
        data: &mut ThreadData,
        events: impl Iterator<Item = Event>,
        pass: &mut Pass<'_>,
    ) {
        let mut events = events.peekable();
        while let Some(event) = events.next() {
            match event {
                Event::Begin { seq, name, ticks } => {
                    let metadata = match data.metadata.iter().position(|(s, _)| *s == seq) {
                        Some(at) => Some(data.metadata.swap_remove(at).1),
                        None => None,
                    };
                    let call_index = data.next_call(name);
                    let stage = OpenStage {
                        // Unique within the rank: the track in the high bits.
                        stage_id: u64::from(data.track) << 40 | u64::from(seq),
                        seq,
                        name,
                        call_index,
                        start_ticks: ticks,
                        metadata,
                        generation: pass.generation,
                    };
                    // A stage whose end comes next (none inside it, the
                    // commonest kind) is a row at once.
                    if let Some(&Event::End {
                        seq: ending,
                        ticks: end_ticks,
                    }) = events.peek()
                    {
                        if ending == seq {
                            events.next();
                            let depth = data.open.len();
                            Self::close(data, stage, depth, end_ticks, pass);
                            continue;
                        }
                    }
                    data.open.push(stage);
                }
                Event::End { seq, ticks } => {
                    if let Some(pos) = data.open.iter().rposition(|s| s.seq == seq) {
                        let stage = data.open.remove(pos);
                        Self::close(data, stage, pos, ticks, pass);
                    }
                }
            }
        }
    }

    /// A chunk for a thread to write its events in while its full one
    /// waits to be paired: a spare one, else a new one if the budget of
    /// chunks allows.
    pub(super) fn take_chunk(&self) -> Option<Chunk> {
        if let Some(chunk) = lock(&self.spare_chunks).pop() {
            return Some(chunk);
        }
        if self.chunks.fetch_add(1, Ordering::Relaxed) < self.max_chunks {
            Some(Chunk::new())
        } else {
            self.chunks.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }

    /// Closes `stage`, ended at `end_ticks` at `depth` (inside the open
    /// stage below it): a stage row with its ticks made nanoseconds, if it
    /// began in the session `pass` pairs for and the table has room.
    pub(super) fn close(
        data: &mut ThreadData,
        stage: OpenStage,
        depth: usize,
        end_ticks: u64,
        pass: &mut Pass<'_>,
    ) {
        if stage.generation == 0 || stage.generation != pass.generation || !pass.rows.take() {
            return;
        }
        let parent_id = depth.checked_sub(1).map(|p| data.open[p].stage_id);
        data.records.stages.push_back(StageRecord {
            name: stage.name,
            thread: data.track,
            thread_name: data.thread_name,
            stage_id: stage.stage_id,
            parent_id,
            depth: depth as u32,
            start_ns: pass.scale.session_ns(stage.start_ticks),
            end_ns: pass.scale.session_ns(end_ticks),
            call_index: stage.call_index,
            metadata: stage.metadata,
        });
    }

    /// Pairs a thread's events, then appends its records to `builders`;
    /// the records stay, for the caller to clear.
    pub(super) fn take_rows(
        &self,
        builders: &mut Builders,
        buffer: &ThreadBuffer,
        data: &mut ThreadData,
    ) {
        self.pair(buffer, data, self.sessions.current());
        if !data.functions.is_empty() {
            data.fold_function_totals(&self.clock.scale());
        }
        builders.append(&data.records, &data.names);
    }

    /// Moves an exited thread's records into the builders and forgets its buffer.
    pub(super) fn retire(&self, buffer: &Arc<ThreadBuffer>) {
        {
            // The retired records first, then the buffer: the order `drain` takes.
            let mut retired = self.retired.lock();
            let mut data = buffer.lock();
            self.take_rows(&mut retired.builders, buffer, &mut data);
            add_overflow(&mut retired.overflow, &mut data);
            data.clear_rows();
        }
        lock(&self.threads).retain(|b| !Arc::ptr_eq(b, buffer));
    }
}

/// One pairing pass: the session its stages must have begun in, the
/// conversion of their ticks, and the rows it may keep.
pub(super) struct Pass<'a> {
    pub(super) generation: u64,
    pub(super) scale: Scale,
    pub(super) rows: Grant<'a>,
}

/// Adds what `data` overflowed to `total`, and resets its counts.
pub(super) fn add_overflow(total: &mut Overflow, data: &mut ThreadData) {
    total.names_folded += data.names.take_folded();
    total.stages_too_deep += std::mem::take(&mut data.too_deep);
}
