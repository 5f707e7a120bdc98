//! The table of numeric keys, each with its range, and the validation of a
//! configuration against it.

use super::{Config, ConfigError, MAX_TRACE_RANKS};

impl Config {
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
        if self.trace_ranks.len() > MAX_TRACE_RANKS {
            return Err(ConfigError::Invalid {
                key: "trace_ranks",
                reason: format!(
                    "`trace_ranks` names {} ranks, past the {MAX_TRACE_RANKS} allowed",
                    self.trace_ranks.len()
                ),
            });
        }
        if let Some(layout) = &self.parallel_layout {
            if let Err(e) = layout.parse::<crate::parallel::ParallelLayout>() {
                return Err(ConfigError::Invalid {
                    key: "parallel_layout",
                    reason: format!("`parallel_layout` = {layout:?}: {e}"),
                });
            }
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

/// A [`NumericKey`] entry of [`NUMERIC_KEYS`].
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
    numeric("gather_levels", 1.0, 2.0, |c| {
        Some(f64::from(c.gather_levels))
    }),
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
    numeric("window_expiry_s", 0.001, 86_400.0, |c| {
        Some(c.window_expiry_s)
    }),
    numeric("window_on_imbalance_pct", 0.0, 1_000_000.0, |c| {
        Some(c.window_on_imbalance_pct)
    }),
    numeric("window_every_s", 0.0, 31_536_000.0, |c| {
        Some(c.window_every_s)
    }),
    numeric("python_tracing_max_depth", 1.0, 100_000.0, |c| {
        Some(f64::from(c.python_tracing_max_depth))
    }),
    numeric("python_tracing_min_duration_us", 0.0, 3.6e9, |c| {
        Some(c.python_tracing_min_duration_us)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

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
