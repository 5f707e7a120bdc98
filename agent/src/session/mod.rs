//! Sessions: one per job run. Starting a session opens the transport (the
//! rendezvous) and the sampler; finishing it builds this rank's payload,
//! spills it to the session directory, gathers on rank 0 through the
//! transport and, on rank 0, has the reporter write the report.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rankscope_common::env::RankEnv;
use rankscope_common::error::Chain;
use rankscope_common::gather::{self, Gathered, ReportFiles, Skipped};
use rankscope_common::payload::{
    self, ClockMeta, DroppedRows, Limits, Overflow, Payload, PayloadHeader, RankMeta, SamplerStats,
    SessionMeta,
};
use rankscope_common::spill::{self, SpillName};
use rankscope_common::table::Overhead;
use rankscope_common::text::rank_ranges;
use rankscope_common::Config;

use crate::flusher::Flusher;
use crate::notice::{self, notice, say};
use crate::recorder::Recorder;
use crate::reporter::{default_reporter, Reporter};
use crate::sampler::{Sampler, Telemetry};
use crate::signals::{self, OnStop};
use crate::slot::{BackToIdle, Phase, Slot};
use crate::sync::lock;
use crate::transport::{self, clock, Rendezvous, SessionInfo, Transport};
use crate::windows::{Steps, WindowsThread};

mod error;
mod flush;
mod naming;
mod window_rows;

pub use error::SessionError;
pub(crate) use flush::{flush, flush_parts};
use flush::{periodic_flush, Flushes};
use naming::session_dir;
use naming::{capped, capped_tags, create_real_dir, process_tag, session_id, MAX_NAME_BYTES};
pub(crate) use window_rows::{write_window, WindowPayload, WindowRows};

/// What a running session knows about itself.
pub(crate) struct SessionState {
    id: String,
    pub(crate) name: String,
    tags: Vec<(String, String)>,
    dir: PathBuf,
    start_unix_ns: i64,
    /// Tells this process's spill files from any other's.
    process: u64,
    /// What the transport's rendezvous established.
    rendezvous: Rendezvous,
    /// The transport, taken from the profiler for the session's length.
    transport: Box<dyn Transport>,
    /// The session's telemetry thread.
    sampler: Option<Sampler>,
    /// The session's periodic flushes.
    flusher: Option<Flusher>,
    /// What a stop signal does while the session runs (watched while this
    /// lives): spill it.
    _on_stop: Option<Arc<OnStop>>,
}

impl SessionState {
    /// The name of this rank's spill file (and, with a number, its flushes).
    fn spill_name<'a>(&'a self, env: &RankEnv) -> SpillName<'a> {
        SpillName {
            rank: env.rank,
            run_id: self.rendezvous.run_id.as_deref(),
            process: self.process,
        }
    }
}

/// `rank 3` or `ranks 1-3, 7`.
fn rank_list(ranks: &[u32]) -> String {
    let plural = if ranks.len() == 1 { "" } else { "s" };
    format!("rank{plural} {}", rank_ranges(ranks))
}

/// What the transport is told of a session.
fn session_info<'a>(
    env: &RankEnv,
    id: &'a str,
    run_id: Option<&'a str>,
    dir: &'a Path,
    started_unix_ns: i64,
) -> SessionInfo<'a> {
    SessionInfo {
        rank: env.rank,
        world_size: env.world_size,
        session_id: id,
        run_id,
        session_dir: dir,
        spill_file: None,
        started_unix_ns,
    }
}

