//! Sessions: one per job run. Finishing a session builds this rank's
//! payload, spills it to the session directory, hands it to rank 0 through
//! the transport and, on rank 0, has the reporter write the report.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rankscope_common::config::DisplayRanks;
use rankscope_common::env::{Launcher, RankEnv};
use rankscope_common::payload::{
    self, ClockMeta, DroppedRows, GpuSource, Payload, PayloadError, PayloadHeader, RankMeta,
    SamplerStats, SessionMeta,
};
use rankscope_common::{ArrowError, Config};

use crate::batch::TableBuilders;
use crate::profiler::Inner;
use crate::sampler::{HostReader, Sampler, Schedule};
use crate::transport::{self, GatherContext, Gathered, Skipped, TransportError};
use crate::{spill, ReportFiles};

/// Why a session could not start or finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A session is already running on this profiler.
    #[error("session `{0}` is already running; finish it first")]
    AlreadyRunning(String),
    /// A multi-rank job has no id that every rank shares.
    #[error(
        "no session id for this {launcher} job of {world_size} ranks: set RANKSCOPE_SESSION_ID \
         to the same value on every rank"
    )]
    NoSessionId {
        /// Launcher detected.
        launcher: Launcher,
        /// Ranks in the job.
        world_size: u32,
    },
    /// A file or directory could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The recorded rows could not be turned into batches.
    #[error("building the payload: {0}")]
    Batch(#[from] ArrowError),
    /// The payload could not be encoded.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The payloads could not be gathered.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Rank 0's reporter failed; the spill files are still in the session directory.
    #[error("writing the report in {dir}: {reason}")]
    Report {
        /// The session directory.
        dir: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// What a running session knows about itself.
pub(crate) struct SessionState {
    id: String,
    name: String,
    tags: Vec<(String, String)>,
    dir: PathBuf,
    start_unix_ns: i64,
    /// The session's telemetry thread.
    sampler: Option<Sampler>,
}

/// What finishing a session produced.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The session directory (empty for a disabled profiler).
    pub session_dir: PathBuf,
    /// This rank's spill file.
    pub spill_file: PathBuf,
    /// Size of this rank's payload, bytes.
    pub payload_bytes: usize,
    /// On rank 0: which ranks reported, which are missing, what was skipped.
    pub gathered: Option<GatherSummary>,
    /// On rank 0 with a reporter: the report files written.
    pub report: Option<ReportFiles>,
}

/// Which ranks rank 0 gathered.
#[derive(Debug, Clone, Default)]
pub struct GatherSummary {
    /// Ranks whose payloads arrived.
    pub reporting: Vec<u32>,
    /// Ranks that sent nothing usable before the deadline.
    pub missing: Vec<u32>,
    /// Inputs that were refused, with the reason.
    pub skipped: Vec<Skipped>,
}

impl From<&Gathered> for GatherSummary {
    fn from(g: &Gathered) -> Self {
        GatherSummary {
            reporting: g.payloads.iter().map(|p| p.header.rank.rank).collect(),
            missing: g.missing.clone(),
            skipped: g.skipped.clone(),
        }
    }
}

/// A running session. Finish it with [`Session::finish`]; dropping it
/// unfinished still spills this rank's payload, without waiting for others.
pub struct Session {
    inner: Option<Arc<Inner>>,
}

impl Session {
    /// A session of a disabled profiler.
    pub(crate) fn inert() -> Self {
        Session { inner: None }
    }

    pub(crate) fn start(
        inner: Arc<Inner>,
        name: &str,
        tags: &[(&str, &str)],
    ) -> Result<Self, SessionError> {
        // Opening the GPUs (NVML's start) can take a while: before the clock starts.
        inner.gpu_reader();
        let mut slot = inner.session.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(running) = slot.as_ref() {
            return Err(SessionError::AlreadyRunning(running.name.clone()));
        }
        let config = &inner.config;
        let name = config.session.clone().unwrap_or_else(|| name.to_string());
        let id = session_id(config, &inner.env)?;
        let dir = session_dir(config, &name, &id);
        std::fs::create_dir_all(&dir).map_err(|source| SessionError::Io {
            path: dir.clone(),
            source,
        })?;
        // Rows recorded between sessions are not part of this one.
        for thread in inner.recorder.threads() {
            thread.lock().clear_rows();
        }
        inner.recorder.take_dropped();
        *slot = Some(SessionState {
            id,
            name,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            dir,
            start_unix_ns: unix_now_ns(),
            sampler: None,
        });
        inner.open_generation();
        drop(slot);
        let sampler = start_sampler(&inner);
        if let Some(state) = inner
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            state.sampler = sampler;
        }
        Ok(Session { inner: Some(inner) })
    }

    /// The session directory (`None` for a disabled profiler).
    pub fn dir(&self) -> Option<PathBuf> {
        let inner = self.inner.as_ref()?;
        let slot = inner.session.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().map(|s| s.dir.clone())
    }

    /// Ends the session: spills this rank's payload, gathers on rank 0 (which
    /// waits at most `gather_timeout_s` for the others) and, on rank 0 with a
    /// reporter, writes the report.
    pub fn finish(mut self) -> Result<Outcome, SessionError> {
        match self.inner.take() {
            Some(inner) => finish(&inner, true),
            None => Ok(Outcome::default()),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            if let Err(e) = finish(&inner, false) {
                eprintln!("rankscope: session dropped unfinished; spilling its data failed: {e}");
            }
        }
    }
}

