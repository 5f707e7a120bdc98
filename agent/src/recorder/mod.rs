//! The recording of one rank: per-thread buffers, the session clock, the row
//! budget and whether a session is recording. The hot path (stage begin and
//! end, record calls) and the sampler thread write here; the session reads
//! it out at finish.
//!
//! Each thread that records gets its own buffer, found through a
//! thread-local, so the hot path touches only memory its thread owns.
//! Stages take no lock at all: a begin or an end is one event in the
//! thread's event log ([`crate::events`]), and the thread keeps the stages
//! it has open beside it, so `stop` and a guard's end need nobody else.
//! The events become stage rows in batches, under the buffer's mutex,
//! whenever the rows are read (the sampler's readings among them). A full
//! chunk of the log is handed over for that, unpaired, while the
//! recorder's budget of chunks lasts; past it the thread pairs its own
//! events. Other records (metrics, events, telemetry) take the buffer's
//! mutex, seldom contended while the job runs: other threads take it
//! briefly at each sampler reading, at session boundaries (start, finish,
//! flushes, a thread's exit) and for the live view of open stages. When a
//! thread exits, its records move into the recorder's batch builders and
//! its buffer is freed, so short-lived threads cost no memory once gone.
//!
//! Memory is bounded by configuration: rows by `max_data_points` per table,
//! distinct names by `max_names` per thread (more fold into `(other)`), open
//! stages by `max_open_stages` per thread, events by a chunk per thread and
//! the recorder's other chunks (handed over, or spare for any thread),
//! which hold at most `max_data_points` stages.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use rustc_hash::FxHashMap;

use rankscope_common::names::{NameId, Names, OTHER};
use rankscope_common::payload::Overflow;
use rankscope_common::table::{
    Builders, MetricRecord, Overhead, Records, StageRecord, Table, OVERHEAD_SECTION,
    STAGE_GPU_SECTION,
};
use rankscope_common::Config;

use crate::events::{Chunk, Event, EventLog, CHUNK_EVENTS};
use crate::stage_name::StageName;
use crate::sync::lock;
use crate::ticks::{Clock, Scale};

mod generations;
use generations::Generations;

/// Source of recorder ids: thread-locals are keyed by them.
static NEXT_RECORDER_ID: AtomicU64 = AtomicU64::new(1);

/// Source of thread-buffer ids, unique across recorders: a [`StageName`]
/// remembers its name id per buffer by it.
static NEXT_BUFFER_ID: AtomicU32 = AtomicU32::new(0);

/// What a thread keeps for one recorder, reached without a lock.
struct Local {
    recorder: u64,
    buffer: Arc<ThreadBuffer>,
    /// This thread's bits of its stage ids ([`owner_bits`]).
    owner: u64,
    /// Stages this thread began and has not ended, innermost last:
    /// (sequence number, name).
    open: Vec<(u32, NameId)>,
    /// The stages begun past `max_open_stages` and not ended, innermost
    /// last, as runs of one name (name, calls; at most `max_open_stages`
    /// runs): an end by name ends the innermost of these first, not an open
    /// stage of the same name.
    refused: Vec<(NameId, u64)>,
    next_seq: u32,
    /// Names looked up by text, so that a stage named by a `&str` takes no
    /// lock after its first use; at most `max_names` of them.
    names: FxHashMap<Box<str>, NameId>,
}

/// This thread's state for each live recorder it has recorded into; when
/// the thread exits, each buffer is retired into its recorder.
struct Locals(RefCell<Vec<Local>>);

impl Drop for Locals {
    fn drop(&mut self) {
        for local in self.0.get_mut().drain(..) {
            if let Some(registry) = local.buffer.registry.upgrade() {
                registry.retire(&local.buffer);
            }
        }
    }
}

thread_local! {
    static LOCALS: Locals = const { Locals(RefCell::new(Vec::new())) };
}

/// A stage that began and has not ended yet, as paired from the events.
pub(crate) struct OpenStage {
    stage_id: u64,
    seq: u32,
    name: NameId,
    call_index: u32,
    /// When it began, in the clock's ticks.
    start_ticks: u64,
    metadata: Option<String>,
    /// The session it began in (0: none).
    generation: u64,
}

/// The sections of the `metrics` rows the agent writes, each interned once
/// per thread: recording a metric looks up only its name.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Section {
    /// A program's own metrics.
    Custom,
    /// Items processed, and items per second.
    Throughput,
    /// GPU times of stage calls.
    StageGpu,
    /// What profiling cost.
    Overhead,
}

impl Section {
    const ALL: [Section; 4] = [
        Section::Custom,
        Section::Throughput,
        Section::StageGpu,
        Section::Overhead,
    ];

    fn name(self) -> &'static str {
        match self {
            Section::Custom => "custom",
            Section::Throughput => "throughput",
            Section::StageGpu => STAGE_GPU_SECTION,
            Section::Overhead => OVERHEAD_SECTION,
        }
    }
}

/// What one thread recorded, behind its buffer's mutex.
pub(crate) struct ThreadData {
    /// Names interned by this thread (stage, metric, event names).
    pub(crate) names: Names,
    /// The thread's track number within the rank.
    track: u32,
    /// The thread's name, interned.
    thread_name: NameId,
    /// The agent's own metric sections, interned, by [`Section`].
    sections: [NameId; Section::ALL.len()],
    /// Stages begun and not ended as paired so far, innermost last.
    open: Vec<OpenStage>,
    /// Calls so far per stage name id, for `call_index`.
    calls: Vec<u32>,
    /// Where pairing stopped in the thread's current chunk of events.
    paired: usize,
    /// Full chunks of the thread's events handed over, oldest first, each
    /// with where pairing stopped in it.
    full: VecDeque<(Chunk, usize)>,
    /// Metadata of stages whose begin is not paired yet, by sequence number.
    metadata: Vec<(u32, String)>,
    /// Stages begun while the open stack was full.
    too_deep: u64,
    /// The session's rows, one queue per table.
    pub(crate) records: Records,
}

