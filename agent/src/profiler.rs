//! The profiler: the handle a rank records through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use rankscope_common::config::ConfigError;
use rankscope_common::env::{self, EnvError, RankEnv};
use rankscope_common::table::{BlockRow, DiffusionStepRow, Table};
use rankscope_common::Config;

use crate::recorder::{
    EventRecord, MetricRecord, OpenStage, Recorder, SnapshotRecord, StageRecord, ThreadData,
};
use crate::sampler::{gpu, SharedGpuReader};
use crate::session::{Session, SessionError, SessionState};
use crate::stage::StageGuard;
use crate::{BlockComputation, DiffusionStep, MemoryReading, Reporter};

/// Why a profiler could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfilerError {
    /// The configuration file or a `RANKSCOPE_*` variable is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A launcher variable is invalid.
    #[error("rank environment: {0}")]
    Env(#[from] EnvError),
}

/// The handle a rank records through. Cheap to clone; clones share one
/// recording. A disabled profiler makes every call a no-op.
#[derive(Clone)]
pub struct Profiler {
    inner: Option<Arc<Inner>>,
}

/// The state behind an enabled profiler.
pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) env: RankEnv,
    pub(crate) recorder: Recorder,
    pub(crate) reporter: OnceLock<Arc<dyn Reporter>>,
    epoch: Instant,
    /// Start of the running session, nanoseconds after `epoch`.
    origin_ns: AtomicU64,
    /// Generation of the running session; 0 when none runs.
    generation: AtomicU64,
    last_generation: AtomicU64,
    pub(crate) session: Mutex<Option<SessionState>>,
    /// The GPU reader, opened at the first session (`None`: no GPU telemetry).
    gpu: OnceLock<Option<SharedGpuReader>>,
}

impl Profiler {
    /// A profiler configured by `RANKSCOPE_CONFIG` and `RANKSCOPE_*`
    /// variables, for the rank the launcher's variables describe.
    pub fn from_env() -> Result<Self, ProfilerError> {
        Self::new(Config::from_env()?)
    }

    /// A profiler with `config`, for the rank the launcher's variables describe.
    pub fn new(config: Config) -> Result<Self, ProfilerError> {
        let env = env::detect()?;
        Ok(Self::with_rank_env(config, env))
    }

    /// A profiler with `config` for the rank `env` describes.
    pub fn with_rank_env(config: Config, env: RankEnv) -> Self {
        if !config.enabled {
            return Self::disabled();
        }
        let recorder = Recorder::new(config.max_data_points);
        Profiler {
            inner: Some(Arc::new(Inner {
                config,
                env,
                recorder,
                reporter: OnceLock::new(),
                epoch: Instant::now(),
                origin_ns: AtomicU64::new(0),
                generation: AtomicU64::new(0),
                last_generation: AtomicU64::new(0),
                session: Mutex::new(None),
                gpu: OnceLock::new(),
            })),
        }
    }

    /// A profiler that records nothing.
    pub fn disabled() -> Self {
        Profiler { inner: None }
    }

    /// Sets what rank 0 does with the gathered payloads at session end
    /// (`rankscope-coordinator` writes the report). Without one, rank 0
    /// gathers and keeps the spill files for `rankscope aggregate`. Returns
    /// `false` if a reporter was already set.
    pub fn set_reporter(&self, reporter: Arc<dyn Reporter>) -> bool {
        match &self.inner {
            Some(inner) => inner.reporter.set(reporter).is_ok(),
            None => false,
        }
    }

    /// Whether the profiler records.
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The configuration (`None` when disabled).
    pub fn config(&self) -> Option<&Config> {
        self.inner.as_deref().map(|inner| &inner.config)
    }

    /// Where this process sits in the job (`None` when disabled).
    pub fn rank_env(&self) -> Option<&RankEnv> {
        self.inner.as_deref().map(|inner| &inner.env)
    }

    /// Starts the job's session; every rank calls this with the same name.
    /// Tags are free-form `(key, value)` pairs shown in the report.
    pub fn session(&self, name: &str, tags: &[(&str, &str)]) -> Result<Session, SessionError> {
        match &self.inner {
            None => Ok(Session::inert()),
            Some(inner) => Session::start(Arc::clone(inner), name, tags),
        }
    }

