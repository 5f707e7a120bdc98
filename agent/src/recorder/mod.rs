//! The recording of one rank: per-thread buffers, the session clock, the row
//! budget and whether a session is recording. The hot path (stage begin and
//! end, record calls) and the sampler thread write here; the session reads
//! it out at finish.
//!
//! Each thread that records gets its own buffer, found through a
//! thread-local, so the hot path touches only memory its thread owns.
//! Stages take no lock at all: a begin or an end is one event in the
//! thread's event log ((`events`)), and the thread keeps the stages
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
//!
//! The parts: `hot_path` (a thread's stage and record calls, through its
//! thread-local), `thread` (a thread's buffer), `pairing` (events made
//! stage rows, and the pool of chunks), `budget` (rows kept per table),
//! `generations` (which session a stage belongs to); this module holds the
//! recorder and what sessions call on it.

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rankscope_common::payload::Overflow;
use rankscope_common::table::{Builders, Table};
use rankscope_common::Config;

use crate::lock_order::{Level, OrderedMutex};
use crate::stage_name::StageName;
use crate::ticks::Clock;

mod budget;
mod calls;
mod events;
mod generations;
mod hot_path;
mod pairing;
mod thread;

use budget::RowBudget;
pub use calls::FunctionSite;
pub(crate) use calls::FunctionTotals;
use generations::Generations;
pub(crate) use hot_path::Ended;
use hot_path::LOCALS;
use pairing::{add_overflow, Registry, Retired};
pub(crate) use thread::Section;

/// Events a chunk of a thread's event log holds: 128 KiB.
pub(crate) const CHUNK_EVENTS: usize = 8192;

/// Source of recorder ids: thread-locals are keyed by them.
static NEXT_RECORDER_ID: AtomicU64 = AtomicU64::new(1);

/// The recording of one rank.
pub(crate) struct Recorder {
    id: u64,
    registry: Arc<Registry>,
    next_track: AtomicU32,
    max_names: usize,
    max_open_stages: usize,
    last_generation: AtomicU64,
    /// The stage whose end is a step (`step_stage`).
    step_stage: Option<Box<str>>,
    /// Traced calls nested deeper on a thread are not recorded
    /// (`python_tracing_max_depth`).
    max_call_depth: usize,
    /// Traced calls shorter are counted but kept as no row
    /// (`python_tracing_min_duration_us`), ns.
    min_call_ns: u64,
    /// `min_call_ns` in the clock's ticks, measured as each session starts.
    min_call_ticks: AtomicU64,
}

const TABLES: usize = Table::ALL.len();

impl Recorder {
    /// A recorder with the limits of `config`.
    pub(crate) fn new(config: &Config) -> Self {
        Recorder {
            id: NEXT_RECORDER_ID.fetch_add(1, Ordering::Relaxed),
            registry: Arc::new(Registry {
                threads: Mutex::default(),
                retired: OrderedMutex::default_at(Level::Retired),
                clock: Clock::new(),
                sessions: Generations::new(),
                budget: RowBudget::new(config.max_data_points),
                spare_chunks: Mutex::default(),
                chunks: AtomicUsize::new(0),
                max_chunks: config.max_data_points.saturating_mul(2) / CHUNK_EVENTS,
            }),
            next_track: AtomicU32::new(0),
            max_names: config.max_names,
            max_open_stages: config.max_open_stages,
            last_generation: AtomicU64::new(0),
            step_stage: config.step_stage.as_deref().map(Box::from),
            max_call_depth: config.python_tracing_max_depth as usize,
            min_call_ns: (config.python_tracing_min_duration_us * 1e3) as u64,
            min_call_ticks: AtomicU64::new(0),
        }
    }

    /// Rows kept per table.
    pub(crate) fn max_rows(&self) -> usize {
        self.registry.budget.max_rows
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
        *self.registry.retired.lock() = Retired::default();
        self.take_dropped();
        self.registry.clock.start_session();
        self.min_call_ticks.store(
            self.registry.clock.ticks_in(self.min_call_ns),
            Ordering::Relaxed,
        );
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
        let mut retired = self.registry.retired.lock();
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
        let mut retired = self.registry.retired.lock();
        for thread in self.registry.threads() {
            let mut data = thread.lock();
            self.registry
                .take_rows(&mut retired.builders, &thread, &mut data);
            // The session goes on: its next rows reuse the memory.
            data.records.clear();
        }
        std::mem::take(&mut retired.builders)
    }

    /// Counts `rows` dropped from `table` by a ring buffer.
    pub(crate) fn count_dropped(&self, table: Table, rows: u64) {
        if rows > 0 {
            self.registry.budget.dropped[table as usize].fetch_add(rows, Ordering::Relaxed);
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
                let dropped = self.registry.budget.dropped[table as usize].load(Ordering::Relaxed);
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
                let rows = registry.budget.dropped[table as usize].swap(0, Ordering::Relaxed);
                (table, rows)
            })
            .filter(|&(_, rows)| rows > 0)
            .collect();
        for kept in &registry.budget.kept {
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
mod tests;
