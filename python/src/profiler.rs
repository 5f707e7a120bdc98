//! `rankscope.Profiler` and what it hands out: stages, sessions and their
//! outcomes. The hot path (entering and leaving a stage) stays in Rust.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use pyo3::exceptions::{PyRuntimeError, PyRuntimeWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyString, PyType};

use crate::config::{config_error, Config};
use crate::function_trace::{self, Filters};
use crate::json::{self, Other};
use crate::SessionError;

/// What a profiler and the stages and sessions it hands out share.
struct Core {
    profiler: rankscope::Profiler,
    /// The session's GPU timer (CUDA events or synchronised host time), a
    /// Python object with `begin()` and `end(name, handle)`; `on` says
    /// whether one is set without taking the lock.
    gpu_timer: Mutex<Option<Py<PyAny>>>,
    gpu_timer_on: AtomicBool,
    /// The summary text of the last session this process reported.
    last_summary: Mutex<Option<String>>,
    /// What the session set up in Python (torch.profiler windows, the
    /// collectives' recording), an object whose `close()` undoes it when
    /// the session finishes.
    session_closer: Mutex<Option<Py<PyAny>>>,
}

/// The agent of one rank. `Profiler(config)` uses `config` as given;
/// `Profiler()` reads `RANKSCOPE_CONFIG` and the `RANKSCOPE_*` variables.
/// The launcher's variables (torchrun's, mpirun's) say which rank this is.
#[pyclass(subclass, frozen, module = "rankscope._rankscope", name = "Profiler")]
pub struct Profiler {
    core: Arc<Core>,
    /// The stage objects `stage(name)` made without metadata, by name:
    /// stages are re-entrant, so one object serves every call of a name.
    stages: Py<PyDict>,
}

/// The most stage objects a profiler keeps for reuse; past that,
/// `stage(name)` makes a new one each time.
const MAX_KEPT_STAGES: usize = 4096;

#[pymethods]
impl Profiler {
    #[new]
    #[pyo3(signature = (config=None))]
    fn new(py: Python<'_>, config: Option<PyRef<'_, Config>>) -> PyResult<Self> {
        let profiler = match config {
            Some(config) => rankscope::Profiler::new(config.inner.clone()),
            None => rankscope::Profiler::from_env(),
        }
        .map_err(profiler_error)?;
        Ok(Profiler {
            core: Arc::new(Core {
                profiler,
                gpu_timer: Mutex::new(None),
                gpu_timer_on: AtomicBool::new(false),
                last_summary: Mutex::new(None),
                session_closer: Mutex::new(None),
            }),
            stages: PyDict::new(py).unbind(),
        })
    }

