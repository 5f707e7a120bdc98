//! The recording of one rank: per-thread buffers, the session clock, the row
//! budget and whether a session is recording. The hot path (stage begin and
//! end, record calls) and the sampler thread write here; the session reads
//! it out at finish.
//!
//! Each thread that records gets its own buffer, found through a
//! thread-local, so the hot path touches only memory its thread owns. The
//! buffer's mutex is taken by its own thread on every call; other threads
//! take it only at session boundaries (start, finish, a thread's exit) and
//! when the simulated GPUs read which stages are open, so it is not
//! contended while a job runs. When a
//! thread exits, its records move into the recorder's batch builders and its
//! buffer is freed, so short-lived threads cost no memory once gone.
//!
//! Memory is bounded by configuration: rows by `max_data_points` per table,
//! distinct names by `max_names` per thread (more fold into `(other)`), open
//! stages by `max_open_stages` per thread.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use rankscope_common::names::{NameId, Names};
use rankscope_common::payload::Overflow;
use rankscope_common::table::{Builders, Records, StageRecord, Table};
use rankscope_common::Config;

use crate::stage::StageName;
use crate::ticks::Clock;

use crate::sync::lock;

/// Source of recorder ids: thread-local buffers are keyed by them.
static NEXT_RECORDER_ID: AtomicU64 = AtomicU64::new(1);

/// Source of thread-buffer ids, unique across recorders: a [`StageName`]
/// remembers its name id per buffer by it.
static NEXT_BUFFER_ID: AtomicU32 = AtomicU32::new(0);

/// This thread's buffers, one per live recorder it has recorded into; when
/// the thread exits, each buffer is retired into its recorder.
struct ThreadBuffers(RefCell<Vec<(u64, Arc<ThreadBuffer>)>>);

impl Drop for ThreadBuffers {
    fn drop(&mut self) {
        for (_, buffer) in self.0.get_mut().drain(..) {
            if let Some(registry) = buffer.registry.upgrade() {
                registry.retire(&buffer);
            }
        }
    }
}

thread_local! {
    static BUFFERS: ThreadBuffers = const { ThreadBuffers(RefCell::new(Vec::new())) };
}

/// A stage that began and has not ended yet.
pub(crate) struct OpenStage {
    stage_id: u64,
    name: NameId,
    call_index: u32,
    /// When it began, in the stage clock's ticks.
    start_ticks: u64,
    metadata: Option<String>,
    generation: u64,
}

/// What one thread recorded.
pub(crate) struct ThreadData {
    /// Names interned by this thread (stage, metric, event names).
    pub(crate) names: Names,
    /// The thread's track number within the rank.
    track: u32,
    /// This buffer's id among every recorder's buffers.
    buffer_id: u32,
    /// The thread's name, interned.
    thread_name: NameId,
    /// Stages begun and not ended, innermost last.
    open: Vec<OpenStage>,
    /// Calls so far per stage name id, for `call_index`.
    calls: Vec<u32>,
    next_stage: u64,
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

    /// This buffer's id among every recorder's buffers.
    #[inline(always)]
    pub(crate) fn buffer_id(&self) -> u32 {
        self.buffer_id
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
    /// Where the buffer goes when its thread exits.
    registry: Weak<Registry>,
}

/// Every live thread's buffer of one recorder, and what exited threads
/// recorded in the running session.
struct Registry {
    threads: Mutex<Vec<Arc<ThreadBuffer>>>,
    retired: Mutex<Retired>,
    /// The session clock, and the stage clock's ticks.
    clock: Clock,
}

/// The records of threads that exited during the session, already in
/// batch builders (their names resolved), and what they overflowed.
#[derive(Default)]
struct Retired {
    builders: Builders,
    overflow: Overflow,
}

impl Registry {
    fn new() -> Self {
        Registry {
            threads: Mutex::default(),
            retired: Mutex::default(),
            clock: Clock::new(),
        }
    }

    fn threads(&self) -> Vec<Arc<ThreadBuffer>> {
        lock(&self.threads).clone()
    }

