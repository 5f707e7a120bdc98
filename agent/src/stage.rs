//! Stage guards: a stage begins when its guard is made and ends when the
//! guard is dropped, on the same thread.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use rankscope_common::names::NameId;

use crate::recorder::Recorder;

/// An open stage; the stage ends when this guard is dropped.
///
/// A guard from a disabled profiler (or outside a session) is inert. Guards
/// are not `Send`: a stage begins and ends on one thread. The guard below
/// borrows a `'static` profiler, so the one reason it cannot move to
/// another thread is that it is not `Send`:
///
/// ```compile_fail
/// let profiler: &'static rankscope::Profiler = Box::leak(Box::new(rankscope::Profiler::disabled()));
/// let guard = profiler.stage("decode");
/// std::thread::spawn(move || drop(guard));
/// ```
///
/// The same program moving something that is `Send` compiles:
///
/// ```
/// let profiler: &'static rankscope::Profiler = Box::leak(Box::new(rankscope::Profiler::disabled()));
/// let recording = profiler.stage("decode").is_recording();
/// std::thread::spawn(move || drop(recording)).join().unwrap();
/// ```
#[must_use = "a stage ends when its guard is dropped"]
pub struct StageGuard<'p> {
    open: Option<(&'p Recorder, u64)>,
    _not_send: PhantomData<*const ()>,
}

impl<'p> StageGuard<'p> {
    #[inline(always)]
    pub(crate) fn new(open: Option<(&'p Recorder, u64)>) -> Self {
        StageGuard {
            open,
            _not_send: PhantomData,
        }
    }

    /// Whether this guard times a stage (false when profiling is off).
    pub fn is_recording(&self) -> bool {
        self.open.is_some()
    }
}

impl Drop for StageGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some((recorder, stage_id)) = self.open.take() {
            recorder.end_stage(stage_id);
        }
    }
}

/// A stage name made once and used for many stages, as a binding or a hot
/// loop holds it ([`Profiler::begin`](crate::Profiler::begin)). Names are
/// interned per thread; this one remembers its id in the first 8 threads
/// that use it in the process's life (their slots are never given back,
/// even when the threads exit), so that beginning a stage there needs no
/// hashing of the name. Later threads find it in their own map of names
/// by text.
#[derive(Debug)]
pub struct StageName {
    name: Cow<'static, str>,
    interned: Slots,
}

/// Where a [`StageName`] remembers its ids: `buffer id << 32 | name id`, or
/// [`StageName::UNSET`]. Each slot is written once, by one of the first
/// thread buffers to intern the name, in order; after that, threads only
/// read them. A thread past them finds the name in its own cache of names
/// by text (a hash, no lock, no write others see). (Not aligned to a cache
/// line: a `StageName` lives in Python objects too, which the interpreter
/// aligns to 16 bytes.)
#[derive(Debug)]
struct Slots([AtomicU64; StageName::SLOTS]);

impl StageName {
    const UNSET: u64 = u64::MAX;
    /// Thread buffers a name remembers its id in.
    const SLOTS: usize = 8;

    /// A stage name.
    pub fn new(name: &str) -> Self {
        StageName {
            name: Cow::Owned(name.to_string()),
            interned: Slots([const { AtomicU64::new(Self::UNSET) }; Self::SLOTS]),
        }
    }

    /// A stage name known when compiling, for a `static` (what
    /// [`stage!`](crate::stage!) makes at each call site).
    pub const fn from_static(name: &'static str) -> Self {
        StageName {
            name: Cow::Borrowed(name),
            interned: Slots([const { AtomicU64::new(Self::UNSET) }; Self::SLOTS]),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The name's id in thread buffer `buffer`, interned there by `intern`
    /// on first use (which also says whether the id may be kept).
    #[inline(always)]
    pub(crate) fn id_in(&self, buffer: u32, intern: impl FnOnce(&str) -> (NameId, bool)) -> NameId {
        for slot in &self.interned.0 {
            match slot.load(Ordering::Relaxed) {
                Self::UNSET => break,
                cached if (cached >> 32) as u32 == buffer => return cached as NameId,
                _ => {}
            }
        }
        self.intern_in(buffer, intern)
    }

    #[cold]
    #[inline(never)]
    fn intern_in(&self, buffer: u32, intern: impl FnOnce(&str) -> (NameId, bool)) -> NameId {
        let (id, keep) = intern(&self.name);
        if !keep {
            return id;
        }
        let cached = u64::from(buffer) << 32 | u64::from(id);
        // The first free slot, read before a write is tried (threads past
        // the slots write none); one taken at once by another thread is
        // passed over, so the filled ones stay in front.
        for slot in &self.interned.0 {
            if slot.load(Ordering::Relaxed) == Self::UNSET
                && slot
                    .compare_exchange(Self::UNSET, cached, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
        }
        id
    }
}

/// A stage begun by [`Profiler::begin`](crate::Profiler::begin), for
/// [`Profiler::end`](crate::Profiler::end) to end on the same thread: the
/// id names the thread that began it, and ends nothing on another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenStageId(pub(crate) u64);

impl OpenStageId {
    /// The id as a number, for a binding to hand out.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The id a binding handed out as a number. A number that no
    /// [`Profiler::begin`](crate::Profiler::begin) on this thread returned
    /// for a stage still open ends nothing (ids are unique among a
    /// thread's open stages until 2³² stages later).
    pub fn from_raw(id: u64) -> Self {
        OpenStageId(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_name_remembers_its_id_in_each_of_its_first_buffers() {
        let name = StageName::new("decode");
        let interned = Cell::new(0);
        let intern = |id: NameId, keep: bool| {
            let interned = &interned;
            move |text: &str| {
                assert_eq!(text, "decode");
                interned.set(interned.get() + 1);
                (id, keep)
            }
        };
        let buffers = StageName::SLOTS as u32 + 2;
        for _ in 0..2 {
            for buffer in 0..buffers {
                assert_eq!(name.id_in(buffer, intern(buffer + 100, true)), buffer + 100);
            }
        }
        assert_eq!(
            interned.get(),
            buffers + 2,
            "once per buffer, and again for the two past the slots"
        );
        // An id not to keep (a name folded into `(other)`) is asked for at
        // each use.
        let folded = StageName::new("decode");
        folded.id_in(0, intern(1, false));
        folded.id_in(0, intern(1, false));
        assert_eq!(interned.get(), buffers + 4);
    }
}