    /// A profiler configured by `RANKSCOPE_CONFIG` and `RANKSCOPE_*`.
    #[classmethod]
    fn from_env<'py>(cls: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
        cls.call1((Config::from_env()?,))
    }

    /// A profiler configured by a YAML (or `.toml`) file, with
    /// `RANKSCOPE_*` variables over it.
    #[classmethod]
    fn from_yaml<'py>(cls: &Bound<'py, PyType>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
        cls.call1((Config::from_yaml(path)?,))
    }

    /// Whether the profiler records (`RANKSCOPE_ENABLED=0` or
    /// `Config(enabled=False)` turn it off).
    #[getter]
    fn enabled(&self) -> bool {
        self.core.profiler.is_enabled()
    }

    /// This process's rank (0 when disabled).
    #[getter]
    fn rank(&self) -> u32 {
        self.core.profiler.rank_env().map_or(0, |env| env.rank)
    }

    /// Ranks in the job (1 when disabled).
    #[getter]
    fn world_size(&self) -> u32 {
        self.core
            .profiler
            .rank_env()
            .map_or(1, |env| env.world_size)
    }

    /// The configuration (`None` when disabled).
    #[getter]
    fn config(&self) -> Option<Config> {
        self.core.profiler.config().map(|inner| Config {
            inner: inner.clone(),
        })
    }

    /// Starts the job's session; every rank calls this with the same name.
    /// Use it as a context manager, or call `finish()` on what it returns.
    /// The rendezvous with the other ranks runs without the interpreter's
    /// lock.
    #[pyo3(signature = (name, tags=None))]
    fn session(
        &self,
        py: Python<'_>,
        name: &str,
        tags: Option<&Bound<'_, PyMapping>>,
    ) -> PyResult<Session> {
        let text = |v: Bound<'_, PyAny>| -> PyResult<String> {
            Ok(v.str()?.to_string_lossy().into_owned())
        };
        let tags: Vec<(String, String)> = match tags {
            Some(tags) => tags
                .items()?
                .iter()
                .map(|item| {
                    let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
                    Ok((text(k)?, text(v)?))
                })
                .collect::<PyResult<_>>()?,
            None => Vec::new(),
        };
        let tags: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let profiler = &self.core.profiler;
        let session = py
            .detach(|| profiler.session(name, &tags))
            .map_err(|e| SessionError::new_err(chain(&e)))?;
        Ok(Session {
            core: Arc::clone(&self.core),
            running: Mutex::new(Some(session)),
            outcome: Mutex::new(None),
            pid: std::process::id(),
        })
    }

    /// A stage: `with prof.stage("vae_decode"): ...`. Stages nest per
    /// thread. The object can be kept and entered again and again (`decode
    /// = prof.stage("decode")`, then `with decode:` in a loop).
    #[pyo3(signature = (name, metadata=None))]
    fn stage<'py>(
        &self,
        name: &Bound<'py, PyString>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Stage>> {
        let py = name.py();
        let metadata = match metadata {
            Some(value) if !value.is_none() => Some(json::to_json(value, Other::AsText)?),
            _ => None,
        };
        let kept = self.stages.bind(py);
        if metadata.is_none() {
            if let Some(stage) = kept.get_item(name)? {
                return Ok(stage.cast_into::<Stage>()?);
            }
        }
        let stage = Bound::new(
            py,
            Stage {
                core: Arc::clone(&self.core),
                name: rankscope::StageName::new(&name.to_string_lossy()),
                metadata,
                gpu_calls: Mutex::new(Vec::new()),
            },
        )?;
        if stage.get().metadata.is_none() && kept.len() < MAX_KEPT_STAGES {
            kept.set_item(name, &stage)?;
        }
        Ok(stage)
    }

    /// Begins a stage without a context manager; `stop(name)` ends it on
    /// the same thread.
    fn start(&self, name: &str) {
        // Deprecated in Rust (a guard or `begin` there), Python's own way.
        #[allow(deprecated)]
        self.core.profiler.start(name);
    }

    /// Ends the innermost open stage called `name` on this thread; `False`
    /// if there is none.
    fn stop(&self, name: &str) -> bool {
        #[allow(deprecated)]
        self.core.profiler.stop(name)
    }

    /// Ends a step: rankscope's windows (`window_every_steps`, `rankscope
    /// trigger`) open and close at step boundaries.
    fn step(&self) {
        self.core.profiler.step();
    }

    /// Steps ended (`step()`) since the running session started.
    fn step_count(&self) -> u64 {
        self.core.profiler.step_count()
    }

    /// The window of the running session planned or open now, as
    /// `(index, first_step, steps, torch, python)`, or `None`.
    fn planned_window(&self) -> Option<(u32, u64, u64, bool, bool)> {
        self.core
            .profiler
            .planned_window()
            .map(|w| (w.index, w.first_step, w.steps, w.torch, w.python))
    }

    /// Records one denoising step.
    #[pyo3(signature = (step, timestep=0.0, block_size=0, computation_time_ms=0.0, guidance_scale=None))]
    fn record_diffusion_step(
        &self,
        step: u64,
        timestep: f64,
        block_size: u64,
        computation_time_ms: f64,
        guidance_scale: Option<f64>,
    ) {
        self.core
            .profiler
            .record_diffusion_step(rankscope::DiffusionStep {
                step,
                timestep,
                block_size,
                computation_ms: computation_time_ms,
                guidance_scale,
            });
    }

    /// Records one block computation (a group of frames made together).
    #[pyo3(signature = (block_index, block_size, computation_time_ms, memory_usage_mb=None))]
    fn record_block_computation(
        &self,
        block_index: u64,
        block_size: u64,
        computation_time_ms: f64,
        memory_usage_mb: Option<f64>,
    ) {
        self.core
            .profiler
            .record_block_computation(rankscope::BlockComputation {
                block_index,
                block_size,
                computation_ms: computation_time_ms,
                memory_mb: memory_usage_mb,
            });
    }

    /// Records the parameter count of a model or component.
    fn record_model_parameters(&self, name: &str, count: u64) {
        self.core.profiler.record_model_parameters(name, count);
    }

    /// Records a custom metric.
    fn record_metric(&self, name: &str, value: f64) {
        self.core.profiler.record_metric(name, value);
    }

    /// Records `items` processed in `seconds` (default: since the session
    /// started).
    #[pyo3(signature = (items, seconds=None))]
    fn record_throughput(&self, items: f64, seconds: Option<f64>) {
        self.core.profiler.record_throughput(items, seconds);
    }

    /// Records an event with a payload (anything JSON can hold; other
    /// values are kept as their text).
    #[pyo3(signature = (name, payload=None))]
    fn add_event(&self, name: &str, payload: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let payload = match payload {
            Some(value) => json::to_json(value, Other::AsText)?,
            None => serde_json::Value::Null,
        };
        self.core.profiler.add_event(name, &payload);
        Ok(())
    }

    /// Records a labelled memory snapshot from the numbers given (bytes),
    /// labelled with where they come from (`source`, default `caller`);
    /// with none given, the rank's first GPU is read through NVML. (The
    /// `rankscope` package's `memory_snapshot` fills them from torch.cuda
    /// when torch uses a GPU.)
    #[pyo3(signature = (label, allocated=None, reserved=None, max_allocated=None, gpu=None, source=None))]
    fn memory_snapshot(
        &self,
        label: &str,
        allocated: Option<u64>,
        reserved: Option<u64>,
        max_allocated: Option<u64>,
        gpu: Option<u32>,
        source: Option<&str>,
    ) {
        self.core.profiler.memory_snapshot_from(
            label,
            source.unwrap_or("caller"),
            rankscope::MemoryReading {
                gpu,
                allocated_bytes: allocated,
                reserved_bytes: reserved,
                max_allocated_bytes: max_allocated,
            },
        );
    }

    /// Records the GPU time of one call of stage `name`, in milliseconds
    /// (measured by the caller); the report shows it beside the host time.
    fn record_stage_gpu_time(&self, name: &str, ms: f64) {
        self.core.profiler.record_stage_gpu_time(name, ms);
    }

    /// What this rank is recording right now: the session, seconds since it
    /// started, the stages open, and rows held and dropped per table.
    fn get_current_metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let live = self.core.profiler.live_state();
        let out = PyDict::new(py);
        out.set_item("enabled", self.enabled())?;
        out.set_item("rank", self.rank())?;
        out.set_item("world_size", self.world_size())?;
        out.set_item("session", live.session)?;
        out.set_item("elapsed_s", live.elapsed_s)?;
        out.set_item("open_stages", live.open_stages)?;
        let rows = PyDict::new(py);
        let dropped = PyDict::new(py);
        for (table, held, lost) in live.rows {
            rows.set_item(table, held)?;
            dropped.set_item(table, lost)?;
        }
        out.set_item("rows", rows)?;
        out.set_item("dropped", dropped)?;
        Ok(out)
    }

    /// Reads the torch.profiler trace of window `window` (from 1) this rank
    /// wrote at `path` into the session's `kernels` and `collectives`
    /// tables, without the interpreter's lock; returns what it kept. A
    /// trace that cannot be read raises `ValueError` naming the file.
    fn _add_kernel_trace<'py>(
        &self,
        py: Python<'py>,
        path: PathBuf,
        window: u32,
    ) -> PyResult<Bound<'py, PyDict>> {
        let profiler = &self.core.profiler;
        let rows = py
            .detach(|| profiler.add_kernel_trace(&path, window))
            .map_err(|e| PyValueError::new_err(chain(&e)))?;
        let kept = PyDict::new(py);
        kept.set_item("events", rows.events)?;
        kept.set_item("kernels", rows.kernels)?;
        kept.set_item("collectives", rows.collectives)?;
        kept.set_item("cpu_ops", rows.cpu_ops)?;
        kept.set_item("before_session", rows.before_session)?;
        kept.set_item("rows_cut", rows.cut.rows)?;
        kept.set_item("names_cut", rows.cut.names)?;
        Ok(kept)
    }

    /// Sets (or, with `None`, clears) what the session set up in Python:
    /// its `close()` runs when the session finishes, before the rank's
    /// data is gathered.
    fn _set_session_closer(&self, closer: Option<Py<PyAny>>) {
        let previous = std::mem::replace(&mut *lock(&self.core.session_closer), closer);
        drop(previous);
    }

    /// Traces Python function calls into this profiler's sessions (every
    /// thread with sys.monitoring, 3.12+; else the calling thread and
    /// threads started from now on), with the filters of its
    /// configuration, until `_stop_python_tracing` with the token it
    /// returns (None for a disabled profiler).
    fn _start_python_tracing(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        let profiler = &self.core.profiler;
        let Some(config) = profiler.config() else {
            return Ok(None);
        };
        let filters = Filters::new(
            config.python_tracing_include.as_deref(),
            config.python_tracing_exclude.as_deref(),
            config.python_tracing_c_functions,
        );
        function_trace::start(py, profiler.clone(), filters).map(Some)
    }

    /// Stops the Python function tracing of `token`, if it still runs
    /// (another profiler's may have taken its place); without a token, any
    /// (a forked child's).
    #[staticmethod]
    #[pyo3(signature = (token=None))]
    fn _stop_python_tracing(py: Python<'_>, token: Option<u64>) -> PyResult<()> {
        function_trace::stop(py, token)
    }

    /// The session clock now (ns) while a session records, else `None`:
    /// the start of a collective call for `_record_collective`.
    fn _collective_begin(&self) -> Option<u64> {
        self.core.profiler.collective_begin()
    }

    /// Records one collective call that began at `start_ns` and ends now.
    #[pyo3(signature = (kind, group, bytes, start_ns))]
    fn _record_collective(
        &self,
        kind: &str,
        group: Option<&str>,
        bytes: Option<u64>,
        start_ns: u64,
    ) {
        self.core
            .profiler
            .record_collective(kind, group, bytes, start_ns);
    }

    /// The summary table of the last report this process wrote (rank 0),
    /// else `None`.
    fn get_summary(&self) -> Option<String> {
        lock(&self.core.last_summary).clone()
    }

    /// Sets (or, with `None`, clears) the object that times each stage on
    /// the GPU: `begin()` returns a handle, `end(name, handle)` takes it.
    fn _set_gpu_timer(&self, timer: Option<Py<PyAny>>) {
        let on = timer.is_some();
        let previous = std::mem::replace(&mut *lock(&self.core.gpu_timer), timer);
        self.core.gpu_timer_on.store(on, Ordering::Release);
        // Dropped (its `__del__` run) with the lock released.
        drop(previous);
    }

    /// The GPU timer set, if any.
    fn _gpu_timer(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        lock(&self.core.gpu_timer).as_ref().map(|t| t.clone_ref(py))
    }
}

