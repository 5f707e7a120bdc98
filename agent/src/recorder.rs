//! Per-thread recording: each thread that records gets its own buffer, found
//! through a thread-local, so the hot path touches only memory its thread
//! owns. The buffer's mutex is taken by its own thread on every call and by
//! the session's finish once, so it is never contended while a job runs.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rankscope_common::table::{BlockRow, DiffusionStepRow, GpuSampleRow, HostSampleRow, Table};
use rustc_hash::FxHashMap;

/// Source of profiler ids: thread-local buffers are keyed by them.
static NEXT_PROFILER_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's buffers, one per live profiler it has recorded into.
    static BUFFERS: RefCell<Vec<(u64, Arc<ThreadBuffer>)>> = const { RefCell::new(Vec::new()) };
}

/// Interns strings (stage, metric, event names) into small ids, per thread.
#[derive(Default)]
pub(crate) struct Interner {
    ids: FxHashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
}

impl Interner {
    /// The id of `name`; allocates only the first time a name is seen.
    pub(crate) fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    /// The name of `id`.
    pub(crate) fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// A stage that began and has not ended yet.
pub(crate) struct OpenStage {
    pub(crate) stage_id: u64,
    pub(crate) name: u32,
    pub(crate) call_index: u32,
    pub(crate) start_ns: u64,
    pub(crate) metadata: Option<String>,
    pub(crate) generation: u64,
}

/// A completed stage, compact: names are interned ids.
pub(crate) struct StageRecord {
    pub(crate) name: u32,
    pub(crate) stage_id: u64,
    pub(crate) parent_id: Option<u64>,
    pub(crate) depth: u32,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) call_index: u32,
    pub(crate) metadata: Option<String>,
}

/// A metric reading.
pub(crate) struct MetricRecord {
    pub(crate) ts_ns: u64,
    pub(crate) section: u32,
    pub(crate) name: u32,
    pub(crate) value: f64,
}

/// An event.
pub(crate) struct EventRecord {
    pub(crate) ts_ns: u64,
    pub(crate) name: u32,
    pub(crate) payload: Option<String>,
}

/// A memory snapshot.
pub(crate) struct SnapshotRecord {
    pub(crate) ts_ns: u64,
    pub(crate) label: u32,
    pub(crate) source: &'static str,
    pub(crate) reading: crate::MemoryReading,
}

/// What one thread recorded in the current session.
#[derive(Default)]
pub(crate) struct ThreadData {
    pub(crate) names: Interner,
    pub(crate) open: Vec<OpenStage>,
    /// Calls so far per stage name id, for `call_index`.
    pub(crate) calls: Vec<u32>,
    pub(crate) next_stage: u64,
    pub(crate) stages: Vec<StageRecord>,
    pub(crate) gpu_samples: VecDeque<GpuSampleRow>,
    pub(crate) host_samples: VecDeque<HostSampleRow>,
    pub(crate) diffusion_steps: Vec<DiffusionStepRow>,
    pub(crate) blocks: Vec<BlockRow>,
    pub(crate) metrics: Vec<MetricRecord>,
    pub(crate) events: Vec<EventRecord>,
    pub(crate) snapshots: Vec<SnapshotRecord>,
    pub(crate) parameters: Vec<(u32, u64)>,
}

impl ThreadData {
    /// The next call index of stage name `name`.
    pub(crate) fn next_call(&mut self, name: u32) -> u32 {
        let slot = name as usize;
        if self.calls.len() <= slot {
            self.calls.resize(slot + 1, 0);
        }
        let call = self.calls[slot];
        self.calls[slot] += 1;
        call
    }

    /// Forgets the session's rows and call counts; names stay interned.
    pub(crate) fn clear_rows(&mut self) {
        self.calls.clear();
        self.stages.clear();
        self.gpu_samples.clear();
        self.host_samples.clear();
        self.diffusion_steps.clear();
        self.blocks.clear();
        self.metrics.clear();
        self.events.clear();
        self.snapshots.clear();
        self.parameters.clear();
    }
}