/// The hub behind an enabled profiler: what its sessions share with the
/// hot path (the recorder) and with each other. Sessions start, flush,
/// spill and finish through it, one at a time (its slot says which phase).
///
/// Lock order, where a call takes more than one: `flushes`, then the
/// slot's (`session`, held only to read the running session), then the
/// recorder's own (thread buffers). `transport` and `windows` are taken
/// and put back with no other lock held; the locks inside `steps` (its
/// edges, the window planned, its stop signal) and the notices' are
/// leaves.
pub(crate) struct Hub {
    /// What the hot path and the sampler write into.
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) config: Config,
    pub(crate) env: RankEnv,
    /// GPU and host sampling.
    pub(crate) telemetry: Telemetry,
    /// The session, in whichever phase it is.
    pub(crate) session: Slot<SessionState>,
    /// The transport, made at the first session unless one was handed in;
    /// each session takes it while it runs.
    pub(crate) transport: Mutex<Option<Box<dyn Transport>>>,
    pub(crate) reporter: OnceLock<Arc<dyn Reporter>>,
    /// The running session's flushes, one at a time.
    pub(crate) flushes: Mutex<Flushes>,
    /// The steps of the running session (`Profiler::step`).
    pub(crate) steps: Arc<Steps>,
    /// The running session's flush parts whose rows were all taken from
    /// the recorder: a window's edge notes it (`Flushes::parts`, readable
    /// without its lock).
    pub(crate) parts_taken: AtomicU32,
    /// The running session's windows thread; taken (and stopped) before
    /// the session leaves its slot, whose flushes a closing window needs.
    windows: Mutex<Option<WindowsThread>>,
}

impl Hub {
    /// The hub of a profiler with `config` for the rank `env` describes,
    /// with the program's own transport and reporter where it gave them.
    pub(crate) fn new(
        config: Config,
        env: RankEnv,
        transport: Option<Box<dyn Transport>>,
        reporter: Option<Arc<dyn Reporter>>,
    ) -> Self {
        let chosen = OnceLock::new();
        if let Some(reporter) = reporter {
            let _ = chosen.set(reporter);
        }
        Hub {
            recorder: Arc::new(Recorder::new(&config)),
            telemetry: Telemetry::new(&config, &env),
            config,
            env,
            session: Slot::default(),
            transport: Mutex::new(transport),
            reporter: chosen,
            flushes: Mutex::default(),
            steps: Arc::default(),
            parts_taken: AtomicU32::new(0),
            windows: Mutex::default(),
        }
    }
}

/// What finishing a session produced.
#[derive(Debug, Default)]
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
#[derive(Debug, Default)]
pub struct GatherSummary {
    /// Ranks whose payloads arrived.
    pub reporting: Vec<u32>,
    /// Ranks that sent nothing usable before the deadline.
    pub missing: Vec<u32>,
    /// Inputs that were refused, with the reason.
    pub skipped: Vec<Skipped>,
}

impl From<Gathered> for GatherSummary {
    fn from(g: Gathered) -> Self {
        GatherSummary {
            reporting: g.payloads.iter().map(|p| p.header.rank.rank).collect(),
            missing: g.missing,
            skipped: g.skipped,
        }
    }
}

/// A running session. Finish it with [`Session::finish`]; dropping it
/// unfinished still spills this rank's payload, without waiting for others.
pub struct Session {
    shared: Option<Arc<Hub>>,
    /// The process that started the session: a forked child has the
    /// session's memory but none of its threads, and must leave it alone.
    pid: u32,
}

impl Session {
    /// A session of a disabled profiler.
    pub(crate) fn inert() -> Self {
        Session {
            shared: None,
            pid: std::process::id(),
        }
    }