/// A stage; entering it begins a call, leaving it ends the call (also when
/// an exception leaves it: the call is recorded and the exception goes on).
/// One object can be entered on several threads at once and nest in
/// itself: leaving ends the innermost call of its name open on the thread.
#[pyclass(frozen, module = "rankscope._rankscope", name = "Stage")]
pub struct Stage {
    core: Arc<Core>,
    name: rankscope::StageName,
    metadata: Option<serde_json::Value>,
    /// The GPU timer's handles of calls entered and not left, per thread,
    /// innermost last (only while a GPU timer is set).
    gpu_calls: Mutex<Vec<(ThreadId, Py<PyAny>)>>,
}

#[pymethods]
impl Stage {
    /// The stage's name.
    #[getter]
    fn name(&self) -> &str {
        self.name.as_str()
    }

    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<Self>> {
        let this = slf.get();
        if this.core.gpu_timer_on.load(Ordering::Acquire) {
            this.gpu_begin(slf.py())?;
        }
        this.core.profiler.begin(&this.name, this.metadata.as_ref());
        Ok(slf.clone().unbind())
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: &Bound<'_, PyAny>,
        _value: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.core.profiler.end_named(&self.name);
        if self.core.gpu_timer_on.load(Ordering::Acquire) {
            // The GPU timer never replaces the exception leaving the stage.
            if let Err(e) = self.gpu_end(py) {
                warn(
                    py,
                    &format!("GPU time of stage {:?} lost: {e}", self.name.as_str()),
                )?;
            }
        }
        Ok(false)
    }

