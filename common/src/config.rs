//! Configuration: one flat struct, built from a preset, then a YAML or TOML
//! file, then `RANKSCOPE_<KEY>` environment variables, each overriding the
//! one before.

use std::path::{Path, PathBuf};

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
    /// The Python package records each `torch.distributed` collective
    /// call (kind, process group, bytes, host start and end) where the
    /// program has imported torch.distributed, window or not.
    pub record_collectives: bool,
    /// Rank 0's TCP listener address (default: MASTER_ADDR).
    pub addr: Option<String>,
    /// Rank 0's TCP listener port (default: MASTER_PORT + 1).
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

/// A configuration that could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid YAML / TOML, or holds an unknown key or a bad value.
    #[error("configuration file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An environment variable holds a bad value.
    #[error("environment variable {var}={value:?}: {reason}")]
    Env {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A key given in code (a binding's keyword argument) is no setting,
    /// or its value has the wrong type.
    #[error("configuration key `{key}`: {reason}")]
    Key {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A value is out of its range.
    #[error("invalid configuration: {reason}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl Config {
    /// The defaults of a preset.
    pub fn preset(preset: Preset) -> Self {
        let base = Config {
            enabled: true,
            preset,
            output_dir: PathBuf::from("profiling_reports"),
            session: None,
            session_id: None,
            transport: TransportKind::Auto,
            gather_timeout_s: 60.0,
            max_data_points: 100_000,
            max_names: 10_000,
            max_open_stages: 1_024,
            max_world_size: 65_536,
            payload_compression: Compression::Zstd,
            gpu_source: GpuSourceKind::Auto,
            nvml_library: None,
            simulated_hot_rank: None,
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
            record_collectives: true,
            addr: None,
            port: None,
            token: None,
            max_frame_bytes: 256 << 20,
            flush_interval_s: 30.0,
            window_every_steps: 0,
            window_every_s: 0.0,
            window_steps: 20,
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
            gpu_memory_pressure_pct: 90.0,
            gpu_thermal_readings_pct: 10.0,
            gpu_thermal_temp_c: 85.0,
            gpu_power_readings_pct: 20.0,
            gpu_clock_pct: 80.0,
            gpu_underutilized_pct: 50.0,
            gpu_outlier_sigma: 2.0,
        };
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

    /// Loads the configuration of this process: the file named by
    /// `RANKSCOPE_CONFIG` (if set), then `RANKSCOPE_*` variables. A
    /// `RANKSCOPE_*` variable that is no key (a misspelling) gets one
    /// warning per process, naming the closest key.
    pub fn from_env() -> Result<Self, ConfigError> {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            for unknown in unknown_variables(std::env::vars_os().map(|(name, _)| name)) {
                let text = unknown.to_string();
                eprintln!("rankscope: warning: {}", crate::text::terminal(&text));
            }
        });
        check_utf8(std::env::vars_os())?;
        Self::load(
            std::env::var_os("RANKSCOPE_CONFIG")
                .map(PathBuf::from)
                .as_deref(),
            |name| std::env::var(name).ok(),
        )
    }

    /// The names of every configuration key.
    pub fn keys() -> Vec<String> {
        match serde_json::to_value(Config::default()) {
            Ok(Value::Object(map)) => map.keys().cloned().collect(),
            _ => unreachable!("Config serializes to a map"),
        }
    }

    /// A configuration from keys given in code (a binding's keyword
    /// arguments): the defaults of the `preset` key (if given), each other
    /// key over them, then the ranges checked. An unknown key is named with
    /// the closest known one; a value of the wrong type is named with its key.
    pub fn from_map(keys: Map<String, Value>) -> Result<Self, ConfigError> {
        let preset = match keys.get("preset") {
            Some(value) => serde_json::from_value(value.clone()).map_err(|e| ConfigError::Key {
                key: "preset".into(),
                reason: e.to_string(),
            })?,
            None => Preset::default(),
        };
        let mut merged = match serde_json::to_value(Config::preset(preset)) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("Config serializes to a map"),
        };
        for (key, value) in keys {
            if !merged.contains_key(&key) {
                let closest = merged
                    .keys()
                    .map(|k| (strsim::levenshtein(&key, k), k))
                    .min()
                    .filter(|(distance, _)| *distance <= key.len().div_ceil(3))
                    .map_or(String::new(), |(_, k)| format!("; did you mean `{k}`?"));
                return Err(ConfigError::Key {
                    reason: format!("no such setting{closest}"),
                    key,
                });
            }
            merged.insert(key.clone(), value);
            if let Err(reason) = from_keys(merged.clone()) {
                return Err(ConfigError::Key { key, reason });
            }
        }
        let config = from_keys(merged).expect("every key was checked");
        config.validate()?;
        Ok(config)
    }

    /// Loads from an optional file and environment variables given by `var`.
    pub fn load(
        file: Option<&Path>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file_keys = match file {
            Some(path) => read_file(path)?,
            None => Map::new(),
        };
        let file_set: Vec<String> = file_keys.keys().cloned().collect();
        let preset = match var("RANKSCOPE_PRESET") {
            Some(value) => parse_env_value::<Preset>("RANKSCOPE_PRESET", &value)?,
            None => match file_keys.get("preset") {
                Some(value) => {
                    serde_json::from_value(value.clone()).map_err(|e| ConfigError::File {
                        path: file.unwrap_or(Path::new("")).to_path_buf(),
                        reason: format!("key `preset`: {e}"),
                    })?
                }
                None => Preset::default(),
            },
        };

        let mut keys = match serde_json::to_value(Config::preset(preset)) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("Config serializes to a map"),
        };
        keys.extend(file_keys);
        let config: Config = from_keys(keys.clone()).map_err(|reason| ConfigError::File {
            path: file.unwrap_or(Path::new("")).to_path_buf(),
            reason,
        })?;

        let names: Vec<String> = keys.keys().cloned().collect();
        for key in names {
            let name = format!("RANKSCOPE_{}", key.to_uppercase());
            let Some(value) = var(&name) else { continue };
            let accepted = env_candidates(&value).into_iter().find(|candidate| {
                let mut trial = keys.clone();
                trial.insert(key.clone(), candidate.clone());
                from_keys(trial).is_ok()
            });
            match accepted {
                Some(candidate) => {
                    keys.insert(key, candidate);
                }
                None => {
                    let mut trial = keys.clone();
                    trial.insert(key, Value::String(value.clone()));
                    let reason = from_keys(trial).err().unwrap_or_default();
                    return Err(ConfigError::Env {
                        var: name,
                        value,
                        reason,
                    });
                }
            }
        }
        let config = if keys.is_empty() {
            config
        } else {
            from_keys(keys).expect("every key was checked")
        };
        config.validate().map_err(|error| match error {
            ConfigError::Invalid { key, reason } => {
                let name = format!("RANKSCOPE_{}", key.to_uppercase());
                match (var(&name), file) {
                    (Some(value), _) => ConfigError::Env {
                        var: name,
                        value,
                        reason,
                    },
                    (None, Some(path)) if file_set.iter().any(|k| k == key) => ConfigError::File {
                        path: path.to_path_buf(),
                        reason,
                    },
                    _ => ConfigError::Invalid { key, reason },
                }
            }
            other => other,
        })?;
        Ok(config)
    }

    /// Checks every numeric key against its range ([`NUMERIC_KEYS`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.window_every_steps > 0 && self.window_every_s > 0.0 {
            return Err(ConfigError::Invalid {
                key: "window_every_s",
                reason: "`window_every_s` and `window_every_steps` are both set: windows \
                         come one way, by steps or by seconds"
                    .into(),
            });
        }
        if self.flush_interval_s > 0.0 && self.flush_interval_s < 0.05 {
            return Err(ConfigError::Invalid {
                key: "flush_interval_s",
                reason: format!(
                    "`flush_interval_s` = {} is below 0.05 s (0 turns flushing off)",
                    self.flush_interval_s
                ),
            });
        }
        for numeric in NUMERIC_KEYS {
            let Some(value) = (numeric.value)(self) else {
                continue;
            };
            if !(numeric.min..=numeric.max).contains(&value) {
                let (key, min, max) = (numeric.key, numeric.min, numeric.max);
                return Err(ConfigError::Invalid {
                    key,
                    reason: format!("`{key}` = {value} is outside {min} ..= {max}"),
                });
            }
        }
        Ok(())
    }
}

