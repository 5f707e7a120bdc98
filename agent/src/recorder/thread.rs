//! A thread's buffer: what one recording thread keeps for its recorder,
//! behind a mutex that is seldom contended (its records, its names, its
//! stages open as paired so far), beside its lock-free event log.

use std::collections::VecDeque;

use rankscope_common::names::{NameId, Names};

use super::events::{Chunk, EventLog};
use super::FunctionTotals;
use crate::lock_order::{OrderedGuard, OrderedMutex};
use rankscope_common::table::{MetricRecord, Records, OVERHEAD_SECTION, STAGE_GPU_SECTION};

/// A stage that began and has not ended yet, as paired from the events.
pub(crate) struct OpenStage {
    pub(super) stage_id: u64,
    pub(super) seq: u32,
    pub(super) name: NameId,
    pub(super) call_index: u32,
    /// When it began, in the clock's ticks.
    pub(super) start_ticks: u64,
    pub(super) metadata: Option<String>,
    /// The session it began in (0: none).
    pub(super) generation: u64,
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
    pub(super) const ALL: [Section; 4] = [
        Section::Custom,
        Section::Throughput,
        Section::StageGpu,
        Section::Overhead,
    ];

    pub(super) fn name(self) -> &'static str {
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
    pub(super) track: u32,
    /// The thread's name, interned.
    pub(super) thread_name: NameId,
    /// The agent's own metric sections, interned, by [`Section`].
    pub(super) sections: [NameId; Section::ALL.len()],
    /// Stages begun and not ended as paired so far, innermost last.
    pub(super) open: Vec<OpenStage>,
    /// Calls so far per stage name id, for `call_index`.
    pub(super) calls: Vec<u32>,
    /// Where pairing stopped in the thread's current chunk of events.
    pub(super) paired: usize,
    /// Full chunks of the thread's events handed over, oldest first, each
    /// with where pairing stopped in it.
    pub(super) full: VecDeque<(Chunk, usize)>,
    /// Metadata of stages whose begin is not paired yet, by sequence number.
    pub(super) metadata: Vec<(u32, String)>,
    /// Stages begun while the open stack was full.
    pub(super) too_deep: u64,
    /// The session's rows, one queue per table.
    pub(crate) records: Records,
    /// Each traced function's calls since the rows were last read, by its
    /// place in the thread's traced calls.
    pub(super) functions: Vec<FunctionTotals>,
}

impl ThreadData {
    /// The next call index of stage name `name`.
    pub(super) fn next_call(&mut self, name: NameId) -> u32 {
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
    pub(super) fn clear_rows(&mut self) {
        self.calls = Vec::new();
        // Their threads start their traced calls afresh in the next session.
        self.functions = Vec::new();
        self.records = Records::default();
        self.too_deep = 0;
        self.names.take_folded();
    }
}

/// One thread's buffer, shared by the thread and its recorder.
pub(crate) struct ThreadBuffer {
    pub(super) data: OrderedMutex<ThreadData>,
    /// The thread's stage events, written without the lock.
    pub(super) events: EventLog,
    /// This buffer's id among every recorder's buffers.
    pub(super) id: u32,
}

impl ThreadBuffer {
    /// Locks the data; a panic on another holder does not poison recording.
    pub(super) fn lock(&self) -> OrderedGuard<'_, ThreadData> {
        self.data.lock()
    }
}
