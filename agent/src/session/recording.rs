//! The hot core of a profiler ([`Recording`]): what stage begins and ends,
//! steps and record calls touch, apart from the session's control (its
//! transport, flushes, windows thread and slot), which they never reach.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rankscope_common::Config;

use super::windows::Steps;
use crate::recorder::{Ended, Recorder};

/// The recorder, the steps, and the flush parts a window's edge notes.
pub(crate) struct Recording {
    /// What the hot path and the sampler write into.
    recorder: Arc<Recorder>,
    /// The steps of the running session (`Profiler::step`).
    steps: Arc<Steps>,
    /// The running session's flush parts whose rows were all taken from
    /// the recorder: a window's edge notes it (readable without the
    /// flushes' lock).
    parts_taken: AtomicU32,
}

impl Recording {
    /// The core of a profiler with `config`'s limits.
    pub(crate) fn new(config: &Config) -> Self {
        Recording {
            recorder: Arc::new(Recorder::new(config)),
            steps: Arc::default(),
            parts_taken: AtomicU32::new(0),
        }
    }

    /// The recorder.
    #[inline(always)]
    pub(crate) fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }

    /// The steps.
    pub(crate) fn steps(&self) -> &Arc<Steps> {
        &self.steps
    }

    /// Ends a step (`Profiler::step`, or the end of the `step_stage`):
    /// one count more, and at a window's edge the time and the flush parts
    /// taken noted.
    #[inline]
    pub(crate) fn step(&self) {
        self.steps.advance(|| {
            // The parts first: those it counts were taken before the time.
            let parts = self.parts_taken();
            (self.recorder.now_ns(), parts)
        });
    }

    /// Ends the stage `stage_id` this thread began, and the step where it
    /// is the `step_stage`.
    #[inline(always)]
    pub(crate) fn end_stage(&self, stage_id: u64) {
        if self.recorder.end_stage(stage_id) {
            self.step();
        }
    }

    /// Counts the step where `ended` says the stage ended by name was the
    /// `step_stage`; whether a stage ended.
    pub(crate) fn ended(&self, ended: Ended) -> bool {
        if ended == Ended::Step {
            self.step();
        }
        ended != Ended::None
    }

    /// The flush parts whose rows were all taken.
    pub(crate) fn parts_taken(&self) -> u32 {
        self.parts_taken.load(Ordering::Acquire)
    }

    /// Notes that the rows of flush parts up to `parts` were all taken.
    pub(crate) fn set_parts_taken(&self, parts: u32) {
        self.parts_taken.store(parts, Ordering::Release);
    }
}
