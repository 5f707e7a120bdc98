//! Sessions: one per job run. Starting a session opens the transport (the
//! rendezvous) and the sampler; finishing it builds this rank's payload,
//! spills it to the session directory, gathers on rank 0 through the
//! transport and, on rank 0, has the reporter write the report.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rankscope_common::env::RankEnv;
use rankscope_common::error::Chain;
use rankscope_common::gather::{Gathered, ReportFiles, Skipped};
use rankscope_common::parallel::{ParallelCoord, ParallelLayout};
use rankscope_common::spill::SpillName;
use rankscope_common::text::rank_ranges;
use rankscope_common::Config;

use crate::flusher::Flusher;
use crate::notice::{notice, say, Notices};
use crate::reporter::Reporter;
use crate::sampler::{Sampler, Telemetry};
use crate::signals::OnStop;
use crate::slot::{Phase, Slot};
use crate::sync::lock;
use crate::transport::{clock, Rendezvous, SessionInfo, Transport};
use control::SessionControl;
use windows::WindowsThread;

mod control;
mod error;
mod finish;
mod flush;
mod naming;
mod recording;
mod window_rows;
mod windows;

use crate::control::WindowControl;
pub use error::SessionError;
use flush::{periodic_flush, Flushes};
use naming::session_dir;
use naming::{capped, capped_tags, process_tag, session_id, MAX_NAME_BYTES};
use rankscope_common::file::create_real_dir;
pub(crate) use recording::Recording;
use window_rows::{WindowPayload, WindowRows};
pub use windows::PlannedWindow;

/// What a running session knows about itself.
pub(crate) struct SessionState {
    id: String,
    name: String,
    tags: Vec<(String, String)>,
    /// This rank's node, as the payload names it: the host, or the node
    /// the launcher named (`RANKSCOPE_NODE`).
    host: String,
    dir: PathBuf,
    start_unix_ns: i64,
    /// Its place among the sessions this process started
    /// ([`SessionInfo::index`]).
    index: u32,
    /// Tells this process's spill files from any other's.
    process: u64,
    /// What the transport's rendezvous established.
    rendezvous: Rendezvous,
    /// The transport, taken from the profiler for the session's length.
    transport: Box<dyn Transport>,
    /// The session's telemetry thread.
    sampler: Option<Sampler>,
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
    env: &'a RankEnv,
    id: &'a str,
    run_id: Option<&'a str>,
    dir: &'a Path,
    (started_unix_ns, index): (i64, u32),
) -> SessionInfo<'a> {
    SessionInfo {
        rank: env.rank,
        world_size: env.world_size,
        session_id: id,
        run_id,
        launch_run_id: env.run_id.as_deref(),
        session_dir: dir,
        spill_file: None,
        started_unix_ns,
        index,
        control: None,
    }
}

/// The hub behind an enabled profiler: what its sessions share with the
/// hot path (the recorder) and with each other. Sessions start, flush,
/// spill and finish through it, one at a time (its slot says which phase).
///
/// Its locks are taken in the order [`crate::lock_order`] writes down,
/// checked in debug builds.
pub(crate) struct Hub {
    /// What stages, steps and record calls touch.
    recording: Recording,
    config: Config,
    env: RankEnv,
    /// GPU and host sampling.
    telemetry: Telemetry,
    /// The session, in whichever phase it is.
    session: Slot<SessionState>,
    /// The transport between sessions; the running session's windows thread,
    /// flushes and flusher, and what a stop signal does to it.
    control: SessionControl,
    reporter: OnceLock<Arc<dyn Reporter>>,
    /// This profiler's notices: its calls and threads enter them.
    notices: Arc<Notices>,
    /// The rank's parallel coordinates, as the last kernel trace read
    /// gave them, else as `parallel_layout` places the rank: its payloads'
    /// headers carry them.
    parallel: Mutex<Vec<ParallelCoord>>,
}

