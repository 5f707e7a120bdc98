//! The profiler: the handle a rank records through, and its builder.

use std::sync::Arc;

use rankscope_common::config::ConfigError;
use rankscope_common::env::{self, EnvError, RankEnv};
use rankscope_common::table::{EventRecord, MemorySnapshotRecord, Table};
use rankscope_common::Config;

use crate::recorder::{Recorder, Section};
use crate::session::PlannedWindow;
use crate::session::{Hub, Recording, Session, SessionError};
use crate::stage::{OpenStageId, StageGuard};
use crate::stage_name::StageName;
use crate::transport::Transport;
use crate::{MemoryReading, Reporter};

mod diffusion;

/// Why a profiler could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfilerError {
    /// The configuration file or a `RANKSCOPE_*` variable is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A launcher variable is invalid.
    #[error("rank environment")]
    Env(#[from] EnvError),
}

/// The handle a rank records through. Cheap to clone; clones share one
/// recording. A disabled profiler makes every call a no-op.
#[derive(Clone)]
pub struct Profiler {
    enabled: Option<Arc<Hub>>,
}

/// Makes a [`Profiler`] with a rank environment, transport or reporter of
/// the program's choosing.
///
/// ```
/// let out = tempfile::tempdir().unwrap();
/// let config = rankscope::Config { output_dir: out.path().into(), ..Default::default() };
/// let profiler = rankscope::Profiler::builder(config)
///     .rank_env(rankscope::RankEnv::single())
///     .transport(rankscope::transport::dir::DirTransport)
///     .build()
///     .unwrap();
/// assert!(profiler.is_enabled());
/// ```
#[must_use]
pub struct ProfilerBuilder {
    config: Config,
    env: Option<RankEnv>,
    transport: Option<Box<dyn Transport>>,
    reporter: Option<Arc<dyn Reporter>>,
}

impl ProfilerBuilder {
    /// Where this process sits in the job (default: detected from the
    /// launcher's variables).
    pub fn rank_env(mut self, env: RankEnv) -> Self {
        self.env = Some(env);
        self
    }

    /// The transport every session of the profiler uses (default: the one
    /// configuration and launcher call for), e.g. one over a communicator
    /// the program owns.
    pub fn transport(mut self, transport: impl Transport + 'static) -> Self {
        self.transport = Some(Box::new(transport));
        self
    }

    /// What rank 0 does with the gathered payloads (default: write the
    /// report, with the `report` feature).
    pub fn reporter(mut self, reporter: Arc<dyn Reporter>) -> Self {
        self.reporter = Some(reporter);
        self
    }

    /// The profiler; checks the configuration's ranges, and detects the
    /// rank environment if none was given.
    pub fn build(mut self) -> Result<Profiler, ProfilerError> {
        self.config.validate()?;
        if !self.config.enabled {
            // Off means off: no launcher variable is read, so none can fail.
            return Ok(Profiler::disabled());
        }
        let env = match self.env.take() {
            Some(env) => env,
            None => env::detect()?,
        };
        Ok(self.build_with(env))
    }

    fn build_with(self, env: RankEnv) -> Profiler {
        if !self.config.enabled {
            return Profiler::disabled();
        }
        Profiler {
            enabled: Some(Arc::new(Hub::new(
                self.config,
                env,
                self.transport,
                self.reporter,
            ))),
        }
    }
}

impl Profiler {
    /// A profiler configured by `RANKSCOPE_CONFIG` and `RANKSCOPE_*`
    /// variables, for the rank the launcher's variables describe.
    pub fn from_env() -> Result<Self, ProfilerError> {
        Self::new(Config::from_env()?)
    }

    /// A profiler with `config`, for the rank the launcher's variables describe.
    pub fn new(config: Config) -> Result<Self, ProfilerError> {
        Self::builder(config).build()
    }

    /// A profiler with `config` for the rank `env` describes. A
    /// configuration outside its ranges gives a disabled profiler, and says
    /// why ([`Profiler::builder`] returns the error instead).
    pub fn with_rank_env(config: Config, env: RankEnv) -> Self {
        if let Err(e) = config.validate() {
            crate::notice::say_now(format_args!("profiling off: {e}"));
            return Self::disabled();
        }
        Self::builder(config).build_with(env)
    }