    /// Times a stage until the guard drops. Stages nest per thread.
    #[inline]
    pub fn stage(&self, name: &str) -> StageGuard<'_> {
        StageGuard::new(
            self.recording()
                .map(|(inner, g)| (inner, inner.begin_stage(g, name, None))),
        )
    }

    /// Like [`Profiler::stage`], with metadata kept as JSON text on the stage.
    pub fn stage_with(&self, name: &str, metadata: &serde_json::Value) -> StageGuard<'_> {
        StageGuard::new(self.recording().map(|(inner, g)| {
            (
                inner,
                inner.begin_stage(g, name, Some(metadata.to_string())),
            )
        }))
    }

    /// Begins a stage without a guard; [`Profiler::stop`] ends it on the same thread.
    #[inline]
    pub fn start(&self, name: &str) {
        if let Some((inner, g)) = self.recording() {
            inner.begin_stage(g, name, None);
        }
    }

    /// Ends the innermost open stage called `name` on this thread; `false`
    /// if there is none.
    #[inline]
    pub fn stop(&self, name: &str) -> bool {
        match self.recording() {
            Some((inner, _)) => inner.stop_stage(name),
            None => false,
        }
    }

    /// Records a custom metric.
    #[inline]
    pub fn record_metric(&self, name: &str, value: f64) {
        if let Some((inner, _)) = self.recording() {
            inner.record_metric("custom", name, value);
        }
    }

    /// Records `items` processed in `seconds` (default: since the session
    /// started) as two `throughput` metrics: `items` and `items_per_s`.
    pub fn record_throughput(&self, items: f64, seconds: Option<f64>) {
        if let Some((inner, _)) = self.recording() {
            let seconds = seconds.unwrap_or_else(|| inner.session_elapsed_s());
            inner.record_metric("throughput", "items", items);
            if seconds > 0.0 {
                inner.record_metric("throughput", "items_per_s", items / seconds);
            }
        }
    }

    /// Records an event with a JSON payload.
    pub fn add_event(&self, name: &str, payload: &serde_json::Value) {
        if let Some((inner, _)) = self.recording() {
            let payload = (!payload.is_null()).then(|| payload.to_string());
            inner.record_row(Table::Events, |t, ts_ns| {
                let name = t.names.intern(name);
                t.events.push(EventRecord {
                    ts_ns,
                    name,
                    payload,
                });
            });
        }
    }

    /// Records one denoising step.
    #[inline]
    pub fn record_diffusion_step(&self, step: DiffusionStep) {
        if let Some((inner, _)) = self.recording() {
            inner.record_row(Table::DiffusionSteps, |t, ts_ns| {
                t.diffusion_steps.push(DiffusionStepRow {
                    ts_ns,
                    step: step.step,
                    timestep: step.timestep,
                    block_size: step.block_size,
                    computation_ms: step.computation_ms,
                    guidance_scale: step.guidance_scale,
                })
            });
        }
    }

    /// Records one block computation.
    #[inline]
    pub fn record_block_computation(&self, block: BlockComputation) {
        if let Some((inner, _)) = self.recording() {
            inner.record_row(Table::Blocks, |t, ts_ns| {
                t.blocks.push(BlockRow {
                    ts_ns,
                    block_index: block.block_index,
                    block_size: block.block_size,
                    computation_ms: block.computation_ms,
                    memory_mb: block.memory_mb,
                })
            });
        }
    }

    /// Records the parameter count of a model or component.
    pub fn record_model_parameters(&self, name: &str, count: u64) {
        if let Some((inner, _)) = self.recording() {
            inner.record_row(Table::ModelParameters, |t, _| {
                let name = t.names.intern(name);
                t.parameters.push((name, count));
            });
        }
    }

    /// Records a labelled memory snapshot. With no numbers given
    /// (`MemoryReading::default()`), the rank's first GPU is read: from NVML,
    /// allocated is this process's device memory and reserved the device's
    /// memory in use.
    pub fn memory_snapshot(&self, label: &str, reading: MemoryReading) {
        if let Some((inner, _)) = self.recording() {
            let (source, reading) = match inner.gpu_reader() {
                Some(gpu) if reading == MemoryReading::default() => {
                    let mut gpu = gpu.lock().unwrap_or_else(|e| e.into_inner());
                    match gpu.memory(0) {
                        Some(read) => (gpu.source().as_str(), read),
                        None => ("caller", reading),
                    }
                }
                _ => ("caller", reading),
            };
            inner.record_row(Table::MemorySnapshots, |t, ts_ns| {
                let label = t.names.intern(label);
                t.snapshots.push(SnapshotRecord {
                    ts_ns,
                    label,
                    source,
                    reading,
                });
            });
        }
    }

    /// The inner state and session generation, when a session is recording.
    #[inline(always)]
    fn recording(&self) -> Option<(&Inner, u64)> {
        let inner = self.inner.as_deref()?;
        let generation = inner.generation.load(Ordering::Relaxed);
        (generation != 0).then_some((inner, generation))
    }
}

