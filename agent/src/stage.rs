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
/// interned per thread; this one remembers its id in the thread that last
/// used it, so that beginning a stage needs no hashing of the name.
#[derive(Debug)]
pub struct StageName {
    name: Cow<'static, str>,
    /// `buffer id << 32 | name id` of the last thread buffer that interned
    /// the name, or [`StageName::UNSET`].
    interned: AtomicU64,
}

impl StageName {
    const UNSET: u64 = u64::MAX;

    /// A stage name.
    pub fn new(name: &str) -> Self {
        StageName {
            name: Cow::Owned(name.to_string()),
            interned: AtomicU64::new(Self::UNSET),
        }
    }

    /// A stage name known when compiling, for a `static` (what
    /// [`stage!`](crate::stage!) makes at each call site).
    pub const fn from_static(name: &'static str) -> Self {
        StageName {
            name: Cow::Borrowed(name),
            interned: AtomicU64::new(Self::UNSET),
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
        let cached = self.interned.load(Ordering::Relaxed);
        if cached != Self::UNSET && (cached >> 32) as u32 == buffer {
            return cached as NameId;
        }
        let (id, keep) = intern(&self.name);
        if keep {
            self.interned
                .store(u64::from(buffer) << 32 | u64::from(id), Ordering::Relaxed);
        }
        id
    }
}

/// A stage begun by [`Profiler::begin`](crate::Profiler::begin), for
/// [`Profiler::end`](crate::Profiler::end) to end on the same thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenStageId(pub(crate) u64);

impl OpenStageId {
    /// The id as a number, for a binding to hand out.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The id a binding handed out as a number. A number that no
    /// [`Profiler::begin`](crate::Profiler::begin) on this thread returned
    /// ends nothing.
    pub fn from_raw(id: u64) -> Self {
        OpenStageId(id)
    }
}
