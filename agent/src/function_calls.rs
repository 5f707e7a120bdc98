//! Function tracing, as a language binding's profile hook reports it (the
//! Python package's `python_tracing`): each call and return of a traced
//! function on the calling thread, recorded beside the thread's stages on
//! the same clock and within the same row budget (see the recorder's
//! `calls` module for what is kept).

use crate::recorder::FunctionSite;
use crate::Profiler;

impl Profiler {
    /// Records that this thread entered the function its caller knows by
    /// `key` (the same key for the same function while tracing lasts: the
    /// Python package uses the code object's address, and holds the object
    /// alive); `site` describes the function, asked once per thread. Nothing
    /// while no session records.
    #[inline]
    pub fn enter_function<'a>(&self, key: usize, site: impl FnOnce() -> FunctionSite<'a>) {
        if let Some(recorder) = self.recording() {
            recorder.enter_function(key, site);
        }
    }

    /// Records that this thread's innermost call of the function known by
    /// `key` returned (or unwound). A return whose call was not entered
    /// (tracing began inside it) is ignored.
    #[inline]
    pub fn exit_function(&self, key: usize) {
        if let Some(recorder) = self.recording() {
            recorder.exit_function(key);
        }
    }

    /// Forgets this thread's calls entered and not returned: tracing stops
    /// (or starts again) with calls under way.
    pub fn forget_function_calls(&self) {
        if let Some(recorder) = self.recorder() {
            recorder.forget_calls();
        }
    }
}
