//! A window's share of a running session's rows: read back from the flush
//! parts since its opening edge, kept where they happened between its
//! edges, and written as one payload into the window's folder.

use std::ops::Range;
use std::path::PathBuf;

use rankscope_common::env::RankEnv;
use rankscope_common::payload::{self, DroppedRows, Limits, Payload, SamplerStats};
use rankscope_common::spill;
use rankscope_common::window::WindowMeta;

use super::{session_info, Hub, SessionError};
use crate::transport::SessionInfo;
use rankscope_common::file::create_real_dir;

/// A window's payload on this rank, written into its folder.
pub(crate) struct WindowPayload {
    /// The payload's bytes.
    pub(super) bytes: Vec<u8>,
    /// What rank 0 gathers the window with: the window's folder as the
    /// session directory, this file as its own.
    pub(super) gather: WindowGather,
}

/// What a window's gather needs of its session, owned.
pub(crate) struct WindowGather {
    pub(super) dir: PathBuf,
    pub(super) file: PathBuf,
    pub(super) session_id: String,
    pub(super) run_id: Option<String>,
    pub(super) started_unix_ns: i64,
    pub(super) index: u32,
}

impl WindowGather {
    /// The transport's view of it.
    pub(crate) fn info<'a>(&'a self, env: &'a RankEnv) -> SessionInfo<'a> {
        SessionInfo {
            spill_file: Some(&self.file),
            ..session_info(
                env,
                &self.session_id,
                self.run_id.as_deref(),
                &self.dir,
                (self.started_unix_ns, self.index),
            )
        }
    }
}

/// Which rows of the running session a window holds: those of flush parts
/// `after + 1 ..= upto` that happened within `span` (nanoseconds into the
/// session), and the rows with no time (model parameter counts,
/// torch.profiler's CPU operator totals) of the parts after
/// `timeless_after`: those handed over while it was open.
pub(crate) struct WindowRows {
    pub(super) after: u32,
    pub(super) timeless_after: u32,
    pub(super) upto: u32,
    pub(super) span: Range<u64>,
}

impl Hub {
    /// This rank's payload of window `index` is written at `file`: the
    /// session's transport may carry it to rank 0 (`Transport::window_written`).
    pub(crate) fn window_written(&self, index: u32, file: &std::path::Path) {
        self.session
            .with_running(|state| state.transport.window_written(index, file));
    }

    /// The running session's `rows` as one payload that says it covers
    /// `window`, written into the window's folder; `None` without a running
    /// session.
    pub(crate) fn write_window(
        &self,
        rows: &WindowRows,
        window: WindowMeta,
        dropped: Vec<DroppedRows>,
    ) -> Result<Option<WindowPayload>, SessionError> {
        let env = &self.env;
        let now = self.recording.recorder().now_ns();
        let Some((mut header, parts, gather)) = self.session.with_running(|state| {
            let mut header = self.header(state, now, SamplerStats::default());
            header.window = Some(window.clone());
            let name = state.spill_name(env);
            let parts: Vec<(u32, PathBuf)> = (rows.after + 1..=rows.upto)
                .map(|seq| (seq, state.dir.join(name.part_name(seq))))
                .collect();
            let dir = rankscope_common::window::window_dir(&state.dir, window.index);
            let gather = WindowGather {
                file: dir.join(name.file_name()),
                dir,
                session_id: state.id.clone(),
                run_id: state.rendezvous.run_id.clone(),
                started_unix_ns: state.start_unix_ns,
                index: state.index,
            };
            (header, parts, gather)
        }) else {
            return Ok(None);
        };
        // A part that could not be written (its rows wait for the session's
        // end in memory) is missing here: the window lacks its rows.
        let mut kept = Vec::with_capacity(parts.len());
        for (seq, part) in parts.iter().filter(|(_, part)| part.exists()) {
            let Ok(payload) = spill::read_payload(part) else {
                continue;
            };
            let timeless = *seq > rows.timeless_after;
            kept.push(
                payload
                    .rows_within(&rows.span, timeless)
                    .map_err(SessionError::Batch)?,
            );
        }
        let merged =
            Payload::concat(kept, self.config.max_data_points).map_err(SessionError::Batch)?;
        // What the rank dropped while the window was open (past
        // max_data_points): a window of a long session may have lost its rows.
        header.dropped = dropped;
        let tables = merged.map(|payload| payload.tables);
        let mut payload = Payload {
            header,
            tables: tables.unwrap_or_default(),
        };
        let bytes = payload::encode_capped(
            &mut payload,
            self.config.payload_compression,
            &Limits::DEFAULT,
        )
        .map_err(SessionError::Payload)?;
        let spill = |source| SessionError::Spill {
            rank: env.rank,
            dir: gather.dir.clone(),
            source,
        };
        create_real_dir(&gather.dir).map_err(spill)?;
        rankscope_common::file::write_atomic(&gather.file, &bytes).map_err(spill)?;
        Ok(Some(WindowPayload { bytes, gather }))
    }
}