    /// Begins a call that `_end` ends, by its id, whatever else runs on the
    /// thread meanwhile (what the decorators use for coroutines, whose
    /// calls interleave on one thread). `None` when not recording.
    fn _begin(&self) -> Option<u64> {
        self.core
            .profiler
            .begin(&self.name, self.metadata.as_ref())
            .map(|id| id.get())
    }

    /// Ends a call `_begin` began.
    fn _end(&self, id: u64) {
        self.core.profiler.end(rankscope::OpenStageId::from_raw(id));
    }

    fn __repr__(&self) -> String {
        format!("Stage({:?})", self.name.as_str())
    }
}

impl Stage {
    /// Begins the GPU timing of a call on this thread.
    fn gpu_begin(&self, py: Python<'_>) -> PyResult<()> {
        let timer = lock(&self.core.gpu_timer).as_ref().map(|t| t.clone_ref(py));
        if let Some(timer) = timer {
            let handle = timer.call_method0(py, "begin")?;
            lock(&self.gpu_calls).push((std::thread::current().id(), handle));
        }
        Ok(())
    }

    /// Ends the GPU timing of this thread's innermost call, if it began one.
    fn gpu_end(&self, py: Python<'_>) -> PyResult<()> {
        let thread = std::thread::current().id();
        let handle = {
            let mut calls = lock(&self.gpu_calls);
            match calls.iter().rposition(|(t, _)| *t == thread) {
                Some(pos) => calls.remove(pos).1,
                None => return Ok(()),
            }
        };
        let timer = lock(&self.core.gpu_timer).as_ref().map(|t| t.clone_ref(py));
        if let Some(timer) = timer {
            timer.call_method1(py, "end", (self.name.as_str(), handle))?;
        }
        Ok(())
    }
}

