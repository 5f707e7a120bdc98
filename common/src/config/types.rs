//! The configuration's types: the [`Config`] struct, its enumerated
//! settings and the presets it starts from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::payload::Compression;

/// A starting point for the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Everything collected at moderate intervals; no live display.
    #[default]
    Development,
    /// Lowest overhead: slower sampling, fewer rows kept.
    Production,
    /// Fast sampling, many rows kept, live display on.
    Debugging,
}

/// How ranks hand their payloads to rank 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// From the launcher: MPI under mpirun, TCP under torchrun, else the directory.
    #[default]
    Auto,
    /// MPI gather (needs the `mpi` feature).
    Mpi,
    /// Authenticated TCP to rank 0.
    Tcp,
    /// Spill files in the shared session directory.
    Dir,
}

/// Where GPU readings come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuSourceKind {
    /// NVML when its library loads; otherwise no GPU telemetry.
    #[default]
    Auto,
    /// NVML; if it cannot load, GPU telemetry is off and the reason is said once.
    Nvml,
    /// Synthetic GPUs (demos, tests of the analysis): never real hardware.
    Simulated,
    /// No GPU telemetry.
    None,
}

/// How the Python package times stages on the GPU (when torch uses CUDA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuTiming {
    /// CUDA events recorded on the current stream at each stage's begin and
    /// end, resolved when the session ends: the host never waits.
    #[default]
    Events,
    /// `torch.cuda.synchronize()` at each stage's begin and end, timed on
    /// the host: the time until the stage's GPU work is done (host-only work
    /// in the stage counts too); it makes the host wait for the GPU.
    Sync,
    /// No GPU timing.
    Off,
}

/// What torch.profiler windows record (the Python package).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TorchActivities {
    /// CPU operators only.
    #[serde(rename = "cpu")]
    Cpu,
    /// CUDA kernels, copies and sets only.
    #[serde(rename = "cuda")]
    Cuda,
    /// Both (CUDA left out where torch has no CUDA).
    #[default]
    #[serde(rename = "cpu,cuda")]
    CpuCuda,
}

/// Where the Python package traces Python function calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PythonTracing {
    /// Nowhere.
    #[default]
    Off,
    /// Throughout each session.
    Session,
    /// Only inside rankscope's windows (`rankscope trigger`, a signal,
    /// imbalance; with rolling windows, which cover every step, the
    /// session).
    Windows,
}

/// Which ranks print the live display.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DisplayRanks {
    /// Only rank 0.
    #[default]
    Rank0,
    /// Every rank.
    All,
}

/// The most ranks `trace_ranks` may name: their payloads travel whole to
/// rank 0 beside the node digests.
pub const MAX_TRACE_RANKS: usize = 256;