impl Hub {
    /// What stages, steps and record calls touch.
    #[inline(always)]
    pub(crate) fn recording(&self) -> &Recording {
        &self.recording
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The rank.
    pub(crate) fn env(&self) -> &RankEnv {
        &self.env
    }

    /// GPU and host sampling.
    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Sets what rank 0 does with the gathered payloads; `false` where a
    /// reporter was set already.
    pub(crate) fn set_reporter(&self, reporter: Arc<dyn Reporter>) -> bool {
        self.reporter.set(reporter).is_ok()
    }

    /// The running session's name, where one runs.
    pub(crate) fn running_session(&self) -> Option<String> {
        self.session.with_running(|s| s.name.clone())
    }

    /// Notes the rank's parallel coordinates, for its payloads' headers.
    pub(crate) fn set_parallel(&self, coordinates: Vec<ParallelCoord>) {
        *lock(&self.parallel) = coordinates;
    }

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
        let quiet = config.quiet_ranks && env.world_size > 1;
        Hub {
            notices: Notices::new(env.rank, quiet),
            recording: Recording::new(&config),
            telemetry: Telemetry::new(&config, &env),
            config,
            env,
            session: Slot::default(),
            control: SessionControl::new(transport),
            reporter: chosen,
            parallel: Mutex::default(),
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
    hub: Option<Arc<Hub>>,
    /// The process that started the session: a forked child has the
    /// session's memory but none of its threads, and must leave it alone.
    pid: u32,
}

impl Session {
    /// A session of a disabled profiler.
    pub(crate) fn inert() -> Self {
        Session {
            hub: None,
            pid: std::process::id(),
        }
    }

    pub(crate) fn start(
        hub: Arc<Hub>,
        name: &str,
        tags: &[(&str, &str)],
    ) -> Result<Self, SessionError> {
        let _entered = hub.notices.enter();
        // Counted first: a start that fails on this rank alone still counts,
        // as the others' does.
        let index = hub.control.count_start();
        hub.telemetry.prepare();
        let starting = hub.session.start(|phase| match phase {
            Phase::Running(running) => SessionError::AlreadyRunning(running.name.clone()),
            _ => SessionError::AlreadyRunning("(another, starting or finishing)".into()),
        })?;
        let (config, env) = (&hub.config, &hub.env);
        if env.world_size > config.max_world_size {
            return Err(SessionError::WorldTooLarge {
                world_size: env.world_size,
                max: config.max_world_size,
            });
        }
        *lock(&hub.parallel) = declared_coordinates(config, env);
        let name = capped(
            "session name",
            config.session.as_deref().unwrap_or(name),
            MAX_NAME_BYTES,
        );
        let id = capped("session id", &session_id(config, env)?, MAX_NAME_BYTES);
        let dir = session_dir(config, &name, &id);
        create_real_dir(&dir).map_err(|source| SessionError::SessionDir {
            path: dir.clone(),
            source,
        })?;
        // Taken once the transport is made (MPI's initialisation, the first
        // time), so that the start is close to the recorder's zero.
        let transport = hub.control.take_transport(&hub.config, &hub.env)?;
        let start_unix_ns = clock::wall_now_ns(config.clock_shift_ns);
        let started = (start_unix_ns, index);
        let (control, inbox) = WindowControl::new(hub.recording.steps().clone());
        let (transport, rendezvous) =
            hub.open_transport(transport, (&id, &dir, started), &control)?;
        let windows = (dir.clone(), rendezvous.run_id.clone());
        hub.recording.recorder().begin_session();
        *hub.control.flushes() = Flushes::default();
        hub.recording.set_parts_taken(0);
        starting.running(SessionState {
            id,
            name,
            tags: capped_tags(tags),
            host: match &env.node {
                Some(node) => capped("node name", node, MAX_NAME_BYTES),
                None => gethostname::gethostname().to_string_lossy().into_owned(),
            },
            dir,
            start_unix_ns,
            index,
            process: process_tag(start_unix_ns),
            rendezvous,
            transport,
            sampler: hub.telemetry.start(hub.recording.recorder()),
        });
        hub.control.run_flusher(periodic_flusher(&hub));
        hub.control.watch_stop_signals(
            (hub.config.spill_on_signal).then(|| spill_on_stop(Arc::downgrade(&hub))),
        );
        hub.control
            .run_windows(WindowsThread::start(&hub, windows, inbox));
        Ok(Session {
            hub: Some(hub),
            pid: std::process::id(),
        })
    }

    /// The session directory (`None` for a disabled profiler, or in a
    /// forked child).
    pub fn dir(&self) -> Option<PathBuf> {
        self.check_process().ok()?;
        let hub = self.hub.as_ref()?;
        hub.session.with_running(|s| s.dir.clone())
    }

    /// Writes what this rank recorded since the last flush to a part file
    /// of its own now, as the periodic flushes (`flush_interval_s`) do;
    /// the session goes on, and its rows' memory is kept for the next.
    /// `false` when there was nothing new to write, or no session records
    /// (a disabled profiler, a session a stop signal ended). Rows whose
    /// part cannot be written stay for the final spill file.
    pub fn flush(&self) -> Result<bool, SessionError> {
        self.check_process()?;
        match &self.hub {
            Some(hub) => {
                let _entered = hub.notices.enter();
                hub.flush()
            }
            None => Ok(false),
        }
    }

    /// Ends the session: spills this rank's payload, gathers on rank 0 (which
    /// waits at most `gather_timeout_s` for the others) and, on rank 0,
    /// writes the report.
    pub fn finish(mut self) -> Result<Outcome, SessionError> {
        self.leave_if_forked()?;
        match self.hub.take() {
            Some(hub) => {
                let _entered = hub.notices.enter();
                hub.finish(true)
            }
            None => Ok(Outcome::default()),
        }
    }

    /// In a forked child, forgets the session without touching it: its
    /// threads (sampler, flusher) do not exist there, and its state must
    /// never be dropped there (that would wait for them).
    fn leave_if_forked(&mut self) -> Result<(), SessionError> {
        let forked = self.check_process();
        if forked.is_err() {
            if let Some(hub) = self.hub.take() {
                std::mem::forget(hub);
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
        if let Some(hub) = self.hub.take() {
            let _entered = hub.notices.enter();
            if let Err(e) = hub.finish(false) {
                say!(
                    "session dropped unfinished; spilling its data failed: {}",
                    Chain(&e)
                );
            }
        }
    }
}

/// The periodic flushes of the session of `hub`, where configured.
fn periodic_flusher(hub: &Arc<Hub>) -> Option<Flusher> {
    let interval = hub.config.flush_interval_s;
    if interval <= 0.0 {
        return None;
    }
    Flusher::start(
        periodic_flush(Arc::downgrade(hub)),
        Duration::from_secs_f64(interval),
    )
}

/// What a stop signal does for the session of `hub`: spill it, and say
/// where it went.
fn spill_on_stop(hub: Weak<Hub>) -> Arc<OnStop> {
    Arc::new(move |signal| {
        let Some(hub) = hub.upgrade() else {
            return;
        };
        let _entered = hub.notices.enter();
        match hub.spill_running() {
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

impl Hub {
    /// `transport` opened for a session (the rendezvous), by the gather
    /// timeout; put back where it failed.
    fn open_transport(
        &self,
        mut transport: Box<dyn Transport>,
        (id, dir, started): (&str, &Path, (i64, u32)),
        control: &WindowControl,
    ) -> Result<(Box<dyn Transport>, Rendezvous), SessionError> {
        let env = &self.env;
        let proposal = SessionInfo {
            control: Some(control),
            ..session_info(env, id, env.run_id.as_deref(), dir, started)
        };
        let deadline = Instant::now() + Duration::from_secs_f64(self.config.gather_timeout_s);
        match transport.open(&proposal, deadline) {
            Ok(rendezvous) => Ok((transport, rendezvous)),
            Err(source) => {
                self.control.put_back(transport);
                Err(SessionError::Transport {
                    stage: "rendezvous",
                    source,
                })
            }
        }
    }
}

/// The rank's coordinates in the job's `parallel_layout`, where one is set
/// and fits the world (a notice says why not where it does not).
fn declared_coordinates(config: &Config, env: &RankEnv) -> Vec<ParallelCoord> {
    let Some(text) = &config.parallel_layout else {
        return Vec::new();
    };
    // Checked as the configuration was read.
    let Ok(layout) = text.parse::<ParallelLayout>() else {
        return Vec::new();
    };
    if layout.ranks() != u64::from(env.world_size) {
        notice!(
            "parallel_layout {text:?} places {} ranks, this job has {}: the report labels no \
             rank by it",
            layout.ranks(),
            env.world_size
        );
        return Vec::new();
    }
    layout.coordinates(env.rank)
}