    /// A builder, for a transport or reporter of the program's own.
    pub fn builder(config: Config) -> ProfilerBuilder {
        ProfilerBuilder {
            config,
            env: None,
            transport: None,
            reporter: None,
        }
    }

    /// A profiler that records nothing.
    pub fn disabled() -> Self {
        Profiler { enabled: None }
    }

    /// Replaces what rank 0 does with the gathered payloads (by default,
    /// with the `report` feature, it writes the report). Returns `false` if
    /// a reporter was already set.
    #[deprecated(
        since = "0.1.0",
        note = "give the reporter to the builder: `Profiler::builder(config).reporter(r)`"
    )]
    pub fn set_reporter(&self, reporter: Arc<dyn Reporter>) -> bool {
        match &self.enabled {
            Some(hub) => hub.set_reporter(reporter),
            None => false,
        }
    }

    /// Whether the profiler records.
    pub fn is_enabled(&self) -> bool {
        self.enabled.is_some()
    }

    /// The configuration (`None` when disabled).
    pub fn config(&self) -> Option<&Config> {
        self.enabled.as_deref().map(|hub| hub.config())
    }

    /// Where this process sits in the job (`None` when disabled).
    pub fn rank_env(&self) -> Option<&RankEnv> {
        self.enabled.as_deref().map(|hub| hub.env())
    }

    /// Starts the job's session; every rank calls this with the same name.
    /// Tags are free-form `(key, value)` pairs shown in the report.
    pub fn session(&self, name: &str, tags: &[(&str, &str)]) -> Result<Session, SessionError> {
        match &self.enabled {
            None => Ok(Session::inert()),
            Some(hub) => Session::start(Arc::clone(hub), name, tags),
        }
    }

    /// Times a stage until the guard drops. Stages nest per thread.
    #[inline]
    pub fn stage(&self, name: &str) -> StageGuard<'_> {
        StageGuard::new(
            self.recording_core()
                .map(|core| (core, core.recorder().begin_stage(name, None))),
        )
    }

    /// Times a stage named by `name` until the guard drops: no hashing of
    /// the name after a thread's first use of it. [`stage!`](crate::stage!)
    /// makes the `StageName` a `static` of the call site.
    #[inline]
    pub fn stage_named(&self, name: &StageName) -> StageGuard<'_> {
        StageGuard::new(
            self.recording_core()
                .map(|core| (core, core.recorder().begin_named_stage(name, None))),
        )
    }

    /// Like [`Profiler::stage`], with metadata kept as JSON text on the stage.
    pub fn stage_with(&self, name: &str, metadata: &serde_json::Value) -> StageGuard<'_> {
        StageGuard::new(self.recording_core().map(|core| {
            let metadata = Some(json_text(metadata));
            (core, core.recorder().begin_stage(name, metadata))
        }))
    }

    /// Begins a stage named by `name` without a guard, for bindings and
    /// loops that hold the name; [`Profiler::end`] ends it on the same
    /// thread. `None` when no session records.
    #[inline]
    pub fn begin(
        &self,
        name: &StageName,
        metadata: Option<&serde_json::Value>,
    ) -> Option<OpenStageId> {
        let rec = self.recording()?;
        Some(OpenStageId(
            rec.begin_named_stage(name, metadata.map(json_text)),
        ))
    }

    /// Ends a stage [`Profiler::begin`] began on this thread. Stages begun
    /// inside it and still open stay open (and nested in it) until they end.
    #[inline]
    pub fn end(&self, stage: OpenStageId) {
        if let Some(hub) = self.enabled.as_deref() {
            hub.recording().end_stage(stage.0);
        }
    }

    /// Ends the innermost stage named by `name` open on this thread (begun
    /// by [`Profiler::begin`] or any other way); `false` if there is none.
    /// Ending by name needs no id kept per call: what a binding's
    /// re-entrant stage object does.
    #[inline]
    pub fn end_named(&self, name: &StageName) -> bool {
        match self.enabled.as_deref() {
            Some(hub) => hub
                .recording()
                .ended(hub.recording().recorder().stop_named_stage(name)),
            None => false,
        }
    }

    /// Ends a step (a denoising step, a decode step, a batch): windows of
    /// the running session open and close at step boundaries
    /// (`window_every_steps`, `rankscope trigger`). Every rank must call it
    /// at the same points of its work, for the same window to cover the
    /// same steps everywhere. Costs an atomic increment (and, at a
    /// window's edge, a clock reading and a wake of the windows thread).
    #[inline]
    pub fn step(&self) {
        if let Some(hub) = self.enabled.as_deref() {
            hub.recording().step();
        }
    }

    /// Steps ended (`Profiler::step`) since the running session started.
    pub fn step_count(&self) -> u64 {
        self.enabled
            .as_deref()
            .map_or(0, |hub| hub.recording().steps().count())
    }

    /// The window of the running session planned or open now, if any: a
    /// program that captures windows of its own (the Python package's
    /// torch.profiler, for `rankscope trigger --torch`) follows it by the
    /// step count.
    pub fn planned_window(&self) -> Option<PlannedWindow> {
        self.enabled.as_deref()?.recording().steps().current()
    }

    /// What this rank is recording right now: cheap enough to poll, for a
    /// progress line or a dashboard.
    pub fn live_state(&self) -> LiveState {
        let Some(hub) = self.enabled.as_deref() else {
            return LiveState::default();
        };
        let recorder = hub.recording().recorder();
        LiveState {
            session: hub.running_session(),
            elapsed_s: recorder
                .is_recording()
                .then(|| recorder.now_ns() as f64 / 1e9),
            open_stages: recorder.open_stage_names(),
            rows: recorder
                .row_counts()
                .into_iter()
                .map(|(table, held, dropped)| (table.name(), held, dropped))
                .collect(),
        }
    }

    /// Begins a stage without a guard; [`Profiler::stop`] ends it on the same thread.
    #[deprecated(
        since = "0.1.0",
        note = "time a stage with a guard (`stage`, `stage!`), or `begin` and `end_named`"
    )]
    #[inline]
    pub fn start(&self, name: &str) {
        if let Some(rec) = self.recording() {
            rec.begin_stage(name, None);
        }
    }

    /// Ends the innermost open stage called `name` on this thread; `false`
    /// if there is none.
    #[deprecated(
        since = "0.1.0",
        note = "time a stage with a guard (`stage`, `stage!`), or `begin` and `end_named`"
    )]
    #[inline]
    pub fn stop(&self, name: &str) -> bool {
        // Also after the session ended: the stage leaves the open stack.
        match self.enabled.as_deref() {
            Some(hub) => hub
                .recording()
                .ended(hub.recording().recorder().stop_stage(name)),
            None => false,
        }
    }

    /// Records a custom metric.
    #[inline]
    pub fn record_metric(&self, name: &str, value: f64) {
        if let Some(rec) = self.recording() {
            record_metric(rec, Section::Custom, name, value);
        }
    }

    /// Records `items` processed in `seconds` (default: since the session
    /// started) as two `throughput` metrics: `items` and `items_per_s`.
    pub fn record_throughput(&self, items: f64, seconds: Option<f64>) {
        if let Some(rec) = self.recording() {
            let seconds = seconds.unwrap_or_else(|| rec.now_ns() as f64 / 1e9);
            record_metric(rec, Section::Throughput, "items", items);
            if seconds > 0.0 {
                record_metric(rec, Section::Throughput, "items_per_s", items / seconds);
            }
        }
    }

    /// Records the GPU time of one call of stage `name`, measured by the
    /// caller (CUDA events resolved at the session's end, say): the report
    /// shows it beside the stage's host time.
    pub fn record_stage_gpu_time(&self, name: &str, ms: f64) {
        if let Some(rec) = self.recording() {
            record_metric(rec, Section::StageGpu, name, ms);
        }
    }

    /// Records an event with a JSON payload.
    pub fn add_event(&self, name: &str, payload: &serde_json::Value) {
        if let Some(rec) = self.recording() {
            let payload = (!payload.is_null()).then(|| json_text(payload));
            rec.record_row(Table::Events, |t, ticks| {
                let name = t.names.intern(name);
                t.records.events.push_back(EventRecord {
                    ts_ns: ticks,
                    name,
                    payload,
                });
            });
        }
    }

    /// Records a labelled memory snapshot. With no numbers given
    /// (`MemoryReading::default()`), the rank's first GPU is read: from NVML,
    /// allocated is this process's device memory and reserved the device's
    /// memory in use.
    pub fn memory_snapshot(&self, label: &str, reading: MemoryReading) {
        self.memory_snapshot_from(label, "caller", reading);
    }

    /// Like [`Profiler::memory_snapshot`], naming where the numbers given
    /// come from (`torch`, say) instead of `caller`.
    pub fn memory_snapshot_from(&self, label: &str, source: &str, reading: MemoryReading) {
        let Some(hub) = self.enabled.as_deref() else {
            return;
        };
        let Some(rec) = self.recording() else {
            return;
        };
        let read = if reading == MemoryReading::default() {
            hub.telemetry()
                .lock_gpu_within(GPU_READER_WAIT)
                .and_then(|mut gpu| Some((gpu.source().as_str(), gpu.memory(0)?)))
        } else {
            None
        };
        let (source, reading) = read.unwrap_or((source, reading));
        rec.record_row(Table::MemorySnapshots, |t, ticks| {
            let label = t.names.intern(label);
            let source = t.names.intern(source);
            t.records.memory_snapshots.push_back(MemorySnapshotRecord {
                ts_ns: ticks,
                label,
                source,
                gpu: reading.gpu,
                allocated_bytes: reading.allocated_bytes,
                reserved_bytes: reading.reserved_bytes,
                max_allocated_bytes: reading.max_allocated_bytes,
            });
        });
    }

    /// The recorder, when a session is recording.
    #[inline(always)]
    pub(crate) fn recording(&self) -> Option<&Recorder> {
        self.recording_core().map(|core| &**core.recorder())
    }

    /// The recorder of an enabled profiler, recording or not.
    pub(crate) fn recorder(&self) -> Option<&Recorder> {
        self.enabled
            .as_deref()
            .map(|hub| &**hub.recording().recorder())
    }

    /// The hot core, when a session is recording.
    #[inline(always)]
    fn recording_core(&self) -> Option<&Recording> {
        self.recording_hub().map(Hub::recording)
    }

    /// The hub, while a session records.
    #[inline(always)]
    pub(crate) fn recording_hub(&self) -> Option<&Hub> {
        let hub = self.enabled.as_deref()?;
        hub.recording().recorder().is_recording().then_some(hub)
    }
}