    pub(crate) fn start(
        shared: Arc<Hub>,
        name: &str,
        tags: &[(&str, &str)],
    ) -> Result<Self, SessionError> {
        shared.telemetry.prepare();
        let starting = shared.session.start(|phase| match phase {
            Phase::Running(running) => SessionError::AlreadyRunning(running.name.clone()),
            _ => SessionError::AlreadyRunning("(another, starting or finishing)".into()),
        })?;
        let (config, env) = (&shared.config, &shared.env);
        if env.world_size > config.max_world_size {
            return Err(SessionError::WorldTooLarge {
                world_size: env.world_size,
                max: config.max_world_size,
            });
        }
        let name = capped(
            "session name",
            config.session.as_deref().unwrap_or(name),
            MAX_NAME_BYTES,
        );
        let id = capped("session id", &session_id(config, env)?, MAX_NAME_BYTES);
        let dir = session_dir(config, &name, &id);
        let windows_dir = dir.clone();
        create_real_dir(&dir).map_err(|source| SessionError::SessionDir {
            path: dir.clone(),
            source,
        })?;
        let mut transport = take_transport(&shared)?;
        let start_unix_ns = clock::wall_now_ns(config.clock_shift_ns);
        let proposal = session_info(env, &id, env.run_id.as_deref(), &dir, start_unix_ns);
        let deadline = Instant::now() + Duration::from_secs_f64(config.gather_timeout_s);
        let rendezvous = match transport.open(&proposal, deadline) {
            Ok(rendezvous) => rendezvous,
            Err(source) => {
                put_back(&shared, transport);
                return Err(SessionError::Transport {
                    stage: "rendezvous",
                    source,
                });
            }
        };
        let windows_run = rendezvous.run_id.clone();
        shared.recorder.begin_session();
        *lock(&shared.flushes) = Flushes::default();
        shared.parts_taken.store(0, Ordering::Release);
        starting.running(SessionState {
            id,
            name,
            tags: capped_tags(tags),
            dir,
            start_unix_ns,
            process: process_tag(start_unix_ns),
            rendezvous,
            transport,
            sampler: shared.telemetry.start(&shared.recorder),
            flusher: (config.flush_interval_s > 0.0)
                .then(|| {
                    Flusher::start(
                        periodic_flush(Arc::downgrade(&shared)),
                        Duration::from_secs_f64(config.flush_interval_s),
                    )
                })
                .flatten(),
            _on_stop: shared.config.spill_on_signal.then(|| {
                let on_stop = spill_on_stop(Arc::downgrade(&shared));
                signals::watch(&on_stop);
                on_stop
            }),
        });
        *lock(&shared.windows) = WindowsThread::start(&shared, windows_dir, windows_run);
        Ok(Session {
            shared: Some(shared),
            pid: std::process::id(),
        })
    }

    /// The session directory (`None` for a disabled profiler, or in a
    /// forked child).
    pub fn dir(&self) -> Option<PathBuf> {
        self.check_process().ok()?;
        let shared = self.shared.as_ref()?;
        shared.session.with_running(|s| s.dir.clone())
    }

    /// Writes what this rank recorded since the last flush to a part file
    /// of its own now, as the periodic flushes (`flush_interval_s`) do;
    /// the session goes on, and its rows' memory is kept for the next.
    /// `false` when there was nothing new to write, or no session records
    /// (a disabled profiler, a session a stop signal ended). Rows whose
    /// part cannot be written stay for the final spill file.
    pub fn flush(&self) -> Result<bool, SessionError> {
        self.check_process()?;
        match &self.shared {
            Some(shared) => flush(shared),
            None => Ok(false),
        }
    }

    /// Ends the session: spills this rank's payload, gathers on rank 0 (which
    /// waits at most `gather_timeout_s` for the others) and, on rank 0,
    /// writes the report.
    pub fn finish(mut self) -> Result<Outcome, SessionError> {
        self.leave_if_forked()?;
        match self.shared.take() {
            Some(shared) => finish(&shared, true),
            None => Ok(Outcome::default()),
        }
    }

    /// In a forked child, forgets the session without touching it: its
    /// threads (sampler, flusher) do not exist there, and its state must
    /// never be dropped there (that would wait for them).
    fn leave_if_forked(&mut self) -> Result<(), SessionError> {
        let forked = self.check_process();
        if forked.is_err() {
            if let Some(shared) = self.shared.take() {
                std::mem::forget(shared);
            }
        }
        forked
    }