/// Every setting of the agent and the coordinator. Each key can be set in a
/// file or as `RANKSCOPE_<KEY>` (upper case) in the environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `false` turns every profiler call into a no-op.
    pub enabled: bool,
    /// The preset the other defaults came from.
    pub preset: Preset,
    /// Where sessions write their directory.
    pub output_dir: PathBuf,
    /// Session name override.
    pub session: Option<String>,
    /// Id shared by every rank of one job; names the session directory.
    pub session_id: Option<String>,
    /// How payloads reach rank 0.
    pub transport: TransportKind,
    /// How long rank 0 waits for the other ranks, seconds.
    pub gather_timeout_s: f64,
    /// The gather's levels: 2 (the default) where the job spans several
    /// nodes of LOCAL_WORLD_SIZE consecutive ranks each (over TCP or MPI,
    /// with an agent built with its `report` feature): each node's leader
    /// (its local rank 0) gathers its node's payloads and sends rank 0 one
    /// digest of them; 1, or any other layout: every rank sends rank 0 its
    /// payload.
    pub gather_levels: u8,
    /// Rows kept per table per rank; rows past it are dropped and counted.
    pub max_data_points: usize,
    /// Distinct names (stages, metrics, events, labels) kept per thread;
    /// names past it are recorded as `(other)` and counted.
    pub max_names: usize,
    /// Stages open at once per thread; a stage begun past it is not
    /// recorded, and counted.
    pub max_open_stages: usize,
    /// The largest world size a payload may claim; larger ones are refused.
    pub max_world_size: u32,
    /// Compression of the payload's Arrow streams.
    pub payload_compression: Compression,
    /// Where GPU readings come from.
    pub gpu_source: GpuSourceKind,
    /// Path of the NVML library (default: the system's libnvidia-ml.so.1).
    pub nvml_library: Option<PathBuf>,
    /// With simulated GPUs: the rank whose GPU runs hot and throttles.
    pub simulated_hot_rank: Option<u32>,
    /// With simulated GPUs: how many each host has, its ranks sharing them
    /// by local rank (as ranks that share a real device do); none: one GPU
    /// a rank.
    pub simulated_gpus: Option<u32>,
    /// Sample the host.
    pub collect_host: bool,
    /// GPU sampling interval, seconds.
    pub gpu_interval_s: f64,
    /// Host sampling interval, seconds.
    pub host_interval_s: f64,
    /// PCIe throughput sampling interval, seconds; off when unset (each
    /// reading blocks about 20 ms per GPU).
    pub pcie_interval_s: Option<f64>,
    /// GPUs this rank samples: indices, UUIDs or `all`; default from
    /// CUDA_VISIBLE_DEVICES and LOCAL_RANK.
    pub gpu_devices: Option<String>,
    /// How the Python package times stages on the GPU when torch uses CUDA.
    pub gpu_timing: GpuTiming,
    /// torch.profiler windows on every rank (the Python package), on the
    /// schedule torch.profiler's users know: skip `wait` steps, warm up
    /// for `warmup`, record `active`, `repeat` times (0: until the session
    /// ends). Steps are `prof.step()` calls. This many steps are skipped
    /// before each window's warm-up.
    pub torch_profiler_wait: u32,
    /// Steps warmed up (recorded and thrown away) before each window.
    pub torch_profiler_warmup: u32,
    /// Steps each window records; 0 (the default) turns the windows off.
    pub torch_profiler_active: u32,
    /// Windows in a session; 0: windows until the session ends.
    pub torch_profiler_repeat: u32,
    /// What the windows record: `cpu`, `cuda` or `cpu,cuda`.
    pub torch_profiler_activities: TorchActivities,
    /// torch.profiler's `record_shapes`.
    pub torch_profiler_record_shapes: bool,
    /// torch.profiler's `profile_memory`.
    pub torch_profiler_profile_memory: bool,
    /// torch.profiler's `with_stack`.
    pub torch_profiler_with_stack: bool,
    /// Where each window's torch.profiler trace is kept, as
    /// `rank<R>-window<k>.pt.trace.json.gz` (for Perfetto, HTA or
    /// `rankscope import`); unset (the default): read and deleted.
    pub torch_profiler_trace_dir: Option<PathBuf>,
    /// Python function tracing on every Python rank (`off`, `session`, or
    /// `windows`: only inside rankscope's windows, from the step one opens
    /// to the step it closes; with rolling windows, which cover every step,
    /// the session): each call and return of the program's Python
    /// functions, C functions left out unless
    /// `python_tracing_c_functions`. On CPython 3.12+ through
    /// `sys.monitoring`, on every thread; before 3.12 through the C profile
    /// hook, on the session's thread and threads started after it.
    pub python_tracing: PythonTracing,
    /// Traced calls nested deeper than this on a thread are not recorded
    /// (their time is their caller's own).
    pub python_tracing_max_depth: u32,
    /// Calls shorter than this are counted in `python_functions` but kept
    /// as no `python_calls` row (timeline), microseconds.
    pub python_tracing_min_duration_us: f64,
    /// Comma-separated modules or qualified names to trace alone
    /// (`mypkg,other.Class`: a name matches itself and what is below it);
    /// unset: every function.
    pub python_tracing_include: Option<String>,
    /// Comma-separated modules or qualified names not to trace, over
    /// `python_tracing_include`; rankscope's own are never traced.
    pub python_tracing_exclude: Option<String>,
    /// Python function tracing also traces the C functions Python code
    /// calls (builtins, C extensions' functions and methods: `len`,
    /// `list.append`, `time.sleep`), named `module.qualname` where they say
    /// their module; their time is then no longer their caller's own. On
    /// 3.12+ each Python call then costs a `CALL` event more.
    pub python_tracing_c_functions: bool,
    /// The Python package records each `torch.distributed` collective
    /// call (kind, process group, bytes, host start and end) where the
    /// program has imported torch.distributed, window or not.
    pub record_collectives: bool,
    /// Rank 0's TCP listener address (default: MASTER_ADDR).
    pub addr: Option<String>,
    /// Rank 0's TCP listener port (default: MASTER_PORT + 1; under MPI, its
    /// listener for window files, default a port the system picks).
    pub port: Option<u16>,
    /// The job token every TCP connection proves it knows (default: derived
    /// from TORCHELASTIC_RUN_ID and the master address and port, which is
    /// guessable where the run id is reused: set one per job).
    pub token: Option<String>,
    /// The largest payload frame rank 0 takes over TCP, bytes.
    pub max_frame_bytes: u64,
    /// Every this many seconds a rank writes what it recorded since the last
    /// time to a file of its own, so that a killed rank loses at most that
    /// much (`rankscope aggregate` merges the flushes); 0 turns it off.
    pub flush_interval_s: f64,
    /// Rolling windows: every this many steps (`Profiler::step`), the
    /// steps since the last get a cross-rank report of their own in
    /// `<session dir>/window-<k>/`; 0 (the default) turns them off.
    pub window_every_steps: u64,
    /// Periodic windows: every this many seconds (on rank 0's clock), a
    /// window of `window_steps` steps, for a report every so often of a
    /// server's life; 0 (the default) turns them off.
    pub window_every_s: f64,
    /// Steps a window asked for by `rankscope trigger` (or `SIGUSR1` to
    /// rank 0) covers when the request names none.
    pub window_steps: u64,
    /// A planned window whose first step has not come this many seconds
    /// after it was due (at rank 0's pace when planned) expires: rank 0
    /// cancels it, and the next request can be planned.
    pub window_expiry_s: f64,
    /// The stage whose end is a step, for a program that calls neither
    /// `Profiler::step` nor the Python package's `prof.step()` or
    /// `record_diffusion_step` (`step_stage: denoise_step`): each end of a
    /// stage of that name, on any thread, counts one step.
    pub step_stage: Option<String>,
    /// Imbalance windows: a window of `window_steps` steps opens when one
    /// rank's steps take this much longer than the median of the others'
    /// (and `straggler_min_s` longer), %, once each time imbalance begins;
    /// 0 (the default) turns them off. Ranks measure their pace each
    /// second and share it through the session directory.
    pub window_on_imbalance_pct: f64,
    /// Moves this rank's wall clock by this many nanoseconds: a testing aid
    /// that skews a rank on purpose, to check that clock alignment undoes
    /// it. 0 in real jobs.
    pub clock_shift_ns: i64,
    /// On SIGTERM or SIGINT (how schedulers and torchrun stop ranks), spill
    /// what the running session recorded, then let the signal end the
    /// process. Only where the program left the signal's default action.
    pub spill_on_signal: bool,
    /// Ranks other than 0 keep their notices (GPU telemetry off, ...) for
    /// rank 0, which prints each distinct one once with the ranks it applies
    /// to, instead of a line per rank.
    pub quiet_ranks: bool,
    /// Print a live telemetry line to stderr.
    pub live_display: bool,
    /// Seconds between live display lines.
    pub display_interval_s: f64,
    /// Which ranks print the live display.
    pub display_ranks: DisplayRanks,
    /// A rank is a straggler in a stage when its total exceeds the median
    /// of the other ranks' totals by more than this many percent...
    pub straggler_threshold_pct: f64,
    /// ... and by more than this many seconds.
    pub straggler_min_s: f64,
    /// Calls of each stage name on each rank left out of the statistics at
    /// the start: warm-up (compilation, allocator growth, cache fill).
    pub warmup_calls: u32,
    /// Stages of each rank drawn in `trace.json.gz`, and instants (steps,
    /// blocks, events, snapshots): the first this many of each (in time
    /// order); the report says how many more there were.
    pub trace_max_stages: u64,
    /// Ranks whose rows `trace.json.gz` and raw/ hold whatever the scale:
    /// in a two-level gather, where they hold rank 0's node and each other
    /// node's busiest rank, each of these ranks' leaders sends its payload
    /// too (at most [`MAX_TRACE_RANKS`]; `RANKSCOPE_TRACE_RANKS=3,17`).
    pub trace_ranks: Vec<u32>,
    /// The job's parallel layout, where no trace's process groups give the
    /// ranks' coordinates (`parallel_layout: tp=4,dp=2`, the dimension
    /// whose neighbours are adjacent ranks first; see
    /// [`crate::parallel::ParallelLayout`]): the report labels each rank
    /// by it (`tp 1/4 · dp 0/2`). Its sizes multiply to the world size.
    pub parallel_layout: Option<String>,
    /// GPU `memory_pressure`: peak memory at least this share of the total, %.
    pub gpu_memory_pressure_pct: f64,
    /// GPU `thermal_throttling`: thermal reason bits in at least this share
    /// of readings, %...
    pub gpu_thermal_readings_pct: f64,
    /// ... or a temperature of at least this, °C.
    pub gpu_thermal_temp_c: f64,
    /// GPU `power_capped`: a power-cap reason bit, or a draw of 95 % of the
    /// enforced limit, in at least this share of readings, %.
    pub gpu_power_readings_pct: f64,
    /// GPU `clock_throttled`: mean SM clock under load (utilisation of
    /// 80 % or more) at most this share of the device's maximum, %.
    pub gpu_clock_pct: f64,
    /// GPU `underutilized`: mean utilisation while stages ran below this, %.
    pub gpu_underutilized_pct: f64,
    /// GPU `outlier`: this many standard deviations of its peers from their
    /// mean (and 10 % of it), in utilisation, temperature, clock or memory.
    pub gpu_outlier_sigma: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config::preset(Preset::Development)
    }
}