/// A numeric key: its range, inclusive — what the code that reads it can
/// take (a timeout of 1e20 s does not fit a `Duration`; a sampling interval
/// of a nanosecond would spin) — and its value in a configuration.
pub struct NumericKey {
    /// The key.
    pub key: &'static str,
    /// The least value allowed.
    pub min: f64,
    /// The greatest value allowed.
    pub max: f64,
    /// The key's value in a configuration; `None` where it is unset.
    pub value: fn(&Config) -> Option<f64>,
}

const fn numeric(
    key: &'static str,
    min: f64,
    max: f64,
    value: fn(&Config) -> Option<f64>,
) -> NumericKey {
    NumericKey {
        key,
        min,
        max,
        value,
    }
}

/// Every numeric key, each with its range and value in one entry.
pub const NUMERIC_KEYS: &[NumericKey] = &[
    numeric("gather_timeout_s", 0.001, 604_800.0, |c| {
        Some(c.gather_timeout_s)
    }),
    numeric("max_data_points", 1.0, 50_000_000.0, |c| {
        Some(c.max_data_points as f64)
    }),
    numeric("max_names", 16.0, 1_000_000.0, |c| Some(c.max_names as f64)),
    numeric("max_open_stages", 1.0, 100_000.0, |c| {
        Some(c.max_open_stages as f64)
    }),
    numeric("max_world_size", 1.0, 16_777_216.0, |c| {
        Some(f64::from(c.max_world_size))
    }),
    numeric("gpu_interval_s", 0.001, 3_600.0, |c| Some(c.gpu_interval_s)),
    numeric("host_interval_s", 0.001, 3_600.0, |c| {
        Some(c.host_interval_s)
    }),
    numeric("pcie_interval_s", 0.02, 3_600.0, |c| c.pcie_interval_s),
    numeric("display_interval_s", 0.01, 3_600.0, |c| {
        Some(c.display_interval_s)
    }),
    numeric("straggler_threshold_pct", 0.0, 1_000_000.0, |c| {
        Some(c.straggler_threshold_pct)
    }),
    numeric("straggler_min_s", 0.0, 1_000_000.0, |c| {
        Some(c.straggler_min_s)
    }),
    numeric("warmup_calls", 0.0, 1_000_000.0, |c| {
        Some(f64::from(c.warmup_calls))
    }),
    numeric("trace_max_stages", 0.0, 100_000_000.0, |c| {
        Some(c.trace_max_stages as f64)
    }),
    numeric("gpu_memory_pressure_pct", 0.0, 100.0, |c| {
        Some(c.gpu_memory_pressure_pct)
    }),
    numeric("gpu_thermal_readings_pct", 0.0, 100.0, |c| {
        Some(c.gpu_thermal_readings_pct)
    }),
    numeric("gpu_thermal_temp_c", 0.0, 200.0, |c| {
        Some(c.gpu_thermal_temp_c)
    }),
    numeric("gpu_power_readings_pct", 0.0, 100.0, |c| {
        Some(c.gpu_power_readings_pct)
    }),
    numeric("gpu_clock_pct", 0.0, 100.0, |c| Some(c.gpu_clock_pct)),
    numeric("gpu_underutilized_pct", 0.0, 100.0, |c| {
        Some(c.gpu_underutilized_pct)
    }),
    numeric("gpu_outlier_sigma", 0.0, 100.0, |c| {
        Some(c.gpu_outlier_sigma)
    }),
    numeric("clock_shift_ns", -86_400e9, 86_400e9, |c| {
        Some(c.clock_shift_ns as f64)
    }),
    numeric("max_frame_bytes", 4096.0, 4_294_967_296.0, |c| {
        Some(c.max_frame_bytes as f64)
    }),
    numeric("flush_interval_s", 0.0, 86_400.0, |c| {
        Some(c.flush_interval_s)
    }),
    numeric("window_every_steps", 0.0, 1e12, |c| {
        Some(c.window_every_steps as f64)
    }),
    numeric("window_steps", 1.0, 1e12, |c| Some(c.window_steps as f64)),
    numeric("window_every_s", 0.0, 31_536_000.0, |c| {
        Some(c.window_every_s)
    }),
    numeric("torch_profiler_wait", 0.0, 1_000_000.0, |c| {
        Some(f64::from(c.torch_profiler_wait))
    }),
    numeric("torch_profiler_warmup", 0.0, 1_000_000.0, |c| {
        Some(f64::from(c.torch_profiler_warmup))
    }),
    numeric("torch_profiler_active", 0.0, 1_000_000.0, |c| {
        Some(f64::from(c.torch_profiler_active))
    }),
    numeric("torch_profiler_repeat", 0.0, 1_000_000.0, |c| {
        Some(f64::from(c.torch_profiler_repeat))
    }),
];