/// Starts the telemetry sampler of a session, if there is anything to sample.
fn start_sampler(inner: &Arc<Inner>) -> Option<Sampler> {
    let config = &inner.config;
    let gpu = inner.gpu_reader().cloned();
    let host = config.collect_host.then(HostReader::new);
    if gpu.is_none() && host.is_none() {
        return None;
    }
    let displays = config.display_ranks == DisplayRanks::All || inner.env.rank == 0;
    let schedule = Schedule {
        gpu: Duration::from_secs_f64(config.gpu_interval_s),
        host: Duration::from_secs_f64(config.host_interval_s),
        pcie: config.pcie_interval_s.map(Duration::from_secs_f64),
        display: (config.live_display && displays)
            .then(|| Duration::from_secs_f64(config.display_interval_s)),
    };
    match Sampler::start(Arc::clone(inner), gpu, host, schedule) {
        Ok(sampler) => Some(sampler),
        Err(e) => {
            eprintln!(
                "rankscope: rank {}: telemetry off: cannot start its thread: {e}",
                inner.env.rank
            );
            None
        }
    }
}

fn finish(inner: &Inner, gather: bool) -> Result<Outcome, SessionError> {
    inner.close_generation();
    let mut state = inner
        .session
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .expect("a session that has not finished holds its state");
    let sampler = state.sampler.take().map(Sampler::stop).unwrap_or_default();
    let end_ns = inner.now_ns();

    let mut builders = TableBuilders::default();
    for thread in inner.recorder.threads() {
        let mut data = thread.lock();
        builders.append_thread(thread.track, &thread.thread_name, &data);
        data.clear_rows();
    }
    let payload = Payload {
        header: header(inner, &state, end_ns, sampler),
        tables: builders.finish()?,
    };
    for dropped in &payload.header.dropped {
        eprintln!(
            "rankscope: rank {}: {} rows of `{}` dropped (max_data_points = {})",
            inner.env.rank, dropped.rows, dropped.table, inner.config.max_data_points
        );
    }
    let bytes = payload::encode(&payload, inner.config.payload_compression)?;
    let spill_file = spill::write(&state.dir, inner.env.rank, &bytes)?;
    let mut outcome = Outcome {
        session_dir: state.dir.clone(),
        spill_file,
        payload_bytes: bytes.len(),
        ..Outcome::default()
    };
    if !gather {
        return Ok(outcome);
    }

    let context = GatherContext {
        rank: inner.env.rank,
        world_size: inner.env.world_size,
        session_id: &state.id,
        session_dir: &state.dir,
        started_unix_ns: state.start_unix_ns,
        deadline: Instant::now() + Duration::from_secs_f64(inner.config.gather_timeout_s),
    };
    let mut transport = transport::for_rank(&inner.config, &inner.env)?;
    let Some(gathered) = transport.gather(&bytes, &context)? else {
        return Ok(outcome);
    };
    outcome.gathered = Some(GatherSummary::from(&gathered));
    match inner.reporter.get() {
        Some(reporter) => {
            let files = reporter
                .report(&gathered, &state.dir, &inner.config)
                .map_err(|e| SessionError::Report {
                    dir: state.dir.clone(),
                    reason: e.to_string(),
                })?;
            outcome.report = Some(files);
        }
        None => eprintln!(
            "rankscope: {} rank payloads are in {}; no reporter is linked: run \
             `rankscope aggregate --reports-dir {}` for the report",
            gathered.payloads.len(),
            state.dir.display(),
            state.dir.display()
        ),
    }
    Ok(outcome)
}