impl Config {
    /// The defaults of a preset.
    pub fn preset(preset: Preset) -> Self {
        let base = Config::base(preset);
        match preset {
            Preset::Development => base,
            Preset::Production => Config {
                max_data_points: 50_000,
                gpu_interval_s: 2.0,
                host_interval_s: 5.0,
                ..base
            },
            Preset::Debugging => Config {
                max_data_points: 1_000_000,
                gpu_interval_s: 0.1,
                host_interval_s: 0.5,
                live_display: true,
                display_interval_s: 2.0,
                display_ranks: DisplayRanks::All,
                ..base
            },
        }
    }

    /// The defaults every preset starts from (the development preset's),
    /// named `preset`.
    fn base(preset: Preset) -> Self {
        Config {
            enabled: true,
            preset,
            output_dir: PathBuf::from("profiling_reports"),
            session: None,
            session_id: None,
            transport: TransportKind::Auto,
            gather_timeout_s: 60.0,
            gather_levels: 2,
            max_data_points: 100_000,
            max_names: 10_000,
            max_open_stages: 1_024,
            max_world_size: 65_536,
            payload_compression: Compression::Zstd,
            gpu_source: GpuSourceKind::Auto,
            nvml_library: None,
            simulated_hot_rank: None,
            simulated_gpus: None,
            collect_host: true,
            gpu_interval_s: 0.5,
            host_interval_s: 1.0,
            pcie_interval_s: None,
            gpu_devices: None,
            gpu_timing: GpuTiming::Events,
            torch_profiler_wait: 1,
            torch_profiler_warmup: 1,
            torch_profiler_active: 0,
            torch_profiler_repeat: 1,
            torch_profiler_activities: TorchActivities::CpuCuda,
            torch_profiler_record_shapes: false,
            torch_profiler_profile_memory: false,
            torch_profiler_with_stack: false,
            torch_profiler_trace_dir: None,
            python_tracing: PythonTracing::Off,
            python_tracing_max_depth: 128,
            python_tracing_min_duration_us: 0.0,
            python_tracing_include: None,
            python_tracing_exclude: None,
            python_tracing_c_functions: false,
            record_collectives: true,
            addr: None,
            port: None,
            token: None,
            max_frame_bytes: 256 << 20,
            flush_interval_s: 30.0,
            window_every_steps: 0,
            window_every_s: 0.0,
            window_steps: 20,
            window_expiry_s: 600.0,
            window_on_imbalance_pct: 0.0,
            step_stage: None,
            clock_shift_ns: 0,
            spill_on_signal: true,
            quiet_ranks: true,
            live_display: false,
            display_interval_s: 5.0,
            display_ranks: DisplayRanks::Rank0,
            straggler_threshold_pct: 10.0,
            straggler_min_s: 0.01,
            warmup_calls: 0,
            trace_max_stages: 5_000,
            trace_ranks: Vec::new(),
            parallel_layout: None,
            gpu_memory_pressure_pct: 90.0,
            gpu_thermal_readings_pct: 10.0,
            gpu_thermal_temp_c: 85.0,
            gpu_power_readings_pct: 20.0,
            gpu_clock_pct: 80.0,
            gpu_underutilized_pct: 50.0,
            gpu_outlier_sigma: 2.0,
        }
    }

    /// The names of every configuration key.
    pub fn keys() -> Vec<String> {
        Config::default().as_keys().keys().cloned().collect()
    }

    /// The configuration as a map of its keys to their values.
    pub(super) fn as_keys(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("Config serializes to a map"),
        }
    }
}
