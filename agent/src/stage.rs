//! Stage guards: a stage begins when its guard is made and ends when the
//! guard is dropped, on the same thread.

use std::marker::PhantomData;

use crate::session::Recording;

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
    open: Option<(&'p Recording, u64)>,
    _not_send: PhantomData<*const ()>,
}

impl<'p> StageGuard<'p> {
    #[inline(always)]
    pub(crate) fn new(open: Option<(&'p Recording, u64)>) -> Self {
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
        if let Some((core, stage_id)) = self.open.take() {
            core.end_stage(stage_id);
        }
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