    /// Appends a thread's records to `builders`, its stages' ticks made
    /// nanoseconds; the records stay, for the caller to clear.
    fn append_rows(&self, builders: &mut Builders, data: &mut ThreadData) {
        let scale = self.clock.scale();
        for stage in &mut data.records.stages {
            stage.start_ns = scale.session_ns(stage.start_ns);
            stage.end_ns = scale.session_ns(stage.end_ns);
        }
        builders.append(&data.records, &data.names);
    }

    /// Moves an exited thread's records into the builders and forgets its buffer.
    fn retire(&self, buffer: &Arc<ThreadBuffer>) {
        {
            // The retired records first, then the buffer: the order `drain` takes.
            let mut retired = lock(&self.retired);
            let mut data = buffer.lock();
            self.append_rows(&mut retired.builders, &mut data);
            add_overflow(&mut retired.overflow, &mut data);
            data.clear_rows();
        }
        lock(&self.threads).retain(|b| !Arc::ptr_eq(b, buffer));
    }
}

/// Adds what `data` overflowed to `total`, and resets its counts.
fn add_overflow(total: &mut Overflow, data: &mut ThreadData) {
    total.names_folded += data.names.take_folded();
    total.stages_too_deep += std::mem::take(&mut data.too_deep);
}

impl ThreadBuffer {
    /// Locks the data; a panic on another holder does not poison recording.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ThreadData> {
        lock(&self.data)
    }
}

/// The recording of one rank.
pub(crate) struct Recorder {
    id: u64,
    registry: Arc<Registry>,
    next_track: AtomicU32,
    /// Rows kept per table.
    pub(crate) max_rows: usize,
    max_names: usize,
    max_open_stages: usize,
    kept: [AtomicU64; TABLES],
    dropped: [AtomicU64; TABLES],
    /// Generation of the running session; 0 when none records.
    generation: AtomicU64,
    last_generation: AtomicU64,
}

const TABLES: usize = Table::ALL.len();

/// The id of a stage begun past the open-stage limit: no stage has it.
const NOT_OPENED: u64 = u64::MAX;

impl Recorder {
    /// A recorder with the limits of `config`.
    pub(crate) fn new(config: &Config) -> Self {
        Recorder {
            id: NEXT_RECORDER_ID.fetch_add(1, Ordering::Relaxed),
            registry: Arc::new(Registry::new()),
            next_track: AtomicU32::new(0),
            max_rows: config.max_data_points,
            max_names: config.max_names,
            max_open_stages: config.max_open_stages,
            kept: Default::default(),
            dropped: Default::default(),
            generation: AtomicU64::new(0),
            last_generation: AtomicU64::new(0),
        }
    }

    /// The generation of the session recording now, if one is.
    #[inline(always)]
    pub(crate) fn recording(&self) -> Option<u64> {
        let generation = self.generation.load(Ordering::Relaxed);
        (generation != 0).then_some(generation)
    }

    /// Nanoseconds since the session started, on the monotonic clock.
    #[inline(always)]
    pub(crate) fn now_ns(&self) -> u64 {
        self.registry.clock.now_ns()
    }

    /// Forgets rows recorded outside a session, starts the session clock and
    /// starts recording.
    pub(crate) fn begin_session(&self) {
        for thread in self.registry.threads() {
            thread.lock().clear_rows();
        }
        *lock(&self.registry.retired) = Retired::default();
        self.take_dropped();
        self.registry.clock.start_session();
        let generation = self.last_generation.fetch_add(1, Ordering::Relaxed) + 1;
        self.generation.store(generation, Ordering::Release);
    }