/// Refuses a `RANKSCOPE_*` variable whose value is not UTF-8, which would
/// otherwise read as unset.
fn check_utf8(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<(), ConfigError> {
    for (name, value) in vars {
        let name = name.to_string_lossy();
        if name.starts_with("RANKSCOPE_") && value.to_str().is_none() {
            return Err(ConfigError::Env {
                var: name.into_owned(),
                value: value.to_string_lossy().into_owned(),
                reason: "the value is not valid UTF-8".into(),
            });
        }
    }
    Ok(())
}

/// `RANKSCOPE_*` variables that are neither a configuration key nor one of
/// the launcher variables `rankscope demo` and `rankscope launch` set.
const NON_KEY_VARIABLES: &[&str] = &[
    "RANKSCOPE_CONFIG",
    "RANKSCOPE_RANK",
    "RANKSCOPE_WORLD_SIZE",
    "RANKSCOPE_LOCAL_RANK",
    "RANKSCOPE_LOCAL_WORLD_SIZE",
    "RANKSCOPE_JOB_ID",
    "RANKSCOPE_RUN_ID",
];

/// A `RANKSCOPE_*` variable that no code reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    /// The variable.
    pub name: String,
    /// The closest known variable, when one is close.
    pub closest: Option<String>,
}

impl std::fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is not a rankscope setting; it is ignored", self.name)?;
        match &self.closest {
            Some(closest) => write!(f, " (did you mean {closest}?)"),
            None => Ok(()),
        }
    }
}