/// One thread's buffer, shared by the thread and its profiler.
pub(crate) struct ThreadBuffer {
    /// The thread's track number within the rank.
    pub(crate) track: u32,
    /// The thread's name.
    pub(crate) thread_name: String,
    pub(crate) data: Mutex<ThreadData>,
}

impl ThreadBuffer {
    /// Locks the data; a panic on another holder does not poison recording.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ThreadData> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Every thread buffer of one profiler, and the row budget per table.
pub(crate) struct Recorder {
    pub(crate) id: u64,
    threads: Mutex<Vec<Arc<ThreadBuffer>>>,
    next_track: AtomicU32,
    max_rows: u64,
    kept: [AtomicU64; TABLES],
    dropped: [AtomicU64; TABLES],
}

const TABLES: usize = Table::ALL.len();

/// The table's counter: `Table::ALL` lists the variants in declaration order.
#[inline(always)]
fn slot(table: Table) -> usize {
    table as usize
}

impl Recorder {
    pub(crate) fn new(max_rows: usize) -> Self {
        Recorder {
            id: NEXT_PROFILER_ID.fetch_add(1, Ordering::Relaxed),
            threads: Mutex::new(Vec::new()),
            next_track: AtomicU32::new(0),
            max_rows: max_rows as u64,
            kept: Default::default(),
            dropped: Default::default(),
        }
    }

    /// Runs `f` on this thread's buffer, registering the thread on first use.
    #[inline]
    pub(crate) fn with_thread<R>(&self, f: impl FnOnce(&mut ThreadData) -> R) -> R {
        BUFFERS.with(|buffers| {
            // `f` never records, so the borrow is never taken twice.
            if let Some((_, buffer)) = buffers.borrow().iter().find(|(id, _)| *id == self.id) {
                return f(&mut buffer.lock());
            }
            let buffer = self.register_thread(&mut buffers.borrow_mut());
            let mut data = buffer.lock();
            f(&mut data)
        })
    }

    #[cold]
    #[inline(never)]
    fn register_thread(&self, buffers: &mut Vec<(u64, Arc<ThreadBuffer>)>) -> Arc<ThreadBuffer> {
        let track = self.next_track.fetch_add(1, Ordering::Relaxed);
        let current = std::thread::current();
        let buffer = Arc::new(ThreadBuffer {
            track,
            thread_name: current
                .name()
                .map_or_else(|| format!("thread-{track}"), str::to_string),
            data: Mutex::new(ThreadData {
                // Stage ids are unique within the rank: the track in the high bits.
                next_stage: u64::from(track) << 40,
                ..ThreadData::default()
            }),
        });
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&buffer));
        buffers.push((self.id, Arc::clone(&buffer)));
        buffer
    }

    /// Takes one row of `table`'s budget: `false` (and the drop counted) when full.
    #[inline]
    pub(crate) fn admit(&self, table: Table) -> bool {
        let slot = slot(table);
        if self.kept[slot].fetch_add(1, Ordering::Relaxed) < self.max_rows {
            true
        } else {
            self.dropped[slot].fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Counts `rows` dropped from `table` by a ring buffer.
    pub(crate) fn count_dropped(&self, table: Table, rows: u64) {
        if rows > 0 {
            self.dropped[slot(table)].fetch_add(rows, Ordering::Relaxed);
        }
    }

    /// The names of the stages open on every thread, innermost last.
    pub(crate) fn open_stage_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for thread in self.threads() {
            let data = thread.lock();
            names.extend(
                data.open
                    .iter()
                    .map(|s| data.names.name(s.name).to_string()),
            );
        }
        names
    }

    /// Every thread's buffer.
    pub(crate) fn threads(&self) -> Vec<Arc<ThreadBuffer>> {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Rows dropped per table since the last reset, and resets the budget.
    pub(crate) fn take_dropped(&self) -> Vec<(Table, u64)> {
        let out = Table::ALL
            .iter()
            .map(|&table| (table, self.dropped[slot(table)].swap(0, Ordering::Relaxed)))
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
            if let Ok(mut buffers) = buffers.try_borrow_mut() {
                buffers.retain(|(owner, _)| *owner != id);
            }
        });
    }
}
