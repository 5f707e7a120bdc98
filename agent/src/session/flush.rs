//! A running session's flushes: what it recorded since the last one,
//! written as a part file of its own (periodically, when the program asks,
//! and at a window's edge), so that a killed rank loses little and a
//! window's rows can be read back.

use std::sync::Weak;
use std::time::Instant;

use rankscope_common::error::Chain;
use rankscope_common::payload::{self, Limits, Payload, SamplerStats};

use super::{Hub, SessionError};
use crate::notice::notice;

/// A session's flushes so far (periodic and asked for), behind one lock:
/// flushes run one at a time, each numbering its part after the last, and
/// the session's end waits for the one under way.
#[derive(Default)]
pub(crate) struct Flushes {
    /// Parts written or tried; the next is numbered one more.
    parts: u32,
    /// Flushes whose part could not be written: merged into the session's
    /// final payload.
    pub(super) unwritten: Vec<Payload>,
    /// Wall time of the flushes written, nanoseconds.
    pub(super) ns: u64,
}

/// The flusher's call: a flush of the session of `hub` while it lives,
/// a failure told in a notice.
pub(super) fn periodic_flush(hub: Weak<Hub>) -> impl Fn() + Send + 'static {
    move || {
        let Some(hub) = hub.upgrade() else {
            return;
        };
        if let Err(e) = hub.flush() {
            notice!("a periodic flush failed: {}", Chain(&e));
        }
    }
}

impl Hub {
    /// Writes what the running session recorded since the last flush as its
    /// next part; `false` when no session runs or it recorded nothing new.
    pub(crate) fn flush(&self) -> Result<bool, SessionError> {
        self.flush_locked(&mut self.control.flushes())
    }

    /// Flushes the running session as [`Hub::flush`] does and returns the number
    /// of its last part: what it recorded until now is in parts 1 to that (a
    /// window's edge).
    pub(crate) fn flush_parts(&self) -> Result<u32, SessionError> {
        let mut flushes = self.control.flushes();
        self.flush_locked(&mut flushes)?;
        Ok(flushes.parts)
    }

    fn flush_locked(&self, flushes: &mut Flushes) -> Result<bool, SessionError> {
        let started = Instant::now();
        let wrote = self.write_flush(flushes)?;
        if wrote {
            // Kept beside the recording (a row would make the next flush write
            // it, and an idle session write forever): one row at the end.
            let ns = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
            flushes.ns = flushes.ns.saturating_add(ns);
        }
        Ok(wrote)
    }

    /// Writes the records since the last flush as the session's next part;
    /// `false` when there were none.
    fn write_flush(&self, flushes: &mut Flushes) -> Result<bool, SessionError> {
        let now = self.recording.recorder().now_ns();
        let seq = flushes.parts + 1;
        let Some((dir, name, header)) = self.session.with_running(|state| {
            let mut header = self.header(state, now, SamplerStats::default());
            header.flushed_until_ns = Some(now);
            let name = state.spill_name(&self.env).part_name(seq);
            (state.dir.clone(), name, header)
        }) else {
            return Ok(false);
        };
        let tables = self
            .recording
            .recorder()
            .flush()
            .finish()
            .map_err(SessionError::Batch)?;
        if tables.is_empty() {
            return Ok(false);
        }
        flushes.parts = seq;
        // After the rows were taken: an edge that reads it finds them all
        // before its time.
        self.recording.set_parts_taken(seq);
        let mut payload = Payload { header, tables };
        let written = payload::encode_capped(
            &mut payload,
            self.config.payload_compression,
            &Limits::DEFAULT,
        )
        .map_err(SessionError::Payload)
        .and_then(|bytes| {
            rankscope_common::file::write_atomic(&dir.join(&name), &bytes).map_err(|source| {
                SessionError::Spill {
                    rank: self.env.rank,
                    dir,
                    source,
                }
            })
        });
        if written.is_err() {
            // Out of the recorder already: kept for the final payload instead.
            flushes.unwritten.push(payload);
        }
        written.map(|()| true)
    }
}