impl ThreadData {
    /// The next call index of stage name `name`.
    fn next_call(&mut self, name: NameId) -> u32 {
        let slot = name as usize;
        if self.calls.len() <= slot {
            self.calls.resize(slot + 1, 0);
        }
        let call = self.calls[slot];
        self.calls[slot] += 1;
        call
    }

    /// Appends a `metrics` row, stamped `ticks` of the recorder's clock.
    pub(crate) fn push_metric(&mut self, ticks: u64, section: Section, name: &str, value: f64) {
        let section = self.sections[section as usize];
        let name = self.names.intern(name);
        self.records.metrics.push_back(MetricRecord {
            ts_ns: ticks,
            section,
            name,
            value,
        });
    }

    /// Forgets the session's rows and call counts, and frees their memory;
    /// names stay interned.
    fn clear_rows(&mut self) {
        self.calls = Vec::new();
        self.records = Records::default();
        self.too_deep = 0;
        self.names.take_folded();
    }
}

/// One thread's buffer, shared by the thread and its recorder.
pub(crate) struct ThreadBuffer {
    data: Mutex<ThreadData>,
    /// The thread's stage events, written without the lock.
    events: EventLog,
    /// This buffer's id among every recorder's buffers.
    id: u32,
    /// Where the buffer goes when its thread exits.
    registry: Weak<Registry>,
}

impl ThreadBuffer {
    /// Locks the data; a panic on another holder does not poison recording.
    fn lock(&self) -> MutexGuard<'_, ThreadData> {
        lock(&self.data)
    }
}

/// What a recorder shares with its threads' buffers: the buffers, what
/// exited threads recorded, the clock, the sessions and the row budget.
struct Registry {
    threads: Mutex<Vec<Arc<ThreadBuffer>>>,
    retired: Mutex<Retired>,
    /// The session clock, and the hot paths' ticks.
    clock: Clock,
    /// Which session stages paired now belong to.
    sessions: Generations,
    /// Rows kept per table.
    max_rows: usize,
    kept: [AtomicU64; TABLES],
    dropped: [AtomicU64; TABLES],
    /// Chunks of events paired, for any of the threads to write in again.
    spare_chunks: Mutex<Vec<Chunk>>,
    /// Chunks there are besides the one each thread writes (handed over
    /// and waiting to be paired, or spare), and how many there may be: as
    /// many as hold `max_rows` stages, in less memory than their rows take.
    /// Never freed before the recorder.
    chunks: AtomicUsize,
    max_chunks: usize,
}

/// The records of threads that exited during the session, already in
/// batch builders (their names resolved), and what they overflowed.
#[derive(Default)]
struct Retired {
    builders: Builders,
    overflow: Overflow,
}

impl Registry {
    fn threads(&self) -> Vec<Arc<ThreadBuffer>> {
        lock(&self.threads).clone()
    }

