//! The hot path: what a recording thread runs for a stage's begin and end
//! and a record call, on its own buffer, found through a thread-local
//! without a lock (a thread registers on its first call), and the ids of
//! the stages it begins.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use rustc_hash::FxHashMap;

use rankscope_common::names::{NameId, Names, OTHER};

use super::budget::give_back;
use super::calls::ThreadCalls;
use super::events::{Event, EventLog};
use super::pairing::Registry;
use super::thread::{Section, ThreadBuffer, ThreadData};
use super::Recorder;
use crate::lock_order::{Level, OrderedMutex};
use crate::stage_name::StageName;
use crate::sync::lock;
use rankscope_common::table::{Overhead, Records, Table};

/// Source of thread-buffer ids, unique across recorders: a [`StageName`]
/// remembers its name id per buffer by it.
pub(super) static NEXT_BUFFER_ID: AtomicU32 = AtomicU32::new(0);

/// What a thread keeps for one recorder, reached without a lock.
pub(super) struct Local {
    pub(super) recorder: u64,
    pub(super) buffer: Arc<ThreadBuffer>,
    /// Where the buffer goes when its thread exits.
    pub(super) registry: Weak<Registry>,
    /// This thread's bits of its stage ids ([`owner_bits`]).
    pub(super) owner: u64,
    /// Stages this thread began and has not ended, innermost last:
    /// (sequence number, name).
    pub(super) open: Vec<(u32, NameId)>,
    /// The stages begun past `max_open_stages` and not ended, innermost
    /// last, as runs of one name (name, calls; at most `max_open_stages`
    /// runs): an end by name ends the innermost of these first, not an open
    /// stage of the same name.
    pub(super) refused: Vec<(NameId, u64)>,
    pub(super) next_seq: u32,
    /// Names looked up by text, so that a stage named by a `&str` takes no
    /// lock after its first use; at most `max_names` of them.
    pub(super) names: FxHashMap<Box<str>, NameId>,
    /// The id of the stage name whose end is a step (`step_stage`) on this
    /// thread, once interned here; [`NO_STEP_STAGE`] until then.
    pub(super) step_stage: NameId,
    /// The thread's traced function calls.
    pub(super) calls: ThreadCalls,
}

/// What ending a stage by name did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// No stage of the name was open.
    None,
    /// A stage ended.
    Stage,
    /// A stage ended, and its end is a step (`step_stage`).
    Step,
}

/// No stage's end is a step on this thread (yet).
const NO_STEP_STAGE: NameId = NameId::MAX;

/// This thread's state for each live recorder it has recorded into; when
/// the thread exits, each buffer is retired into its recorder.
pub(super) struct Locals(pub(super) RefCell<Vec<Local>>);

impl Drop for Locals {
    fn drop(&mut self) {
        for local in self.0.get_mut().drain(..) {
            if let Some(registry) = local.registry.upgrade() {
                registry.retire(&local.buffer);
            }
        }
    }
}

thread_local! {
    pub(super) static LOCALS: Locals = const { Locals(RefCell::new(Vec::new())) };
}

/// Stage ids, as [`Recorder::begin_stage`] returns them: the id of the
/// thread's buffer (plus one: never 0) in bits 32–62, the stage's sequence
/// number below; bit 63 marks a stage refused as too deep. An id ends
/// stages of the thread that began it alone.
pub(super) const REFUSED: u64 = 1 << 63;

/// The id of no stage, which ends nothing (a stage begun while the thread
/// exits).
pub(super) const NOT_OPENED: u64 = 0;

/// A thread buffer's bits of the ids of its stages.
pub(super) fn owner_bits(buffer_id: u32) -> u64 {
    (u64::from(buffer_id % 0x7FFF_FFFF) + 1) << 32
}

/// A refused run's name when its calls had several names: any.
pub(super) const ANY_NAME: NameId = NameId::MAX;

/// Interns `name` in `buffer`; says whether the id may be kept for later
/// calls: not when the name was folded into `(other)`, so that every call
/// of a folded name is counted as such.
pub(super) fn intern(buffer: &ThreadBuffer, name: &str) -> (NameId, bool) {
    let names = &mut buffer.lock().names;
    let id = names.intern(name);
    (id, names.name(id) != OTHER || name == OTHER)
}

/// Ends one call of the refused run at `pos`.
pub(super) fn end_refused(refused: &mut Vec<(NameId, u64)>, pos: usize) {
    refused[pos].1 -= 1;
    if refused[pos].1 == 0 {
        refused.remove(pos);
    }
}