    /// Stops recording; returns the session's length in nanoseconds.
    pub(crate) fn end_session(&self) -> u64 {
        self.generation.store(0, Ordering::Release);
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
            self.registry.append_rows(&mut retired.builders, &mut data);
            add_overflow(&mut retired.overflow, &mut data);
            data.clear_rows();
        }
        let Retired { builders, overflow } = std::mem::take(&mut *retired);
        (builders, overflow)
    }

    /// The records since the last call (or the session's start), in batch
    /// builders, for a periodic flush; the session goes on recording (call
    /// counts, open stages and overflow counts stay).
    pub(crate) fn flush(&self) -> Builders {
        let mut retired = lock(&self.registry.retired);
        for thread in self.registry.threads() {
            let mut data = thread.lock();
            self.registry.append_rows(&mut retired.builders, &mut data);
            data.records = Records::default();
        }
        std::mem::take(&mut retired.builders)
    }

    /// Begins a stage on this thread; returns its id.
    #[inline]
    pub(crate) fn begin_stage(&self, generation: u64, name: &str, metadata: Option<String>) -> u64 {
        self.begin_stage_as(generation, |t| t.names.intern(name), metadata)
    }

    /// Begins a stage named by a [`StageName`], whose id this thread
    /// interned once.
    #[inline]
    pub(crate) fn begin_named_stage(
        &self,
        generation: u64,
        name: &StageName,
        metadata: Option<String>,
    ) -> u64 {
        self.begin_stage_as(generation, |t| name.id_in(t), metadata)
    }

    #[inline(always)]
    fn begin_stage_as(
        &self,
        generation: u64,
        name: impl FnOnce(&mut ThreadData) -> NameId,
        metadata: Option<String>,
    ) -> u64 {
        self.with_thread(|t| {
            if t.open.len() >= self.max_open_stages {
                t.too_deep += 1;
                return NOT_OPENED;
            }
            let name = name(t);
            let stage_id = t.next_stage;
            t.next_stage += 1;
            let call_index = t.next_call(name);
            t.open.push(OpenStage {
                stage_id,
                name,
                call_index,
                metadata,
                generation,
                start_ticks: self.registry.clock.ticks(),
            });
            stage_id
        })
    }

    /// Ends the stage `stage_id` of this thread.
    #[inline]
    pub(crate) fn end_stage(&self, stage_id: u64) {
        let end_ticks = self.registry.clock.ticks();
        self.with_thread(|t| {
            if let Some(pos) = t.open.iter().rposition(|s| s.stage_id == stage_id) {
                self.close_open_stage(t, pos, end_ticks);
            }
        });
    }

    /// Ends the innermost open stage called `name` on this thread; `false`
    /// if there is none.
    pub(crate) fn stop_stage(&self, name: &str) -> bool {
        // A lookup, not interning: a name never started costs nothing.
        self.stop_stage_as(|t| t.names.get(name))
    }

    /// Ends the innermost open stage named by `name` on this thread;
    /// `false` if there is none.
    #[inline]
    pub(crate) fn stop_named_stage(&self, name: &StageName) -> bool {
        self.stop_stage_as(|t| Some(name.id_in(t)))
    }

    #[inline(always)]
    fn stop_stage_as(&self, name: impl FnOnce(&mut ThreadData) -> Option<NameId>) -> bool {
        let end_ticks = self.registry.clock.ticks();
        self.with_thread(|t| {
            let Some(name) = name(t) else {
                return false;
            };
            match t.open.iter().rposition(|s| s.name == name) {
                Some(pos) => {
                    self.close_open_stage(t, pos, end_ticks);
                    true
                }
                None => false,
            }
        })
    }

    /// Removes open stage `pos` from the thread's stack and keeps it as a
    /// completed stage, if it belongs to the running session and fits.
    fn close_open_stage(&self, t: &mut ThreadData, pos: usize, end_ticks: u64) {
        let open = t.open.remove(pos);
        if open.generation != self.generation.load(Ordering::Relaxed) || !self.admit(Table::Stages)
        {
            return;
        }
        let parent_id = pos.checked_sub(1).map(|p| t.open[p].stage_id);
        t.records.stages.push_back(StageRecord {
            name: open.name,
            thread: t.track,
            thread_name: t.thread_name,
            stage_id: open.stage_id,
            parent_id,
            depth: pos as u32,
            // Ticks until the record leaves the buffer (`append_rows`).
            start_ns: open.start_ticks,
            end_ns: end_ticks,
            call_index: open.call_index,
            metadata: open.metadata,
        });
    }

    /// Records one row of `table`, stamped now, if the table has room.
    #[inline]
    pub(crate) fn record_row(&self, table: Table, push: impl FnOnce(&mut ThreadData, u64)) {
        let ts_ns = self.now_ns();
        if self.admit(table) {
            self.with_thread(|t| push(t, ts_ns));
        }
    }

    /// Runs `f` on this thread's buffer, registering the thread on first use.
    #[inline]
    pub(crate) fn with_thread<R>(&self, f: impl FnOnce(&mut ThreadData) -> R) -> R {
        BUFFERS.with(|buffers| {
            // `f` never records, so the borrow is never taken twice.
            if let Some((_, buffer)) = buffers.0.borrow().iter().find(|(id, _)| *id == self.id) {
                return f(&mut buffer.lock());
            }
            let buffer = self.register_thread(&mut buffers.0.borrow_mut());
            let mut data = buffer.lock();
            f(&mut data)
        })
    }

    #[cold]
    #[inline(never)]
    fn register_thread(&self, buffers: &mut Vec<(u64, Arc<ThreadBuffer>)>) -> Arc<ThreadBuffer> {
        let track = self.next_track.fetch_add(1, Ordering::Relaxed);
        let current = std::thread::current();
        let mut names = Names::with_limit(self.max_names);
        let thread_name = names.intern(
            &current
                .name()
                .map_or_else(|| format!("thread-{track}"), str::to_string),
        );
        let buffer = Arc::new(ThreadBuffer {
            data: Mutex::new(ThreadData {
                names,
                track,
                buffer_id: NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed),
                thread_name,
                open: Vec::new(),
                calls: Vec::new(),
                // Stage ids are unique within the rank: the track in the high bits.
                next_stage: u64::from(track) << 40,
                too_deep: 0,
                records: Records::default(),
            }),
            registry: Arc::downgrade(&self.registry),
        });
        lock(&self.registry.threads).push(Arc::clone(&buffer));
        // Entries of profilers dropped since are of no use to this thread.
        buffers.retain(|(_, b)| b.registry.strong_count() > 0);
        buffers.push((self.id, Arc::clone(&buffer)));
        buffer
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

    /// Counts `rows` dropped from `table` by a ring buffer.
    pub(crate) fn count_dropped(&self, table: Table, rows: u64) {
        if rows > 0 {
            self.dropped[table as usize].fetch_add(rows, Ordering::Relaxed);
        }
    }

    /// The names of the stages open on every thread, innermost last.
    pub(crate) fn open_stage_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for thread in self.registry.threads() {
            let data = thread.lock();
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
            let data = thread.lock();
            for &table in Table::ALL {
                held[table as usize] += data.records.len(table) as u64;
            }
        }
        Table::ALL
            .iter()
            .map(|&table| {
                let dropped = self.dropped[table as usize].load(Ordering::Relaxed);
                (table, held[table as usize], dropped)
            })
            .collect()
    }

    /// Rows dropped per table since the last reset, and resets the budget.
    pub(crate) fn take_dropped(&self) -> Vec<(Table, u64)> {
        let out = Table::ALL
            .iter()
            .map(|&table| {
                (
                    table,
                    self.dropped[table as usize].swap(0, Ordering::Relaxed),
                )
            })
            .filter(|&(_, rows)| rows > 0)
            .collect();
        for kept in &self.kept {
            kept.store(0, Ordering::Relaxed);
        }
        out
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Forget this thread's entry; other threads' entries go when they exit.
        let id = self.id;
        let _ = BUFFERS.try_with(|buffers| {
            if let Ok(mut buffers) = buffers.0.try_borrow_mut() {
                buffers.retain(|(owner, _)| *owner != id);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_exits_leaves_its_records_and_takes_its_buffer() {
        let recorder = Arc::new(Recorder::new(&Config::default()));
        recorder.begin_session();
        for _ in 0..200 {
            let recorder = Arc::clone(&recorder);
            std::thread::spawn(move || {
                let generation = recorder.recording().unwrap();
                let id = recorder.begin_stage(generation, "work", None);
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
}