/// A rank's recording at one moment ([`Profiler::live_state`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveState {
    /// The running session's name.
    pub session: Option<String>,
    /// Seconds since the session started, while one records.
    pub elapsed_s: Option<f64>,
    /// Stages open on every thread, innermost last per thread.
    pub open_stages: Vec<String>,
    /// Per table: its name, rows held in live threads' buffers (rows that
    /// were flushed or belong to exited threads are not counted), rows
    /// dropped by the row budget so far.
    pub rows: Vec<(&'static str, u64, u64)>,
}

/// The longest stage metadata or event payload kept, bytes of JSON text.
const MAX_JSON_BYTES: usize = 64 << 10;

/// How long a memory snapshot waits for the GPU reader (a reading may hold
/// it): past that, the snapshot keeps the caller's numbers.
const GPU_READER_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// `value` as JSON text; past [`MAX_JSON_BYTES`], a note of its size
/// instead, so that a row costs bounded memory.
fn json_text(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if text.len() <= MAX_JSON_BYTES {
        return text;
    }
    serde_json::json!({ "rankscope_cut": format!("{} bytes of JSON, past the {MAX_JSON_BYTES}-byte limit", text.len()) })
        .to_string()
}

fn record_metric(recorder: &Recorder, section: Section, name: &str, value: f64) {
    recorder.record_row(Table::Metrics, |t, ticks| {
        t.push_metric(ticks, section, name, value)
    });
}
