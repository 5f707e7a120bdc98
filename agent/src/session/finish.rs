//! A session's end, as methods of its hub: the windows and the periodic
//! flushes stopped, this rank's payload built from its flushed parts and
//! what the recorder still holds, spilled to the session directory and,
//! with a gather, sent on to rank 0, which writes the report.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rankscope_common::error::Chain;
use rankscope_common::gather::{self, Gathered, ReportFiles};
use rankscope_common::payload::{
    self, ClockMeta, DroppedRows, Limits, Payload, PayloadHeader, RankMeta, SamplerStats,
    SessionMeta,
};
use rankscope_common::spill;
use rankscope_common::table::Overhead;

use super::{rank_list, session_info, Hub, Outcome, SessionError, SessionState};
use crate::notice::{self, notice, say};
use crate::reporter::default_reporter;
use crate::sampler::Sampler;
use crate::slot::BackToIdle;
use crate::sync::lock;
use crate::transport::SessionInfo;

impl Hub {
    /// Ends recording and hands the rank's data on; with `gather`, also the
    /// gather and, on rank 0, the report.
    pub(crate) fn finish(&self, gather: bool) -> Result<Outcome, SessionError> {
        self.control.stop_windows(gather);
        let Some((state, finishing)) = self.session.finish() else {
            return Err(SessionError::Stopped);
        };
        self.finish_state(*state, &finishing, gather)
    }

    /// Spills the running session, if there is one, without gathering: what a
    /// stop signal does. Returns the spill file.
    pub(super) fn spill_running(&self) -> Result<Option<PathBuf>, SessionError> {
        self.control.stop_windows(false);
        match self.session.finish_after_spill() {
            Some((state, finishing)) => self
                .finish_state(*state, &finishing, false)
                .map(|o| Some(o.spill_file)),
            None => Ok(None),
        }
    }

    /// [`finish`] of a session taken from the slot; `finishing` hears when the
    /// spill file is written.
    pub(super) fn finish_state(
        &self,
        mut state: SessionState,
        finishing: &BackToIdle<'_, SessionState>,
        gather: bool,
    ) -> Result<Outcome, SessionError> {
        self.control.stop_flusher();
        // Waits for a flush asked for and under way; none comes after (the
        // session is out of its slot).
        let mut flushes = self.control.flushes();
        // The sampler's last reading, taken as it stops, falls inside the
        // session.
        let sampler = state.sampler.take().map(Sampler::stop).unwrap_or_default();
        let duration_ns = self.recording.recorder().end_session();
        // What the stages cost, for the report's profiler overhead (the sampler
        // and the flushes recorded theirs).
        if let Some(ns) = crate::recorder::stage_cost_ns() {
            self.recording
                .recorder()
                .record_overhead(Overhead::StageNsPerCall, ns);
        }
        self.recording
            .recorder()
            .record_overhead(Overhead::FlushMs, flushes.ns as f64 / 1e6);
        let unwritten = std::mem::take(&mut flushes.unwritten);
        drop(flushes);
        let result = self
            .build_payload(&state, duration_ns, sampler, unwritten)
            .and_then(|payload| self.hand_on(&mut state, payload, finishing, gather));
        state.transport.close();
        self.control.put_back(state.transport);
        self.control.unwatch_stop_signals();
        result
    }

    /// Spills the payload and, with `gather`, gathers and reports.
    pub(super) fn hand_on(
        &self,
        state: &mut SessionState,
        mut payload: Payload,
        finishing: &BackToIdle<'_, SessionState>,
        gather: bool,
    ) -> Result<Outcome, SessionError> {
        let (spill_file, bytes) = self.spill(state, &mut payload)?;
        finishing.spilled();
        self.say_dropped(&payload.header);
        // The final file holds what the flushes wrote: they go.
        for part in spill::parts(&state.dir, &state.spill_name(&self.env)).unwrap_or_default() {
            let _ = std::fs::remove_file(part);
        }
        let mut outcome = Outcome {
            session_dir: state.dir.clone(),
            spill_file,
            payload_bytes: bytes.len(),
            ..Outcome::default()
        };
        if gather {
            if let Some(gathered) = self.gather(state, payload, bytes, &outcome.spill_file)? {
                outcome.report = self.report(&gathered, &state.dir)?;
                outcome.gathered = Some(gathered.into());
            }
        }
        Ok(outcome)
    }

    /// Encodes `payload` and writes it as this rank's spill file: the file
    /// and the bytes written.
    fn spill(
        &self,
        state: &SessionState,
        payload: &mut Payload,
    ) -> Result<(PathBuf, Vec<u8>), SessionError> {
        let bytes =
            payload::encode_capped(payload, self.config.payload_compression, &Limits::DEFAULT)
                .map_err(SessionError::Payload)?;
        let file =
            spill::write(&state.dir, &state.spill_name(&self.env), &bytes).map_err(|source| {
                SessionError::Spill {
                    rank: self.env.rank,
                    dir: state.dir.clone(),
                    source,
                }
            })?;
        Ok((file, bytes))
    }

    /// Says which rows were dropped, where this rank is heard (they are in
    /// the payload, and so the report, already).
    fn say_dropped(&self, header: &PayloadHeader) {
        if self.notices.is_quiet() {
            return;
        }
        for dropped in &header.dropped {
            say!(
                "{} rows of `{}` dropped (past max_data_points = {} or the payload's size limit)",
                dropped.rows,
                dropped.table,
                self.config.max_data_points
            );
        }
    }