impl Recorder {
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
    pub(super) fn begin_stage_as(
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
    /// ends nothing. Returns whether the stage ended is a step
    /// (`step_stage`). Not inlined (see [`Recorder::begin_stage`]).
    #[inline(never)]
    pub(crate) fn end_stage(&self, stage_id: u64) -> bool {
        let ticks = self.registry.clock.ticks();
        self.with_local(|local| {
            if stage_id & !REFUSED & !u64::from(u32::MAX) != local.owner {
                return false;
            }
            if stage_id & REFUSED != 0 {
                if let Some(pos) = local.refused.len().checked_sub(1) {
                    end_refused(&mut local.refused, pos);
                }
                return false;
            }
            let stage_seq = stage_id as u32;
            match local.open.iter().rposition(|&(seq, _)| seq == stage_seq) {
                Some(pos) => {
                    let (seq, name) = local.open.remove(pos);
                    self.push_event(local, Event::End { seq, ticks });
                    name == local.step_stage
                }
                None => false,
            }
        })
        .unwrap_or(false)
    }

    /// Ends the innermost open stage called `name` on this thread: what
    /// ended ([`Ended`]).
    pub(crate) fn stop_stage(&self, name: &str) -> Ended {
        // A lookup, not interning: a name never started costs nothing.
        self.stop_stage_as(|local| match local.names.get(name) {
            Some(&id) => Some(id),
            None => local.buffer.lock().names.get(name),
        })
    }

    /// Ends the innermost open stage named by `name` on this thread;
    /// `false` if there is none.
    #[inline]
    pub(crate) fn stop_named_stage(&self, name: &StageName) -> Ended {
        self.stop_stage_as(|local| Some(self.named_id(local, name)))
    }

    #[inline(always)]
    pub(super) fn stop_stage_as(&self, name: impl FnOnce(&mut Local) -> Option<NameId>) -> Ended {
        let ticks = self.registry.clock.ticks();
        self.with_local(|local| {
            let Some(name) = name(local) else {
                return Ended::None;
            };
            // A refused stage is deeper than every open one: if it has the
            // name, it is the innermost.
            if let Some(pos) = local
                .refused
                .iter()
                .rposition(|&(n, _)| n == name || n == ANY_NAME)
            {
                end_refused(&mut local.refused, pos);
                return Ended::Stage;
            }
            match local.open.iter().rposition(|&(_, n)| n == name) {
                Some(pos) => {
                    let (seq, _) = local.open.remove(pos);
                    self.push_event(local, Event::End { seq, ticks });
                    match name == local.step_stage {
                        true => Ended::Step,
                        false => Ended::Stage,
                    }
                }
                None => Ended::None,
            }
        })
        .unwrap_or(Ended::None)
    }

    /// Appends a stage event to this thread's log; a full chunk is handed
    /// over first (or paired, past the budget of chunks).
    #[inline(always)]
    pub(super) fn push_event(&self, local: &Local, event: Event) {
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
    pub(super) fn chunk_full(&self, buffer: &ThreadBuffer) {
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
    pub(super) fn name_id(&self, local: &mut Local, name: &str) -> NameId {
        self.cached_name_id(local, name).0
    }

    /// [`Recorder::name_id`], and whether the id may be kept (see
    /// [`intern`]). The cache's lookup is inlined into the stage calls
    /// (left to itself, the compiler may not: 2 ns more per stage named by
    /// a `&str`); a miss goes out of line.
    #[inline(always)]
    pub(super) fn cached_name_id(&self, local: &mut Local, name: &str) -> (NameId, bool) {
        match local.names.get(name) {
            Some(&id) => (id, true),
            None => self.intern_and_cache(local, name),
        }
    }

    /// A name not in this thread's cache: interned under the buffer's lock,
    /// and cached (up to `max_names`) where it may be kept.
    #[cold]
    #[inline(never)]
    fn intern_and_cache(&self, local: &mut Local, name: &str) -> (NameId, bool) {
        let (id, cacheable) = intern(&local.buffer, name);
        if cacheable && local.names.len() < self.max_names {
            local.names.insert(name.into(), id);
        }
        if cacheable && self.step_stage.as_deref() == Some(name) {
            local.step_stage = id;
        }
        (id, cacheable)
    }

    /// The id of `name` on this thread: remembered by the name itself, else
    /// from the thread's cache of names by text.
    #[inline(always)]
    pub(super) fn named_id(&self, local: &mut Local, name: &StageName) -> NameId {
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
        if self.registry.budget.admit(table) && self.with_thread(|t| push(t, ticks)).is_none() {
            // Not recorded (the thread is torn down): its row back.
            give_back(&self.registry.budget.kept[table as usize], 1);
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
    pub(super) fn with_local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> Option<R> {
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
    pub(super) fn register_thread(&self, locals: &mut Vec<Local>) -> usize {
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
            data: OrderedMutex::new(
                Level::ThreadBuffer,
                ThreadData {
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
                    functions: Vec::new(),
                },
            ),
            events: EventLog::new(),
            id: NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed),
        });
        lock(&self.registry.threads).push(Arc::clone(&buffer));
        // Entries of profilers dropped since are of no use to this thread.
        locals.retain(|l| l.registry.strong_count() > 0);
        locals.push(Local {
            recorder: self.id,
            registry: Arc::downgrade(&self.registry),
            owner: owner_bits(buffer.id),
            buffer,
            open: Vec::new(),
            refused: Vec::new(),
            next_seq: 0,
            names: FxHashMap::default(),
            step_stage: NO_STEP_STAGE,
            calls: ThreadCalls::default(),
        });
        locals.len() - 1
    }
}