    /// Pairs the events of `buffer` not paired yet, the chunks handed over
    /// first: begins become open stages of session `generation` (0: of
    /// none, never kept), ends close them into stage rows.
    fn pair(&self, buffer: &ThreadBuffer, data: &mut ThreadData, generation: u64) {
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
            rows: Grant::new(self, Table::Stages),
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
    fn pair_events(
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
    fn take_chunk(&self) -> Option<Chunk> {
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
    fn close(
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
    fn take_rows(&self, builders: &mut Builders, buffer: &ThreadBuffer, data: &mut ThreadData) {
        self.pair(buffer, data, self.sessions.current());
        builders.append(&data.records, &data.names);
    }

    /// Moves an exited thread's records into the builders and forgets its buffer.
    fn retire(&self, buffer: &Arc<ThreadBuffer>) {
        {
            // The retired records first, then the buffer: the order `drain` takes.
            let mut retired = lock(&self.retired);
            let mut data = buffer.lock();
            self.take_rows(&mut retired.builders, buffer, &mut data);
            add_overflow(&mut retired.overflow, &mut data);
            data.clear_rows();
        }
        lock(&self.threads).retain(|b| !Arc::ptr_eq(b, buffer));
    }

    /// Takes one row of `table`'s budget: `false` (and the drop counted) when full.
    #[inline]
    fn admit(&self, table: Table) -> bool {
        let slot = table as usize;
        if self.kept[slot].fetch_add(1, Ordering::Relaxed) < self.max_rows as u64 {
            true
        } else {
            self.dropped[slot].fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// One pairing pass: the session its stages must have begun in, the
/// conversion of their ticks, and the rows it may keep.
struct Pass<'a> {
    generation: u64,
    scale: Scale,
    rows: Grant<'a>,
}

/// Rows of a table's budget taken a chunk at a time, so that threads
/// pairing at once seldom write the shared counter; what is not used goes
/// back when the grant is dropped.
struct Grant<'a> {
    registry: &'a Registry,
    table: Table,
    /// Rows taken and not used yet.
    left: u64,
    /// Rows refused for want of budget, counted as dropped at the end;
    /// once one is, the pass asks no more.
    refused: u64,
}

impl<'a> Grant<'a> {
    /// Rows taken from the shared counter at once.
    const CHUNK: u64 = 256;

    fn new(registry: &'a Registry, table: Table) -> Self {
        Grant {
            registry,
            table,
            left: 0,
            refused: 0,
        }
    }

    /// One row: `false` when the budget is spent.
    #[inline]
    fn take(&mut self) -> bool {
        if self.left == 0 && self.refused == 0 {
            let kept = &self.registry.kept[self.table as usize];
            let before = kept.fetch_add(Self::CHUNK, Ordering::Relaxed);
            self.left = (self.registry.max_rows as u64)
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
        give_back(&self.registry.kept[slot], self.left);
        if self.refused > 0 {
            self.registry.dropped[slot].fetch_add(self.refused, Ordering::Relaxed);
        }
    }
}

/// Takes `rows` off a budget counter, never below 0: a session's start
/// resets the counter, maybe while a grant is out.
fn give_back(kept: &AtomicU64, rows: u64) {
    if rows == 0 {
        return;
    }
    let _ = kept.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |taken| {
        Some(taken.saturating_sub(rows))
    });
}

/// Interns `name` in `buffer`; says whether the id may be kept for later
/// calls: not when the name was folded into `(other)`, so that every call
/// of a folded name is counted as such.
fn intern(buffer: &ThreadBuffer, name: &str) -> (NameId, bool) {
    let names = &mut buffer.lock().names;
    let id = names.intern(name);
    (id, names.name(id) != OTHER || name == OTHER)
}

/// Ends one call of the refused run at `pos`.
fn end_refused(refused: &mut Vec<(NameId, u64)>, pos: usize) {
    refused[pos].1 -= 1;
    if refused[pos].1 == 0 {
        refused.remove(pos);
    }
}

/// Adds what `data` overflowed to `total`, and resets its counts.
fn add_overflow(total: &mut Overflow, data: &mut ThreadData) {
    total.names_folded += data.names.take_folded();
    total.stages_too_deep += std::mem::take(&mut data.too_deep);
}

/// The recording of one rank.
pub(crate) struct Recorder {
    id: u64,
    registry: Arc<Registry>,
    next_track: AtomicU32,
    max_names: usize,
    max_open_stages: usize,
    last_generation: AtomicU64,
}

const TABLES: usize = Table::ALL.len();

/// Stage ids, as [`Recorder::begin_stage`] returns them: the id of the
/// thread's buffer (plus one: never 0) in bits 32–62, the stage's sequence
/// number below; bit 63 marks a stage refused as too deep. An id ends
/// stages of the thread that began it alone.
const REFUSED: u64 = 1 << 63;

/// The id of no stage, which ends nothing (a stage begun while the thread
/// exits).
const NOT_OPENED: u64 = 0;

/// A thread buffer's bits of the ids of its stages.
fn owner_bits(buffer_id: u32) -> u64 {
    (u64::from(buffer_id % 0x7FFF_FFFF) + 1) << 32
}

/// A refused run's name when its calls had several names: any.
const ANY_NAME: NameId = NameId::MAX;

impl Recorder {
    /// A recorder with the limits of `config`.
    pub(crate) fn new(config: &Config) -> Self {
        Recorder {
            id: NEXT_RECORDER_ID.fetch_add(1, Ordering::Relaxed),
            registry: Arc::new(Registry {
                threads: Mutex::default(),
                retired: Mutex::default(),
                clock: Clock::new(),
                sessions: Generations::new(),
                max_rows: config.max_data_points,
                kept: Default::default(),
                dropped: Default::default(),
                spare_chunks: Mutex::default(),
                chunks: AtomicUsize::new(0),
                max_chunks: config.max_data_points.saturating_mul(2) / CHUNK_EVENTS,
            }),
            next_track: AtomicU32::new(0),
            max_names: config.max_names,
            max_open_stages: config.max_open_stages,
            last_generation: AtomicU64::new(0),
        }
    }

    /// Rows kept per table.
    pub(crate) fn max_rows(&self) -> usize {
        self.registry.max_rows
    }

    /// Whether a session is recording.
    #[inline(always)]
    pub(crate) fn is_recording(&self) -> bool {
        self.registry.sessions.is_recording()
    }

    /// Nanoseconds since the session started, on the monotonic clock.
    #[inline(always)]
    pub(crate) fn now_ns(&self) -> u64 {
        self.registry.clock.now_ns()
    }

    /// Forgets rows recorded outside a session, starts the session clock and
    /// starts recording.
    pub(crate) fn begin_session(&self) {
        // From here until the new generation is set, whatever pairs (the
        // clear below, a live view, a thread past the budget of chunks)
        // keeps nothing.
        self.registry.sessions.forget_ended();
        for thread in self.registry.threads() {
            let mut data = thread.lock();
            // Events since the last drain belong to no session.
            self.registry.pair(&thread, &mut data, 0);
            data.clear_rows();
        }
        *lock(&self.registry.retired) = Retired::default();
        self.take_dropped();
        self.registry.clock.start_session();
        let generation = self.last_generation.fetch_add(1, Ordering::Relaxed) + 1;
        self.registry.sessions.start(generation);
    }

    /// Stops recording; returns the session's length in nanoseconds.
    pub(crate) fn end_session(&self) -> u64 {
        self.registry.sessions.end();
        self.now_ns()
    }

    /// Every thread's records in batch builders, and what the threads
    /// overflowed; the records are forgotten.
    pub(crate) fn drain(&self) -> (Builders, Overflow) {
        // Held throughout (before any buffer, as `retire` takes them), so a
        // thread exiting meanwhile retires its records before or after, never
        // in between.
        let mut retired = lock(&self.registry.retired);
        for thread in self.registry.threads() {
            let mut data = thread.lock();
            self.registry
                .take_rows(&mut retired.builders, &thread, &mut data);
            add_overflow(&mut retired.overflow, &mut data);
            data.clear_rows();
        }
        // The ended session is drained: stages that end from now on belong
        // to none.
        self.registry.sessions.forget_ended();
        let Retired { builders, overflow } = std::mem::take(&mut *retired);
        (builders, overflow)
    }

    /// The records since the last call (or the session's start), in batch
    /// builders, for a flush; the session goes on recording (call
    /// counts, open stages and overflow counts stay).
    pub(crate) fn flush(&self) -> Builders {
        let mut retired = lock(&self.registry.retired);
        for thread in self.registry.threads() {
            let mut data = thread.lock();
            self.registry
                .take_rows(&mut retired.builders, &thread, &mut data);
            // The session goes on: its next rows reuse the memory.
            data.records.clear();
        }
        std::mem::take(&mut retired.builders)
    }

    /// Begins a stage on this thread; returns its id. Not inlined, as the
    /// other stage calls: a call site whose profiler is disabled stays a
    /// branch (inlined, the calls' bodies cost such a site 1.4 ns).
    #[inline(never)]
    pub(crate) fn begin_stage(&self, name: &str, metadata: Option<String>) -> u64 {
        self.begin_stage_as(|local| self.name_id(local, name), metadata)
    }

    /// Begins a stage named by a [`StageName`], whose id this thread
    /// interned once. Not inlined (see [`Recorder::begin_stage`]).
    #[inline(never)]
    pub(crate) fn begin_named_stage(&self, name: &StageName, metadata: Option<String>) -> u64 {
        self.begin_stage_as(|local| self.named_id(local, name), metadata)
    }

    #[inline(always)]
    fn begin_stage_as(
        &self,
        name: impl FnOnce(&mut Local) -> NameId,
        metadata: Option<String>,
    ) -> u64 {
        self.with_local(|local| {
            let name = name(local);
            if local.open.len() >= self.max_open_stages {
                local.buffer.lock().too_deep += 1;
                let runs = local.refused.len();
                match local.refused.last_mut() {
                    Some((last, calls)) if *last == name || *last == ANY_NAME => *calls += 1,
                    _ if runs < self.max_open_stages => local.refused.push((name, 1)),
                    // No room for another run: the innermost becomes a run
                    // of any name (ends by name end its calls first, which
                    // are innermost whatever their names).
                    Some(last) => *last = (ANY_NAME, last.1 + 1),
                    None => unreachable!("max_open_stages is at least 1"),
                }
                return local.owner | REFUSED;
            }
            let seq = local.next_seq;
            local.next_seq = seq.wrapping_add(1);
            if let Some(metadata) = metadata {
                local.buffer.lock().metadata.push((seq, metadata));
            }
            local.open.push((seq, name));
            let ticks = self.registry.clock.ticks();
            self.push_event(local, Event::Begin { seq, name, ticks });
            local.owner | u64::from(seq)
        })
        .unwrap_or(NOT_OPENED)
    }

    /// Ends the stage `stage_id` that this thread began (one refused as too
    /// deep: the innermost such); an id of another thread's, or of none,
    /// ends nothing. Not inlined (see [`Recorder::begin_stage`]).
    #[inline(never)]
    pub(crate) fn end_stage(&self, stage_id: u64) {
        let ticks = self.registry.clock.ticks();
        self.with_local(|local| {
            if stage_id & !REFUSED & !u64::from(u32::MAX) != local.owner {
                return;
            }
            if stage_id & REFUSED != 0 {
                if let Some(pos) = local.refused.len().checked_sub(1) {
                    end_refused(&mut local.refused, pos);
                }
                return;
            }
            let stage_seq = stage_id as u32;
            if let Some(pos) = local.open.iter().rposition(|&(seq, _)| seq == stage_seq) {
                let (seq, _) = local.open.remove(pos);
                self.push_event(local, Event::End { seq, ticks });
            }
        });
    }

    /// Ends the innermost open stage called `name` on this thread; `false`
    /// if there is none.
    pub(crate) fn stop_stage(&self, name: &str) -> bool {
        // A lookup, not interning: a name never started costs nothing.
        self.stop_stage_as(|local| match local.names.get(name) {
            Some(&id) => Some(id),
            None => local.buffer.lock().names.get(name),
        })
    }

    /// Ends the innermost open stage named by `name` on this thread;
    /// `false` if there is none.
    #[inline]
    pub(crate) fn stop_named_stage(&self, name: &StageName) -> bool {
        self.stop_stage_as(|local| Some(self.named_id(local, name)))
    }

    #[inline(always)]
    fn stop_stage_as(&self, name: impl FnOnce(&mut Local) -> Option<NameId>) -> bool {
        let ticks = self.registry.clock.ticks();
        self.with_local(|local| {
            let Some(name) = name(local) else {
                return false;
            };
            // A refused stage is deeper than every open one: if it has the
            // name, it is the innermost.
            if let Some(pos) = local
                .refused
                .iter()
                .rposition(|&(n, _)| n == name || n == ANY_NAME)
            {
                end_refused(&mut local.refused, pos);
                return true;
            }
            match local.open.iter().rposition(|&(_, n)| n == name) {
                Some(pos) => {
                    let (seq, _) = local.open.remove(pos);
                    self.push_event(local, Event::End { seq, ticks });
                    true
                }
                None => false,
            }
        })
        .unwrap_or(false)
    }

    /// Appends a stage event to this thread's log; a full chunk is handed
    /// over first (or paired, past the budget of chunks).
    #[inline(always)]
    fn push_event(&self, local: &Local, event: Event) {
        if !local.buffer.events.push(event) {
            self.chunk_full(&local.buffer);
            local.buffer.events.push(event);
        }
    }

    /// Under the buffer's lock: hands the full chunk over to be paired and
    /// goes on in another, or, when the recorder holds all the chunks it
    /// may, pairs the events and starts the chunk again.
    #[cold]
    #[inline(never)]
    fn chunk_full(&self, buffer: &ThreadBuffer) {
        let mut data = buffer.lock();
        match self.registry.take_chunk() {
            Some(fresh) => {
                // SAFETY: the owning thread (in a stage call), holding the
                // buffer's lock.
                let full = unsafe { buffer.events.replace(fresh) };
                let from = std::mem::replace(&mut data.paired, 0);
                data.full.push_back((full, from));
            }
            None => {
                self.registry
                    .pair(buffer, &mut data, self.registry.sessions.current());
                buffer.events.clear();
                data.paired = 0;
            }
        }
    }

    /// The id of stage name `name` on this thread: from the thread's cache,
    /// else interned under the buffer's lock (and cached, up to `max_names`).
    #[inline]
    fn name_id(&self, local: &mut Local, name: &str) -> NameId {
        self.cached_name_id(local, name).0
    }

    /// [`Recorder::name_id`], and whether the id may be kept (see
    /// [`intern`]).
    #[inline]
    fn cached_name_id(&self, local: &mut Local, name: &str) -> (NameId, bool) {
        if let Some(&id) = local.names.get(name) {
            return (id, true);
        }
        let (id, cacheable) = intern(&local.buffer, name);
        if cacheable && local.names.len() < self.max_names {
            local.names.insert(name.into(), id);
        }
        (id, cacheable)
    }

    /// The id of `name` on this thread: remembered by the name itself, else
    /// from the thread's cache of names by text.
    #[inline(always)]
    fn named_id(&self, local: &mut Local, name: &StageName) -> NameId {
        let buffer = local.buffer.id;
        name.id_in(buffer, |text| self.cached_name_id(local, text))
    }

    /// Records a row of what profiling cost (the overhead section). It takes
    /// no row budget (a few rows a session, which a program's own metrics
    /// must not crowd out) and ignores whether a session records (the
    /// session's end writes its rows after recording stopped, before the
    /// drain). Nothing is recorded by a thread being torn down.
    pub(crate) fn record_overhead(&self, what: Overhead, value: f64) {
        let ticks = self.registry.clock.ticks();
        self.with_thread(|t| t.push_metric(ticks, Section::Overhead, what.name(), value));
    }

    /// Records one row of `table`, stamped now in the clock's ticks (made
    /// nanoseconds at the next pairing pass, as stages are), if the table
    /// has room.
    #[inline]
    pub(crate) fn record_row(&self, table: Table, push: impl FnOnce(&mut ThreadData, u64)) {
        let ticks = self.registry.clock.ticks();
        if self.registry.admit(table) && self.with_thread(|t| push(t, ticks)).is_none() {
            // Not recorded (the thread is torn down): its row back.
            give_back(&self.registry.kept[table as usize], 1);
        }
    }

    /// Runs `f` on this thread's locked buffer, registering the thread on
    /// first use (`None` as [`Recorder::with_local`] says).
    #[inline]
    pub(crate) fn with_thread<R>(&self, f: impl FnOnce(&mut ThreadData) -> R) -> Option<R> {
        self.with_local(|local| f(&mut local.buffer.lock()))
    }

    /// Runs `f` on what this thread keeps for the recorder, registering
    /// the thread on first use; `None`, running nothing, on a thread whose
    /// thread-locals are being destroyed (a stage another thread-local's
    /// destructor records). `f` never records, so the thread-local is
    /// never borrowed twice.
    #[inline(always)]
    fn with_local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> Option<R> {
        // `try_with`, which inlines, reaches the thread-local directly.
        LOCALS
            .try_with(|locals| {
                let mut locals = locals.0.borrow_mut();
                let at = match locals.iter().position(|l| l.recorder == self.id) {
                    Some(at) => at,
                    None => self.register_thread(&mut locals),
                };
                f(&mut locals[at])
            })
            .ok()
    }

    #[cold]
    #[inline(never)]
    fn register_thread(&self, locals: &mut Vec<Local>) -> usize {
        let track = self.next_track.fetch_add(1, Ordering::Relaxed);
        let current = std::thread::current();
        let mut names = Names::with_limit(self.max_names);
        let thread_name = names.intern(
            &current
                .name()
                .map_or_else(|| format!("thread-{track}"), str::to_string),
        );
        // The profiler's own names first: a program's names, however many,
        // never fold them into `(other)`.
        let sections = Section::ALL.map(|section| names.intern(section.name()));
        for overhead in Overhead::ALL {
            names.intern(overhead.name());
        }
        let buffer = Arc::new(ThreadBuffer {
            data: Mutex::new(ThreadData {
                names,
                track,
                thread_name,
                sections,
                open: Vec::new(),
                calls: Vec::new(),
                paired: 0,
                full: VecDeque::new(),
                metadata: Vec::new(),
                too_deep: 0,
                records: Records::default(),
            }),
            events: EventLog::new(),
            id: NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed),
            registry: Arc::downgrade(&self.registry),
        });
        lock(&self.registry.threads).push(Arc::clone(&buffer));
        // Entries of profilers dropped since are of no use to this thread.
        locals.retain(|l| l.buffer.registry.strong_count() > 0);
        locals.push(Local {
            recorder: self.id,
            owner: owner_bits(buffer.id),
            buffer,
            open: Vec::new(),
            refused: Vec::new(),
            next_seq: 0,
            names: FxHashMap::default(),
        });
        locals.len() - 1
    }

    /// Counts `rows` dropped from `table` by a ring buffer.
    pub(crate) fn count_dropped(&self, table: Table, rows: u64) {
        if rows > 0 {
            self.registry.dropped[table as usize].fetch_add(rows, Ordering::Relaxed);
        }
    }

    /// Pairs every thread's stage events into rows, so that recording
    /// threads seldom have to: what the sampler thread does at each reading.
    pub(crate) fn pair_events(&self) {
        let generation = self.registry.sessions.current();
        for thread in self.registry.threads() {
            self.registry.pair(&thread, &mut thread.lock(), generation);
        }
    }

    /// The names of the stages open on every thread, innermost last.
    pub(crate) fn open_stage_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for thread in self.registry.threads() {
            let mut data = thread.lock();
            self.registry
                .pair(&thread, &mut data, self.registry.sessions.current());
            names.extend(
                data.open
                    .iter()
                    .map(|s| data.names.name(s.name).to_string()),
            );
        }
        names
    }

    /// Per table: rows held in the live threads' buffers now, and rows
    /// dropped so far in the session.
    pub(crate) fn row_counts(&self) -> Vec<(Table, u64, u64)> {
        let mut held = [0u64; TABLES];
        for thread in self.registry.threads() {
            let mut data = thread.lock();
            self.registry
                .pair(&thread, &mut data, self.registry.sessions.current());
            for &table in Table::ALL {
                held[table as usize] += data.records.len(table) as u64;
            }
        }
        Table::ALL
            .iter()
            .map(|&table| {
                let dropped = self.registry.dropped[table as usize].load(Ordering::Relaxed);
                (table, held[table as usize], dropped)
            })
            .collect()
    }

    /// Rows dropped per table since the last reset, and resets the budget.
    pub(crate) fn take_dropped(&self) -> Vec<(Table, u64)> {
        let registry = &self.registry;
        let out = Table::ALL
            .iter()
            .map(|&table| {
                let rows = registry.dropped[table as usize].swap(0, Ordering::Relaxed);
                (table, rows)
            })
            .filter(|&(_, rows)| rows > 0)
            .collect();
        for kept in &registry.kept {
            kept.store(0, Ordering::Relaxed);
        }
        out
    }
}

/// What one stage costs the thread that records it on this machine,
/// nanoseconds: the fastest of five rounds of 1,000 stages begun and ended
/// (by a `StageName`) on a private recorder, after a round of warm-up.
/// Pairing the events into rows is the sampler thread's work, in its CPU
/// time. Measured once per process; `None` on a thread being torn down.
pub(crate) fn stage_cost_ns() -> Option<f64> {
    static MEASURED: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    LOCALS.try_with(|_| ()).ok()?;
    Some(*MEASURED.get_or_init(|| {
        const STAGES: u32 = 1_000;
        let recorder = Recorder::new(&Config::default());
        recorder.begin_session();
        let name = StageName::from_static("rankscope calibration");
        let round = || {
            let started = std::time::Instant::now();
            for _ in 0..STAGES {
                let stage = recorder.begin_named_stage(&name, None);
                recorder.end_stage(stage);
            }
            let ns = started.elapsed().as_nanos() as f64 / f64::from(STAGES);
            recorder.pair_events();
            ns
        };
        round();
        (0..5).map(|_| round()).fold(f64::INFINITY, f64::min)
    }))
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // The chunks the live threads handed over, unpaired, are of no use
        // now: freed (their buffers go when the threads exit).
        for thread in self.registry.threads() {
            thread.lock().full.clear();
        }
        // Forget this thread's entry; other threads' entries go when they exit.
        let id = self.id;
        let _ = LOCALS.try_with(|locals| {
            if let Ok(mut locals) = locals.0.try_borrow_mut() {
                locals.retain(|local| local.recorder != id);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::CHUNK_EVENTS;
    use rankscope_common::table::StagesView;

    #[test]
    fn a_thread_that_exits_leaves_its_records_and_takes_its_buffer() {
        let recorder = Arc::new(Recorder::new(&Config::default()));
        recorder.begin_session();
        for _ in 0..200 {
            let recorder = Arc::clone(&recorder);
            std::thread::spawn(move || {
                let id = recorder.begin_stage("work", None);
                recorder.end_stage(id);
            })
            .join()
            .unwrap();
        }
        assert!(
            recorder.registry.threads().is_empty(),
            "every exited thread's buffer is freed"
        );
        let (builders, _) = recorder.drain();
        let tables = builders.finish().unwrap();
        assert_eq!(
            tables[&Table::Stages].num_rows(),
            200,
            "and its records kept"
        );
    }

    /// A stage that another thread-local's destructor records after the
    /// recorder's thread-local is gone (on Linux destructors run last
    /// registered first) is not recorded, and the thread exits without a
    /// panic (a panic in a thread-local's destructor aborts the process).
    #[test]
    fn a_stage_recorded_while_the_thread_is_torn_down_is_left_out() {
        /// Records at its drop; what the calls returned goes to the slot.
        struct StageAtExit(Arc<Recorder>, Arc<Mutex<Option<(u64, bool)>>>);
        impl Drop for StageAtExit {
            fn drop(&mut self) {
                let recorder = &self.0;
                let late = recorder.begin_stage("late", None);
                recorder.end_stage(late);
                let stopped = recorder.stop_stage("work");
                recorder.record_row(Table::Metrics, |t, ticks| {
                    t.push_metric(ticks, Section::Custom, "late", 1.0);
                });
                *lock(&self.1) = Some((late, stopped));
            }
        }
        thread_local! {
            static AT_EXIT: RefCell<Option<StageAtExit>> = const { RefCell::new(None) };
        }
        let recorder = Arc::new(Recorder::new(&Config::default()));
        recorder.begin_session();
        let outcome = Arc::new(Mutex::new(None));
        let at_exit = StageAtExit(Arc::clone(&recorder), Arc::clone(&outcome));
        let thread_recorder = Arc::clone(&recorder);
        std::thread::spawn(move || {
            let recorder = thread_recorder;
            // Registered before the recorder's thread-local: destroyed
            // after it.
            AT_EXIT.with(|slot| *slot.borrow_mut() = Some(at_exit));
            let work = recorder.begin_stage("work", None);
            recorder.end_stage(work);
        })
        .join()
        .unwrap();
        assert_eq!(*lock(&outcome), Some((NOT_OPENED, false)));
        assert_eq!(
            recorder.registry.kept[Table::Metrics as usize].load(Ordering::Relaxed),
            0,
            "the metric's row budget given back"
        );
        recorder.end_session();
        let tables = recorder.drain().0.finish().unwrap();
        let stages = StagesView::new(&tables[&Table::Stages]).unwrap();
        assert_eq!((stages.len, stages.name.get(0)), (1, "work"));
        assert!(!tables.contains_key(&Table::Metrics));
    }

    /// A row's clock ticks become session nanoseconds at the first pairing
    /// pass after it is recorded, and only then: later passes leave it be.
    #[test]
    fn rows_are_stamped_in_ticks_and_converted_once_at_a_pass() {
        let recorder = Recorder::new(&Config::default());
        // The session starts well after the clock's epoch: a time left in
        // monotonic nanoseconds since the epoch would show.
        std::thread::sleep(std::time::Duration::from_millis(5));
        recorder.begin_session();
        let metric = |i: usize| {
            recorder
                .with_thread(|t| t.records.metrics[i].ts_ns)
                .unwrap()
        };
        let record = |value| {
            recorder.record_row(Table::Metrics, |t, ticks| {
                t.push_metric(ticks, Section::Custom, "m", value)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(2));
        let lo = recorder.now_ns();
        record(1.0);
        let hi = recorder.now_ns();
        recorder.pair_events();
        let first = metric(0);
        // The line's jitter: tens of nanoseconds; 100 µs of room.
        assert!(
            lo.saturating_sub(100_000) <= first && first <= hi + 100_000,
            "{lo} <= {first} <= {hi} ns"
        );
        record(2.0);
        recorder.pair_events();
        recorder.pair_events();
        assert_eq!(metric(0), first, "converted once");
        let second = metric(1);
        assert!(first < second && second <= recorder.now_ns());
        // A flush takes the rows and keeps the memory: the next rows, fewer
        // than before, are converted all the same.
        let flushed = recorder.flush().finish().unwrap();
        let metrics = rankscope_common::table::MetricsView::new(&flushed[&Table::Metrics]).unwrap();
        assert_eq!(metrics.ts_ns, [first, second]);
        let lo = recorder.now_ns();
        record(3.0);
        let third_hi = recorder.now_ns();
        recorder.end_session();
        let (builders, _) = recorder.drain();
        let tables = builders.finish().unwrap();
        let metrics = rankscope_common::table::MetricsView::new(&tables[&Table::Metrics]).unwrap();
        let third = metrics.ts_ns[0];
        assert!(lo.saturating_sub(100_000) <= third && third <= third_hi + 100_000);
        assert_eq!(metrics.len, 1);
    }

    /// Many times the log's size of nested stages, read while they are
    /// recorded and after: every stage once, nested as it ran, in the
    /// order of its ends, with its call index.
    #[test]
    fn stages_past_many_full_logs_pair_into_nested_rows() {
        let recorder = Recorder::new(&Config::default());
        recorder.begin_session();
        let outer_calls = CHUNK_EVENTS * 3 / 4 + 7;
        for i in 0..outer_calls {
            let outer = recorder.begin_stage("outer", Some(format!("{{\"i\":{i}}}")));
            let inner = recorder.begin_stage("inner", None);
            recorder.end_stage(inner);
            if i % 1000 == 0 {
                // A reader in the middle: the sampler's live view.
                assert_eq!(recorder.open_stage_names(), ["outer"]);
            }
            recorder.end_stage(outer);
        }
        recorder.end_session();
        let (builders, overflow) = recorder.drain();
        assert_eq!(overflow.stages_too_deep, 0);
        let tables = builders.finish().unwrap();
        let stages = StagesView::new(&tables[&Table::Stages]).unwrap();
        assert_eq!(stages.len, 2 * outer_calls);
        for i in 0..outer_calls {
            let (inner, outer) = (2 * i, 2 * i + 1);
            assert_eq!(stages.name.get(inner), "inner");
            assert_eq!(stages.name.get(outer), "outer");
            assert_eq!(stages.parent_id.get(inner), Some(stages.stage_id[outer]));
            assert_eq!((stages.depth[inner], stages.depth[outer]), (1, 0));
            assert_eq!(stages.call_index[outer], i as u32);
            assert_eq!(
                stages.metadata.get(outer),
                Some(format!("{{\"i\":{i}}}").as_str())
            );
            assert!(stages.start_ns[outer] <= stages.start_ns[inner]);
            assert!(stages.end_ns[inner] <= stages.end_ns[outer]);
        }
    }

    /// A thread hands its full chunks over unpaired while the recorder's
    /// budget of chunks lasts, and pairs its own past it; a reader pairs
    /// what was handed over, in order; paired chunks serve any thread.
    #[test]
    fn full_chunks_wait_for_a_reader_within_the_budget_of_chunks() {
        // S stages fill a chunk; the row budget holds 4 S stages, and 4
        // chunks besides the one each thread writes.
        const S: usize = CHUNK_EVENTS / 2;
        let recorder = Arc::new(Recorder::new(&Config {
            max_data_points: 4 * S,
            ..Config::default()
        }));
        assert_eq!(recorder.registry.max_chunks, 4);
        let stages = |recorder: &Recorder, count: usize| {
            for _ in 0..count {
                let stage = recorder.begin_stage("s", None);
                recorder.end_stage(stage);
            }
        };
        // (chunks handed over, stage rows) of the one live thread, chunks
        // besides the threads' own, spare chunks.
        let state = |recorder: &Recorder| {
            let thread = recorder.registry.threads()[0].clone();
            let data = thread.lock();
            (
                data.full.len(),
                data.records.stages.len(),
                recorder.registry.chunks.load(Ordering::Relaxed),
                lock(&recorder.registry.spare_chunks).len(),
            )
        };
        recorder.begin_session();
        let thread = {
            let recorder = Arc::clone(&recorder);
            std::thread::spawn(move || {
                // Three chunks' worth: two handed over, the third full and
                // still the thread's; nothing paired on the thread.
                stages(&recorder, 3 * S);
                assert_eq!(state(&recorder), (2, 0, 2, 0));
                // A reader (the sampler's pass) pairs them, oldest first.
                recorder.pair_events();
                assert_eq!(state(&recorder), (0, 3 * S, 2, 2));
                // Four more: the spares and two new chunks, the budget.
                stages(&recorder, 4 * S);
                assert_eq!(state(&recorder), (4, 3 * S, 4, 0));
                // At the next, the thread pairs its own: what the row
                // budget leaves room for is kept, the rest counted.
                stages(&recorder, 1);
                assert_eq!(state(&recorder), (0, 4 * S, 4, 4));
            })
        };
        thread.join().unwrap();
        // Another thread writes in the chunks the first one used.
        let thread = {
            let recorder = Arc::clone(&recorder);
            std::thread::spawn(move || {
                stages(&recorder, 3 * S);
                assert_eq!(state(&recorder), (2, 0, 4, 2));
            })
        };
        thread.join().unwrap();
        recorder.end_session();
        let tables = recorder.drain().0.finish().unwrap();
        let rows = StagesView::new(&tables[&Table::Stages]).unwrap();
        assert_eq!(rows.len, 4 * S);
        assert!(
            (1..rows.len).all(|i| rows.start_ns[i - 1] <= rows.start_ns[i]),
            "the first thread's first stages, in the order they ran"
        );
        assert_eq!(
            recorder.take_dropped(),
            vec![(Table::Stages, (6 * S + 1) as u64)]
        );
    }

    /// A stage refused as too deep, ended by name or by its guard, never
    /// ends an open stage of the same name.
    #[test]
    fn ending_a_stage_refused_as_too_deep_leaves_the_open_ones_alone() {
        let recorder = Recorder::new(&Config {
            max_open_stages: 2,
            ..Config::default()
        });
        recorder.begin_session();
        let name = StageName::new("recurse");
        let outer = recorder.begin_named_stage(&name, None);
        let inner = recorder.begin_named_stage(&name, None);
        for _ in 0..3 {
            // Refused, then ended by name: the refused call ends.
            assert_ne!(recorder.begin_named_stage(&name, None) & REFUSED, 0);
            assert!(recorder.stop_named_stage(&name));
        }
        let refused = recorder.begin_named_stage(&name, None);
        recorder.end_stage(refused);
        assert_eq!(recorder.open_stage_names(), ["recurse", "recurse"]);
        recorder.end_stage(inner);
        recorder.end_stage(outer);
        recorder.end_session();
        let (builders, overflow) = recorder.drain();
        assert_eq!(overflow.stages_too_deep, 4);
        let tables = builders.finish().unwrap();
        let stages = StagesView::new(&tables[&Table::Stages]).unwrap();
        assert_eq!(stages.len, 2);
        assert_eq!((stages.depth[0], stages.depth[1]), (1, 0));
    }

    /// An id ends a stage of the thread that began it alone: another
    /// thread's id, a made-up number (`OpenStageId::from_raw(0)`) or a
    /// stage's sequence number alone ends nothing here.
    #[test]
    fn a_stage_id_ends_nothing_on_another_thread() {
        let recorder = Arc::new(Recorder::new(&Config::default()));
        recorder.begin_session();
        let here = recorder.begin_stage("here", None);
        let (id_sender, id) = std::sync::mpsc::channel();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let other = Arc::clone(&recorder);
        let thread = std::thread::spawn(move || {
            let there = other.begin_stage("there", None);
            id_sender.send(there).unwrap();
            wait.recv().unwrap();
            other.end_stage(there);
        });
        let there = id.recv().unwrap();
        assert_eq!(there & u64::from(u32::MAX), here & u64::from(u32::MAX));
        for foreign in [there, 0, 3, here & u64::from(u32::MAX)] {
            recorder.end_stage(foreign);
        }
        let mut open = recorder.open_stage_names();
        open.sort();
        assert_eq!(open, ["here", "there"]);
        done.send(()).unwrap();
        thread.join().unwrap();
        recorder.end_stage(here);
        assert!(recorder.open_stage_names().is_empty());
    }

    /// Refused calls of more names than there is room for runs still end
    /// before any open stage: the innermost run takes any name.
    #[test]
    fn refused_calls_past_the_room_for_runs_still_end_first() {
        let recorder = Recorder::new(&Config {
            max_open_stages: 1,
            ..Config::default()
        });
        recorder.begin_session();
        let (a, b) = (StageName::new("a"), StageName::new("b"));
        let outer = recorder.begin_named_stage(&a, None);
        assert_ne!(recorder.begin_named_stage(&b, None) & REFUSED, 0);
        assert_ne!(recorder.begin_named_stage(&a, None) & REFUSED, 0);
        assert!(recorder.stop_named_stage(&a), "the refused `a`");
        assert!(recorder.stop_named_stage(&b), "the refused `b`");
        assert_eq!(
            recorder.open_stage_names(),
            ["a"],
            "the open `a` is untouched"
        );
        recorder.end_stage(outer);
        assert!(recorder.open_stage_names().is_empty());
    }

    /// Once a session is drained, stages that end belong to no session:
    /// nothing is held for it, and nothing reaches the next.
    #[test]
    fn stages_ending_after_the_drain_are_in_no_session() {
        let recorder = Recorder::new(&Config::default());
        recorder.begin_session();
        let late = recorder.begin_stage("late", None);
        recorder.end_session();
        let _ = recorder.drain();
        recorder.end_stage(late);
        let held = |r: &Recorder| r.row_counts()[Table::Stages as usize].1;
        assert_eq!(held(&recorder), 0);
        recorder.begin_session();
        recorder.end_session();
        assert!(recorder.drain().0.finish().unwrap().is_empty());
    }

    /// Threads pairing at once take the row budget a chunk at a time, and
    /// it still comes out exact: what fits is kept, the rest counted.
    #[test]
    fn the_row_budget_is_exact_with_threads_pairing_at_once() {
        let recorder = Arc::new(Recorder::new(&Config {
            max_data_points: 2_500,
            ..Config::default()
        }));
        recorder.begin_session();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let recorder = Arc::clone(&recorder);
                std::thread::spawn(move || {
                    let name = StageName::new("work");
                    for _ in 0..CHUNK_EVENTS {
                        let stage = recorder.begin_named_stage(&name, None);
                        recorder.end_stage(stage);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        recorder.end_session();
        let (builders, _) = recorder.drain();
        let tables = builders.finish().unwrap();
        assert_eq!(tables[&Table::Stages].num_rows(), 2_500);
        let dropped = recorder.take_dropped();
        assert_eq!(
            dropped,
            vec![(Table::Stages, (4 * CHUNK_EVENTS - 2_500) as u64)]
        );
    }

    /// A stage begun in one session and ended in the next is in neither.
    #[test]
    fn a_stage_belongs_to_the_session_it_began_and_ended_in() {
        let recorder = Recorder::new(&Config::default());
        recorder.begin_session();
        let spanning = recorder.begin_stage("spanning", None);
        let kept = recorder.begin_stage("kept", None);
        recorder.end_stage(kept);
        recorder.end_session();
        let names = |builders: Builders| -> Vec<String> {
            let tables = builders.finish().unwrap();
            match tables.get(&Table::Stages) {
                Some(batch) => {
                    let stages = StagesView::new(batch).unwrap();
                    (0..stages.len)
                        .map(|i| stages.name.get(i).to_string())
                        .collect()
                }
                None => Vec::new(),
            }
        };
        assert_eq!(names(recorder.drain().0), ["kept"]);
        recorder.begin_session();
        recorder.end_stage(spanning);
        recorder.end_session();
        assert!(names(recorder.drain().0).is_empty());
    }
}