    /// With this rank's data safe on disk, what waits for the others: the
    /// clocks compared again (the spill file rewritten with the offset
    /// found: it holds what rank 0 gets), then the gather. On rank 0, what
    /// it gathered.
    fn gather(
        &self,
        state: &mut SessionState,
        mut payload: Payload,
        mut bytes: Vec<u8>,
        spill_file: &Path,
    ) -> Result<Option<Gathered>, SessionError> {
        let deadline = Instant::now() + Duration::from_secs_f64(self.config.gather_timeout_s);
        // Field by field: the transport is borrowed mutably beside it.
        let info = session_info(
            &self.env,
            &state.id,
            state.rendezvous.run_id.as_deref(),
            &state.dir,
            (state.start_unix_ns, state.index),
        );
        if let Some(offset) = state.transport.resync(&info, deadline) {
            payload.header.clock.offset_at_finish = Some(offset);
            bytes = self.spill(state, &mut payload)?.1;
        }
        let info = SessionInfo {
            spill_file: Some(spill_file),
            ..info
        };
        state
            .transport
            .gather(&bytes, &info, deadline)
            .map_err(|source| SessionError::Transport {
                stage: "gather",
                source,
            })
    }

    /// Rank 0's report of what it gathered into `dir` (the session's, or a
    /// window's), by the reporter set or the default.
    pub(crate) fn report(
        &self,
        gathered: &Gathered,
        dir: &Path,
    ) -> Result<Option<ReportFiles>, SessionError> {
        // The other ranks' notices, each once (rank 0 said its own already).
        for (text, mut ranks) in gather::notices(gathered.payloads.iter().map(|p| &p.header)) {
            ranks.retain(|&rank| rank != 0);
            if !ranks.is_empty() {
                notice::print_line(format!("{}: ", rank_list(&ranks)), &text);
            }
        }
        let reporter = self.reporter.get().cloned().or_else(default_reporter);
        let Some(reporter) = reporter else {
            say!(
                "{} rank payloads are in {}; this build writes no report: run \
                 `rankscope aggregate --reports-dir {}` for it",
                gathered.payloads.len(),
                dir.display(),
                dir.display()
            );
            return Ok(None);
        };
        reporter
            .report(gathered, dir, &self.config)
            .map(Some)
            .map_err(|source| SessionError::Report {
                dir: dir.to_path_buf(),
                source,
            })
    }

    /// This rank's payload: the header and every thread's records as batches.
    pub(super) fn build_payload(
        &self,
        state: &SessionState,
        duration_ns: u64,
        sampler: SamplerStats,
        unwritten: Vec<Payload>,
    ) -> Result<Payload, SessionError> {
        let (builders, overflow) = self.recording.recorder().drain();
        let mut header = self.header(state, duration_ns, sampler);
        header.overflow = overflow;
        header.notices = self.notices.take_kept();
        header.dropped = self
            .recording
            .recorder()
            .take_dropped()
            .into_iter()
            .map(|(table, rows)| DroppedRows {
                table: table.name().to_string(),
                rows,
            })
            .collect();
        let last = Payload {
            header,
            tables: builders.finish().map_err(SessionError::Batch)?,
        };
        // What the flushes wrote (or could not write) comes first; the
        // final file replaces the parts.
        let parts = spill::parts(&state.dir, &state.spill_name(&self.env)).unwrap_or_default();
        if parts.is_empty() && unwritten.is_empty() {
            return Ok(last);
        }
        // Read a part at a time; telemetry keeps its newest rows, across
        // flushes too.
        let flushed = parts
            .iter()
            .filter_map(|part| match spill::read_payload(part) {
                Ok(payload) => Some(payload),
                Err(e) => {
                    notice!("a flushed part {} is lost: {}", part.display(), Chain(&e));
                    None
                }
            });
        let all = flushed.chain(unwritten).chain(std::iter::once(last));
        Ok(Payload::concat(all, self.config.max_data_points)
            .map_err(SessionError::Batch)?
            .expect("at least the last part"))
    }

    pub(super) fn header(
        &self,
        state: &SessionState,
        duration_ns: u64,
        sampler: SamplerStats,
    ) -> PayloadHeader {
        let env = &self.env;
        let gpus = self.telemetry.describe_gpus();
        PayloadHeader {
            session: SessionMeta {
                id: state.id.clone(),
                name: state.name.clone(),
                tags: state.tags.clone(),
                run_id: state.rendezvous.run_id.clone(),
            },
            rank: RankMeta {
                rank: env.rank,
                world_size: env.world_size,
                local_rank: env.local_rank,
                host: state.host.clone(),
                pid: std::process::id(),
                launcher: env.launcher.as_str().to_string(),
            },
            clock: ClockMeta {
                start_unix_ns: state.start_unix_ns,
                duration_ns,
                offset_to_rank0: state.rendezvous.offset,
                offset_at_finish: None,
            },
            transport: state.transport.name(),
            clock_sync: state.rendezvous.clock_sync,
            endpoint: state.rendezvous.endpoint.clone(),
            gpu_source: gpus.source,
            gpus: gpus.devices,
            gpu_selection: gpus.selection,
            sampler,
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            parallel: lock(&self.parallel).clone(),
            // Drops and overflow are counted once, in the final payload (see
            // `build_payload`); the rest as any header starts.
            ..PayloadHeader::new(&state.id, &state.name, env.rank, env.world_size)
        }
    }
}