/// A running session. Leaving it as a context manager (or `finish()`)
/// spills this rank's data, gathers on rank 0 and writes the report there.
#[pyclass(frozen, module = "rankscope._rankscope", name = "Session")]
pub struct Session {
    core: Arc<Core>,
    /// Taken without the interpreter's lock: a flush holds it while it
    /// writes.
    running: Mutex<Option<rankscope::Session>>,
    outcome: Mutex<Option<Py<Outcome>>>,
    /// The process that started the session.
    pid: u32,
}

#[pymethods]
impl Session {
    /// The session directory (`None` when disabled or finished, or in a
    /// forked child).
    #[getter]
    fn dir(&self, py: Python<'_>) -> Option<PathBuf> {
        self.check_process().ok()?;
        py.detach(|| lock(&self.running).as_ref().and_then(|s| s.dir()))
    }

    /// What finishing produced (`None` until then).
    #[getter]
    fn outcome(&self, py: Python<'_>) -> Option<Py<Outcome>> {
        lock(&self.outcome).as_ref().map(|o| o.clone_ref(py))
    }

    /// Writes what this rank recorded since the last flush to a part file
    /// now, as the periodic flushes (`flush_interval_s`) do; the session
    /// goes on. `False` when there was nothing new (or the session is
    /// finished). GPU times are written at finish, not here. The
    /// interpreter's lock is released meanwhile.
    fn flush(&self, py: Python<'_>) -> PyResult<bool> {
        self.check_process()?;
        py.detach(|| match lock(&self.running).as_ref() {
            Some(session) => session.flush(),
            None => Ok(false),
        })
        .map_err(|e| SessionError::new_err(chain(&e)))
    }

    /// Ends the session: GPU times are resolved, this rank's data spilled
    /// and gathered; rank 0 waits at most `gather_timeout_s` for the
    /// others and writes the report. The interpreter's lock is released
    /// meanwhile. Returns the outcome (report paths on rank 0).
    fn finish(&self, py: Python<'_>) -> PyResult<Py<Outcome>> {
        if let Some(done) = self.outcome(py) {
            return Ok(done);
        }
        self.check_process()?;
        // The last torch.profiler window ends and is read into the
        // session's tables, the collectives' recording stops; a failure
        // costs that data, never the session.
        let closer = lock(&self.core.session_closer).take();
        if let Some(closer) = closer {
            if let Err(e) = closer.call_method0(py, "close") {
                warn(py, &format!("closing the session's torch integration: {e}"))?;
            }
        }
        // CUDA events resolve here, once, not on the hot path. A timer that
        // fails (a CUDA error) costs the GPU times, never the session.
        self.core.gpu_timer_on.store(false, Ordering::Release);
        let timer = lock(&self.core.gpu_timer).take();
        if let Some(timer) = timer {
            if let Err(e) = timer.call_method0(py, "resolve") {
                warn(py, &format!("the session's GPU times are lost: {e}"))?;
            }
        }
        let Some(session) = py.detach(|| lock(&self.running).take()) else {
            return Err(SessionError::new_err(
                "the session was finished already, by a call that failed or runs on another thread",
            ));
        };
        let finished = py.detach(|| session.finish());
        let outcome = finished.map_err(|e| SessionError::new_err(chain(&e)))?;
        if let Some(report) = &outcome.report {
            *lock(&self.core.last_summary) = Some(report.summary.clone());
        }
        let outcome = Py::new(py, Outcome::from(outcome))?;
        *lock(&self.outcome) = Some(outcome.clone_ref(py));
        Ok(outcome)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.finish(py)?;
        Ok(false)
    }
}