/// The `RANKSCOPE_*` names among `names` that are no setting, each with the
/// closest known name (within an edit distance of a third of its length).
pub fn unknown_variables(
    names: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<UnknownVariable> {
    let known: Vec<String> = Config::keys()
        .iter()
        .map(|key| format!("RANKSCOPE_{}", key.to_uppercase()))
        .chain(NON_KEY_VARIABLES.iter().map(|v| v.to_string()))
        .collect();
    let mut unknown: Vec<UnknownVariable> = names
        .into_iter()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.starts_with("RANKSCOPE_") && !known.contains(name))
        .map(|name| {
            let closest = known
                .iter()
                .map(|k| (strsim::levenshtein(&name, k), k))
                .min()
                .filter(|(distance, _)| *distance <= name.len().div_ceil(3))
                .map(|(_, k)| k.clone());
            UnknownVariable { name, closest }
        })
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    unknown
}

fn from_keys(keys: Map<String, Value>) -> Result<Config, String> {
    serde_json::from_value(Value::Object(keys)).map_err(|e| e.to_string())
}

fn parse_env_value<T: serde::de::DeserializeOwned>(
    var: &str,
    value: &str,
) -> Result<T, ConfigError> {
    serde_json::from_value(Value::String(value.to_lowercase())).map_err(|e| ConfigError::Env {
        var: var.to_string(),
        value: value.to_string(),
        reason: e.to_string(),
    })
}

/// The typed readings of an environment string, most specific first.
fn env_candidates(value: &str) -> Vec<Value> {
    let mut out = Vec::new();
    match value.trim().to_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => out.push(Value::Bool(true)),
        "0" | "false" | "no" | "off" => out.push(Value::Bool(false)),
        _ => {}
    }
    if let Ok(number) = value.trim().parse::<u64>() {
        out.push(Value::from(number));
    }
    // A negative whole number is an i64 (`clock_shift_ns: -5`), not a float.
    if let Ok(number) = value.trim().parse::<i64>() {
        out.push(Value::from(number));
    }
    if let Ok(number) = value.trim().parse::<f64>() {
        out.push(Value::from(number));
    }
    out.push(Value::String(value.to_string()));
    out.push(Value::String(value.trim().to_lowercase()));
    out
}

/// The largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