fn header(
    inner: &Inner,
    state: &SessionState,
    end_ns: u64,
    sampler: SamplerStats,
) -> PayloadHeader {
    let env = &inner.env;
    let gpu = inner
        .gpu_reader()
        .map(|g| g.lock().unwrap_or_else(|e| e.into_inner()));
    PayloadHeader {
        session: SessionMeta {
            id: state.id.clone(),
            name: state.name.clone(),
            tags: state.tags.clone(),
        },
        rank: RankMeta {
            rank: env.rank,
            world_size: env.world_size,
            local_rank: env.local_rank,
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            pid: std::process::id(),
            launcher: env.launcher.as_str().to_string(),
        },
        clock: ClockMeta {
            start_unix_ns: state.start_unix_ns,
            duration_ns: end_ns,
            offset_to_rank0_ns: 0,
        },
        gpu_source: gpu.as_ref().map_or(GpuSource::None, |g| g.source()),
        gpus: gpu.as_ref().map_or_else(Vec::new, |g| g.devices().to_vec()),
        gpu_selection: gpu
            .as_ref()
            .map_or_else(String::new, |g| g.selection().to_string()),
        sampler,
        dropped: inner
            .recorder
            .take_dropped()
            .into_iter()
            .map(|(table, rows)| DroppedRows {
                table: table.name().to_string(),
                rows,
            })
            .collect(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// The id every rank of the job shares: configuration, else the launcher's
/// job id, else (for a world of one only) a fresh one.
fn session_id(config: &Config, env: &RankEnv) -> Result<String, SessionError> {
    if let Some(id) = config.session_id.clone().or_else(|| env.job_id.clone()) {
        return Ok(id);
    }
    if env.world_size == 1 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        return Ok(format!("{}-{}", now.as_secs(), std::process::id()));
    }
    Err(SessionError::NoSessionId {
        launcher: env.launcher,
        world_size: env.world_size,
    })
}

/// `text` with everything but ASCII letters, digits, `.`, `_` and `-`
/// replaced, so that a hostile session name cannot leave the output directory.
pub(crate) fn path_safe(text: &str) -> String {
    let safe: String = text
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match safe.trim_start_matches('.') {
        "" => "session".to_string(),
        rest => rest.to_string(),
    }
}

fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The session directory a rank with `config` uses for `name` and `id`.
pub(crate) fn session_dir(config: &Config, name: &str, id: &str) -> PathBuf {
    config
        .output_dir
        .join(format!("{}-{}", path_safe(name), path_safe(id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn hostile_names_stay_inside_the_output_directory() {
        assert_eq!(path_safe("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(path_safe(".."), "session");
        assert_eq!(path_safe("t2v <script>"), "t2v__script_");
        assert_eq!(path_safe(&"x".repeat(500)).len(), 64);
        let dir = session_dir(&Config::default(), "/abs", "1");
        assert!(dir.starts_with("profiling_reports"), "{}", dir.display());
        assert!(Path::new(&path_safe("a/b")).components().count() == 1);
    }
}
