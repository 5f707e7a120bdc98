//! What the coordinator reads of the configuration: the analysis's rules
//! and the report's bounds, not the agent's transport, tokens or sampling.

use rankscope_common::Config;

use crate::analysis::{BottleneckRule, StragglerRule};

/// The settings of an analysis and of the report files it writes, taken
/// from a [`Config`] (`AnalysisConfig::from(&config)`); the default is the
/// default configuration's.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalysisConfig {
    /// Calls of each stage left out at its start (`warmup_calls`).
    pub warmup_calls: u32,
    /// When a rank is a straggler (`straggler_threshold_pct`,
    /// `straggler_min_s`).
    pub stragglers: StragglerRule,
    /// When a GPU is a bottleneck (the `gpu_*` keys).
    pub bottlenecks: BottleneckRule,
    /// Rows of each table kept from a payload read (`max_data_points`).
    pub max_data_points: usize,
    /// Ranks a session may have; a payload claiming more is refused
    /// (`max_world_size`).
    pub max_world_size: u32,
    /// Stage spans written into `trace.json.gz` (`trace_max_stages`).
    pub trace_max_stages: u64,
    /// Ranks whose rows the trace and raw/ hold in a two-level gather too
    /// (`trace_ranks`).
    pub trace_ranks: Vec<u32>,
}

impl From<&Config> for AnalysisConfig {
    fn from(config: &Config) -> Self {
        AnalysisConfig {
            warmup_calls: config.warmup_calls,
            stragglers: StragglerRule {
                threshold_pct: config.straggler_threshold_pct,
                min_excess_s: config.straggler_min_s,
            },
            bottlenecks: BottleneckRule {
                memory_peak_pct: config.gpu_memory_pressure_pct,
                thermal_readings_pct: config.gpu_thermal_readings_pct,
                thermal_temp_c: config.gpu_thermal_temp_c,
                power_draw_pct: 95.0,
                power_readings_pct: config.gpu_power_readings_pct,
                busy_util_pct: 80.0,
                clock_pct: config.gpu_clock_pct,
                underutilized_pct: config.gpu_underutilized_pct,
                outlier_sigma: config.gpu_outlier_sigma,
                outlier_min_pct: 10.0,
                outlier_min_gpus: 3,
            },
            max_data_points: config.max_data_points,
            max_world_size: config.max_world_size,
            trace_max_stages: config.trace_max_stages,
            trace_ranks: config.trace_ranks.clone(),
        }
    }
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        AnalysisConfig::from(&Config::default())
    }
}