impl Inner {
    /// Nanoseconds since the session started, on the monotonic clock.
    #[inline(always)]
    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch_ns()
            .saturating_sub(self.origin_ns.load(Ordering::Relaxed))
    }

    fn epoch_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn session_elapsed_s(&self) -> f64 {
        self.now_ns() as f64 / 1e9
    }

    /// The GPU reader, opened on first use; says once why GPU telemetry is off.
    pub(crate) fn gpu_reader(&self) -> Option<&SharedGpuReader> {
        self.gpu
            .get_or_init(|| match gpu::open(&self.config, &self.env) {
                Ok(reader) => reader.map(|r| Arc::new(Mutex::new(r))),
                Err(reason) => {
                    eprintln!(
                        "rankscope: rank {}: GPU telemetry off: {reason}",
                        self.env.rank
                    );
                    None
                }
            })
            .as_ref()
    }

    /// Starts the session clock and marks a session as recording; returns
    /// its generation.
    pub(crate) fn open_generation(&self) -> u64 {
        self.origin_ns.store(self.epoch_ns(), Ordering::Relaxed);
        let generation = self.last_generation.fetch_add(1, Ordering::Relaxed) + 1;
        self.generation.store(generation, Ordering::Release);
        generation
    }

    /// Stops recording.
    pub(crate) fn close_generation(&self) {
        self.generation.store(0, Ordering::Release);
    }

    #[inline]
    pub(crate) fn begin_stage(&self, generation: u64, name: &str, metadata: Option<String>) -> u64 {
        self.recorder.with_thread(|t| {
            let name = t.names.intern(name);
            let stage_id = t.next_stage;
            t.next_stage += 1;
            let call_index = t.next_call(name);
            t.open.push(OpenStage {
                stage_id,
                name,
                call_index,
                metadata,
                generation,
                start_ns: self.now_ns(),
            });
            stage_id
        })
    }

    #[inline]
    pub(crate) fn end_stage(&self, stage_id: u64) {
        let end_ns = self.now_ns();
        self.recorder.with_thread(|t| {
            if let Some(pos) = t.open.iter().rposition(|s| s.stage_id == stage_id) {
                self.close_open_stage(t, pos, end_ns);
            }
        });
    }

    fn stop_stage(&self, name: &str) -> bool {
        let end_ns = self.now_ns();
        self.recorder.with_thread(|t| {
            let name = t.names.intern(name);
            match t.open.iter().rposition(|s| s.name == name) {
                Some(pos) => {
                    self.close_open_stage(t, pos, end_ns);
                    true
                }
                None => false,
            }
        })
    }

    /// Removes open stage `pos` from the thread's stack and keeps it as a
    /// completed stage, if it belongs to the running session and fits.
    fn close_open_stage(&self, t: &mut ThreadData, pos: usize, end_ns: u64) {
        let open = t.open.remove(pos);
        if open.generation != self.generation.load(Ordering::Relaxed)
            || !self.recorder.admit(Table::Stages)
        {
            return;
        }
        let parent_id = pos.checked_sub(1).map(|p| t.open[p].stage_id);
        t.stages.push(StageRecord {
            name: open.name,
            stage_id: open.stage_id,
            parent_id,
            depth: pos as u32,
            start_ns: open.start_ns,
            end_ns,
            call_index: open.call_index,
            metadata: open.metadata,
        });
    }

    /// Records one row of `table`, stamped now, if the table has room.
    #[inline]
    pub(crate) fn record_row(&self, table: Table, push: impl FnOnce(&mut ThreadData, u64)) {
        let ts_ns = self.now_ns();
        if self.recorder.admit(table) {
            self.recorder.with_thread(|t| push(t, ts_ns));
        }
    }

    fn record_metric(&self, section: &str, name: &str, value: f64) {
        self.record_row(Table::Metrics, |t, ts_ns| {
            let section = t.names.intern(section);
            let name = t.names.intern(name);
            t.metrics.push(MetricRecord {
                ts_ns,
                section,
                name,
                value,
            });
        });
    }
}