    /// `Forked` in a process other than the one that started the session.
    fn check_process(&self) -> Result<(), SessionError> {
        let child = std::process::id();
        match child == self.pid {
            true => Ok(()),
            false => Err(SessionError::Forked {
                parent: self.pid,
                child,
            }),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.leave_if_forked().is_err() {
            return;
        }
        if let Some(shared) = self.shared.take() {
            if let Err(e) = finish(&shared, false) {
                say!(
                    "session dropped unfinished; spilling its data failed: {}",
                    Chain(&e)
                );
            }
        }
    }
}

/// What a stop signal does for the session of `shared`: spill it, and say
/// where it went.
fn spill_on_stop(shared: Weak<Hub>) -> Arc<OnStop> {
    Arc::new(move |signal| {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match spill_running(&shared) {
            Ok(Some(path)) => say!(
                "stopped by signal {signal}; what it recorded is in {}",
                path.display()
            ),
            Ok(None) => {}
            Err(e) => say!(
                "stopped by signal {signal}; spilling its data failed: {}",
                Chain(&e)
            ),
        }
    })
}

/// Spills the running session, if there is one, without gathering: what a
/// stop signal does. Returns the spill file.
fn spill_running(shared: &Hub) -> Result<Option<PathBuf>, SessionError> {
    stop_windows(shared, false);
    match shared.session.finish_after_spill() {
        Some((state, finishing)) => {
            finish_state(shared, *state, &finishing, false).map(|o| Some(o.spill_file))
        }
        None => Ok(None),
    }
}

/// The profiler's transport: the one handed in, else the one configuration
/// and launcher call for.
fn take_transport(shared: &Hub) -> Result<Box<dyn Transport>, SessionError> {
    let given = lock(&shared.transport).take();
    match given {
        Some(transport) => Ok(transport),
        None => transport::for_rank(&shared.config, &shared.env).map_err(|source| {
            SessionError::Transport {
                stage: "rendezvous",
                source,
            }
        }),
    }
}

fn put_back(shared: &Hub, transport: Box<dyn Transport>) {
    *lock(&shared.transport) = Some(transport);
}

/// Ends recording and hands the rank's data on; with `gather`, also the
/// gather and, on rank 0, the report.
fn finish(shared: &Hub, gather: bool) -> Result<Outcome, SessionError> {
    stop_windows(shared, gather);
    let Some((state, finishing)) = shared.session.finish() else {
        return Err(SessionError::Stopped);
    };
    finish_state(shared, *state, &finishing, gather)
}

/// Stops the running session's windows thread, if any; with `close_open`,
/// a window open now closes and is reported first.
fn stop_windows(shared: &Hub, close_open: bool) {
    let windows = lock(&shared.windows).take();
    if let Some(windows) = windows {
        windows.stop(close_open);
    }
}

/// [`finish`] of a session taken from the slot; `finishing` hears when the
/// spill file is written.
fn finish_state(
    shared: &Hub,
    mut state: SessionState,
    finishing: &BackToIdle<'_, SessionState>,
    gather: bool,
) -> Result<Outcome, SessionError> {
    if let Some(flusher) = state.flusher.take() {
        flusher.stop();
    }
    // Waits for a flush asked for and under way; none comes after (the
    // session is out of its slot).
    let mut flushes = lock(&shared.flushes);
    // The sampler's last reading, taken as it stops, falls inside the
    // session.
    let sampler = state.sampler.take().map(Sampler::stop).unwrap_or_default();
    let duration_ns = shared.recorder.end_session();
    // What the stages cost, for the report's profiler overhead (the sampler
    // and the flushes recorded theirs).
    if let Some(ns) = crate::recorder::stage_cost_ns() {
        shared
            .recorder
            .record_overhead(Overhead::StageNsPerCall, ns);
    }
    shared
        .recorder
        .record_overhead(Overhead::FlushMs, flushes.ns as f64 / 1e6);
    let unwritten = std::mem::take(&mut flushes.unwritten);
    drop(flushes);
    let result = build_payload(shared, &state, duration_ns, sampler, unwritten)
        .and_then(|payload| hand_on(shared, &mut state, payload, finishing, gather));
    state.transport.close();
    put_back(shared, state.transport);
    result
}

/// Spills the payload and, with `gather`, gathers and reports.
fn hand_on(
    shared: &Hub,
    state: &mut SessionState,
    mut payload: Payload,
    finishing: &BackToIdle<'_, SessionState>,
    gather: bool,
) -> Result<Outcome, SessionError> {
    let (config, env) = (&shared.config, &shared.env);
    let bytes = payload::encode_capped(&mut payload, config.payload_compression, &Limits::DEFAULT)
        .map_err(SessionError::Payload)?;
    // In the payload (and so the report) already; said here where the rank is heard.
    if !notice::is_quiet() {
        for dropped in &payload.header.dropped {
            say!(
                "{} rows of `{}` dropped (past max_data_points = {} or the payload's size limit)",
                dropped.rows,
                dropped.table,
                config.max_data_points
            );
        }
    }
    // Owned: the transport is borrowed mutably below.
    let run_id = state.rendezvous.run_id.clone();
    let name = SpillName {
        rank: env.rank,
        run_id: run_id.as_deref(),
        process: state.process,
    };
    let spill_file =
        spill::write(&state.dir, &name, &bytes).map_err(|source| SessionError::Spill {
            rank: env.rank,
            dir: state.dir.clone(),
            source,
        })?;
    finishing.spilled();
    // The final file holds what the flushes wrote: they go.
    for part in spill::parts(&state.dir, &name).unwrap_or_default() {
        let _ = std::fs::remove_file(part);
    }
    let mut outcome = Outcome {
        session_dir: state.dir.clone(),
        spill_file,
        payload_bytes: bytes.len(),
        ..Outcome::default()
    };
    if !gather {
        return Ok(outcome);
    }
    // Only now, with this rank's data safe on disk, anything that waits for
    // the others: the clocks compared again, then the gather.
    let deadline = Instant::now() + Duration::from_secs_f64(config.gather_timeout_s);
    let info = session_info(
        env,
        &state.id,
        state.rendezvous.run_id.as_deref(),
        &state.dir,
        state.start_unix_ns,
    );
    let bytes = match state.transport.resync(&info, deadline) {
        Some(offset) => {
            // The spill file is rewritten too: it holds what rank 0 gets.
            payload.header.clock.offset_at_finish = Some(offset);
            let bytes =
                payload::encode_capped(&mut payload, config.payload_compression, &Limits::DEFAULT)
                    .map_err(SessionError::Payload)?;
            spill::write(&state.dir, &name, &bytes).map_err(|source| SessionError::Spill {
                rank: env.rank,
                dir: state.dir.clone(),
                source,
            })?;
            bytes
        }
        None => bytes,
    };
    let info = SessionInfo {
        spill_file: Some(&outcome.spill_file),
        ..session_info(
            env,
            &state.id,
            state.rendezvous.run_id.as_deref(),
            &state.dir,
            state.start_unix_ns,
        )
    };
    let gathered = state
        .transport
        .gather(&bytes, &info, deadline)
        .map_err(|source| SessionError::Transport {
            stage: "gather",
            source,
        })?;
    if let Some(gathered) = gathered {
        outcome.report = report(shared, &gathered, &state.dir)?;
        outcome.gathered = Some(gathered.into());
    }
    Ok(outcome)
}

/// Rank 0's report of what it gathered into `dir` (the session's, or a
/// window's), by the reporter set or the default.
pub(crate) fn report(
    shared: &Hub,
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
    let reporter = shared.reporter.get().cloned().or_else(default_reporter);
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
        .report(gathered, dir, &shared.config)
        .map(Some)
        .map_err(|source| SessionError::Report {
            dir: dir.to_path_buf(),
            source,
        })
}

/// This rank's payload: the header and every thread's records as batches.
fn build_payload(
    shared: &Hub,
    state: &SessionState,
    duration_ns: u64,
    sampler: SamplerStats,
    unwritten: Vec<Payload>,
) -> Result<Payload, SessionError> {
    let (builders, overflow) = shared.recorder.drain();
    let mut header = header(shared, state, duration_ns, sampler);
    header.overflow = overflow;
    header.notices = notice::take_kept();
    header.dropped = shared
        .recorder
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
    let parts = spill::parts(&state.dir, &state.spill_name(&shared.env)).unwrap_or_default();
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
    Ok(Payload::concat(all, shared.config.max_data_points)
        .map_err(SessionError::Batch)?
        .expect("at least the last part"))
}

fn header(
    shared: &Hub,
    state: &SessionState,
    duration_ns: u64,
    sampler: SamplerStats,
) -> PayloadHeader {
    let env = &shared.env;
    let gpus = shared.telemetry.describe_gpus();
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
            host: gethostname::gethostname().to_string_lossy().into_owned(),
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
        // Counted once, in the final payload (see `build_payload`).
        dropped: Vec::new(),
        overflow: Overflow::default(),
        flushed_until_ns: None,
        notices: Vec::new(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        encode_ns: None,
        window: None,
    }
}