impl Session {
    /// A `SessionError` in a process other than the one that started the
    /// session (a fork), before anything waits on `running`, which a
    /// parent's thread may have held (flushing) when it forked.
    fn check_process(&self) -> PyResult<()> {
        let child = std::process::id();
        match child == self.pid {
            true => Ok(()),
            false => Err(SessionError::new_err(chain(
                &rankscope::SessionError::Forked {
                    parent: self.pid,
                    child,
                },
            ))),
        }
    }
}

/// What finishing a session produced.
#[pyclass(frozen, get_all, module = "rankscope._rankscope", name = "Outcome")]
pub struct Outcome {
    /// The session directory (`None` when disabled).
    session_dir: Option<PathBuf>,
    /// This rank's spill file (`None` when disabled).
    spill_file: Option<PathBuf>,
    /// Size of this rank's payload, bytes.
    payload_bytes: usize,
    /// On rank 0: the report files written (empty elsewhere).
    files: Vec<PathBuf>,
    /// On rank 0: the summary table.
    summary: Option<String>,
    /// On rank 0: ranks whose data arrived.
    ranks_reporting: Option<Vec<u32>>,
    /// On rank 0: ranks that sent nothing usable before the deadline.
    ranks_missing: Option<Vec<u32>>,
}

#[pymethods]
impl Outcome {
    /// `report.html`, on rank 0.
    #[getter]
    fn report_html(&self) -> Option<PathBuf> {
        self.file("report.html")
    }

    /// `report.json`, on rank 0.
    #[getter]
    fn report_json(&self) -> Option<PathBuf> {
        self.file("report.json")
    }

    fn __repr__(&self) -> String {
        let dir = self
            .session_dir
            .as_ref()
            .map_or("None".into(), |d| format!("{:?}", d.display().to_string()));
        let ranks = |r: &Option<Vec<u32>>| r.as_ref().map_or("None".into(), |r| format!("{r:?}"));
        format!(
            "Outcome(session_dir={dir}, files={}, ranks_reporting={}, ranks_missing={})",
            self.files.len(),
            ranks(&self.ranks_reporting),
            ranks(&self.ranks_missing)
        )
    }
}

impl Outcome {
    fn file(&self, name: &str) -> Option<PathBuf> {
        self.files
            .iter()
            .find(|f| f.file_name().is_some_and(|n| n == name))
            .cloned()
    }
}

impl From<rankscope::Outcome> for Outcome {
    fn from(outcome: rankscope::Outcome) -> Self {
        let present = |p: PathBuf| (!p.as_os_str().is_empty()).then_some(p);
        let (files, summary) = match outcome.report {
            Some(report) => (report.files, Some(report.summary)),
            None => (Vec::new(), None),
        };
        Outcome {
            session_dir: present(outcome.session_dir),
            spill_file: present(outcome.spill_file),
            payload_bytes: outcome.payload_bytes,
            files,
            summary,
            ranks_reporting: outcome.gathered.as_ref().map(|g| g.reporting.clone()),
            ranks_missing: outcome.gathered.as_ref().map(|g| g.missing.clone()),
        }
    }
}

fn profiler_error(error: rankscope::ProfilerError) -> PyErr {
    match error {
        rankscope::ProfilerError::Config(e) => config_error(e),
        other => PyRuntimeError::new_err(chain(&other)),
    }
}

/// An error and its causes, one line.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    rankscope::Chain(error).to_string()
}

/// Issues a `RuntimeWarning` (an error only where warnings are made errors).
fn warn(py: Python<'_>, message: &str) -> PyResult<()> {
    let text = std::ffi::CString::new(message.replace('\0', " ")).expect("no NUL left");
    PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), &text, 1)
}

/// Locks `mutex`; a panic elsewhere while it was held leaves its data usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