fn read_file(path: &Path) -> Result<Map<String, Value>, ConfigError> {
    let read = || -> std::io::Result<String> {
        let file = crate::file::open_regular(path, true)?;
        let bytes = crate::file::read_capped(file, MAX_CONFIG_BYTES)?;
        String::from_utf8(bytes).map_err(std::io::Error::other)
    };
    let text = read().map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let is_toml = path.extension().is_some_and(|ext| ext == "toml");
    let parsed: Result<Value, String> = if is_toml {
        toml::from_str(&text).map_err(|e| e.to_string())
    } else {
        yaml_serde::from_str(&text).map_err(|e| e.to_string())
    };
    match parsed {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(ConfigError::File {
            path: path.to_path_buf(),
            reason: "expected a map of configuration keys".into(),
        }),
        Err(reason) => Err(ConfigError::File {
            path: path.to_path_buf(),
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn defaults_are_the_development_preset() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config, Config::preset(Preset::Development));
        assert_eq!(config.gather_timeout_s, 60.0);
        assert_eq!(config.output_dir, PathBuf::from("profiling_reports"));
    }

    #[test]
    fn keys_given_in_code_name_what_is_wrong() {
        let keys = |pairs: serde_json::Value| match pairs {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        let config = Config::from_map(keys(serde_json::json!({
            "preset": "production", "output_dir": "/tmp/x", "gather_timeout_s": 5,
        })))
        .unwrap();
        assert_eq!(config.output_dir, PathBuf::from("/tmp/x"));
        assert_eq!(config.gather_timeout_s, 5.0);
        assert_eq!(
            config.gpu_interval_s, 2.0,
            "the production preset's default"
        );

        let unknown = Config::from_map(keys(serde_json::json!({"outptu_dir": "x"})));
        let text = unknown.unwrap_err().to_string();
        assert!(
            text.contains("`outptu_dir`") && text.contains("did you mean `output_dir`"),
            "{text}"
        );
        let wrong = Config::from_map(keys(serde_json::json!({"gather_timeout_s": "soon"})));
        let text = wrong.unwrap_err().to_string();
        assert!(
            text.contains("`gather_timeout_s`") && text.contains("invalid type"),
            "{text}"
        );
        let range = Config::from_map(keys(serde_json::json!({"gather_timeout_s": -1})));
        assert!(range.unwrap_err().to_string().contains("gather_timeout_s"));
        let both = Config::from_map(keys(serde_json::json!({
            "window_every_steps": 10, "window_every_s": 60,
        })));
        let text = both.unwrap_err().to_string();
        assert!(text.contains("by steps or by seconds"), "{text}");
    }

    #[test]
    fn environment_overrides_every_kind_of_key() {
        let config = Config::load(
            None,
            env(&[
                ("RANKSCOPE_ENABLED", "0"),
                ("RANKSCOPE_OUTPUT_DIR", "/tmp/out"),
                ("RANKSCOPE_SESSION_ID", "1234"),
                ("RANKSCOPE_TRANSPORT", "dir"),
                ("RANKSCOPE_GATHER_TIMEOUT_S", "2.5"),
                ("RANKSCOPE_MAX_DATA_POINTS", "10"),
                ("RANKSCOPE_SIMULATED_HOT_RANK", "2"),
                ("RANKSCOPE_CLOCK_SHIFT_NS", "-5"),
            ]),
        )
        .unwrap();
        assert_eq!(config.clock_shift_ns, -5, "a negative number");
        assert!(!config.enabled);
        assert_eq!(config.output_dir, PathBuf::from("/tmp/out"));
        assert_eq!(config.session_id.as_deref(), Some("1234"));
        assert_eq!(config.transport, TransportKind::Dir);
        assert_eq!(config.gather_timeout_s, 2.5);
        assert_eq!(config.max_data_points, 10);
        assert_eq!(config.simulated_hot_rank, Some(2));
    }

    #[test]
    fn file_then_env_with_preset_from_file() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("rankscope.yaml");
        std::fs::write(&yaml, "preset: debugging\nhost_interval_s: 3\n").unwrap();
        let config = Config::load(Some(&yaml), env(&[("RANKSCOPE_HOST_INTERVAL_S", "4")])).unwrap();
        assert_eq!(config.preset, Preset::Debugging);
        assert!(config.live_display, "debugging preset turns the display on");
        assert_eq!(config.gpu_interval_s, 0.1);
        assert_eq!(config.host_interval_s, 4.0, "env beats file");

        let toml = dir.path().join("rankscope.toml");
        std::fs::write(&toml, "preset = \"production\"\nmax_data_points = 7\n").unwrap();
        let config = Config::load(Some(&toml), env(&[])).unwrap();
        assert_eq!(config.preset, Preset::Production);
        assert_eq!(config.max_data_points, 7);
        assert_eq!(config.gpu_interval_s, 2.0);
    }

    #[test]
    fn values_outside_their_range_are_refused_naming_the_variable() {
        for (var, key) in [
            ("RANKSCOPE_GATHER_TIMEOUT_S", "gather_timeout_s"),
            ("RANKSCOPE_GPU_INTERVAL_S", "gpu_interval_s"),
            ("RANKSCOPE_HOST_INTERVAL_S", "host_interval_s"),
        ] {
            let err = Config::load(None, env(&[(var, "1e20")])).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Env { var: v, .. } if v == var),
                "{key}: {err}"
            );
            assert!(err.to_string().contains("outside"), "{err}");
        }
        let err = Config::load(None, env(&[("RANKSCOPE_MAX_WORLD_SIZE", "0")])).unwrap_err();
        assert!(
            err.to_string().contains("RANKSCOPE_MAX_WORLD_SIZE"),
            "{err}"
        );
        // Every numeric key the validation reads has a range, and the
        // defaults of every preset lie inside them.
        for preset in [Preset::Development, Preset::Production, Preset::Debugging] {
            Config::preset(preset).validate().unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("c.yaml");
        std::fs::write(&yaml, "display_interval_s: 0\n").unwrap();
        let err = Config::load(Some(&yaml), env(&[])).unwrap_err().to_string();
        assert!(
            err.contains("c.yaml") && err.contains("display_interval_s"),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_value_that_is_not_utf8_is_refused() {
        use std::os::unix::ffi::OsStringExt;
        let vars = [(
            std::ffi::OsString::from("RANKSCOPE_OUTPUT_DIR"),
            std::ffi::OsString::from_vec(vec![b'/', 0xff]),
        )];
        let err = check_utf8(vars).unwrap_err().to_string();
        assert!(
            err.contains("RANKSCOPE_OUTPUT_DIR") && err.contains("UTF-8"),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_configuration_that_is_no_regular_file_is_refused_at_once() {
        let err = Config::load(Some(Path::new("/dev/zero")), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/dev/zero"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("config.yaml");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        assert!(Config::load(Some(&fifo), env(&[])).is_err());
    }

    #[test]
    fn a_misspelt_variable_is_named_with_the_closest_key() {
        let names = [
            "RANKSCOPE_GATHER_TIMEOUT",
            "RANKSCOPE_OUTPUT_DIR",
            "RANKSCOPE_RANK",
            "RANKSCOPE_ZZZZZZZZZZZZZZZZZZZZ",
            "PATH",
        ]
        .map(std::ffi::OsString::from);
        let unknown = unknown_variables(names);
        assert_eq!(
            unknown,
            [
                UnknownVariable {
                    name: "RANKSCOPE_GATHER_TIMEOUT".into(),
                    closest: Some("RANKSCOPE_GATHER_TIMEOUT_S".into()),
                },
                UnknownVariable {
                    name: "RANKSCOPE_ZZZZZZZZZZZZZZZZZZZZ".into(),
                    closest: None,
                },
            ]
        );
        assert!(unknown[0]
            .to_string()
            .contains("did you mean RANKSCOPE_GATHER_TIMEOUT_S?"));
    }

    #[test]
    fn errors_name_the_file_key_or_variable() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("bad.yaml");
        std::fs::write(&yaml, "gpu_intervall_s: 1\n").unwrap();
        let err = Config::load(Some(&yaml), env(&[])).unwrap_err().to_string();
        assert!(
            err.contains("bad.yaml") && err.contains("gpu_intervall_s"),
            "{err}"
        );

        let err = Config::load(None, env(&[("RANKSCOPE_GATHER_TIMEOUT_S", "soon")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("RANKSCOPE_GATHER_TIMEOUT_S=\"soon\""), "{err}");

        let err = Config::load(None, env(&[("RANKSCOPE_GPU_INTERVAL_S", "0")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("gpu_interval_s"), "{err}");

        let missing = dir.path().join("missing.toml");
        let err = Config::load(Some(&missing), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.toml"), "{err}");
    }
}

#[cfg(test)]
mod numeric_keys {
    use super::*;

    /// Every key whose default is a number has its range: a new numeric
    /// key without one fails here, not at run time.
    #[test]
    fn every_numeric_key_has_a_range() {
        let Ok(Value::Object(keys)) = serde_json::to_value(Config::default()) else {
            panic!("Config serializes to a map");
        };
        let ranged: Vec<&str> = NUMERIC_KEYS.iter().map(|k| k.key).collect();
        for (key, value) in &keys {
            if value.is_number() {
                assert!(ranged.contains(&key.as_str()), "`{key}` has no range");
            }
        }
        assert!(ranged.iter().all(|key| keys.contains_key(*key)));
    }
}
