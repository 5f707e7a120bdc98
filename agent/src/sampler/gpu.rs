//! The choice of GPU reader: NVML's or the simulated GPUs'.

use rankscope_common::config::GpuSourceKind;
use rankscope_common::env::RankEnv;
use rankscope_common::Config;

use super::nvml::{NvmlOpenError, NvmlReader};
use super::reader::GpuReader;
use super::simulated::SimulatedReader;

/// Opens the GPU reader the configuration asks for. `Ok(None)` means no GPU
/// telemetry by choice; `Err` says why telemetry is off against the wish.
pub(crate) fn open(
    config: &Config,
    env: &RankEnv,
) -> Result<Option<Box<dyn GpuReader>>, NvmlOpenError> {
    let cuda_visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let nvml = || {
        NvmlReader::open(
            config.nvml_library.as_deref(),
            config.gpu_devices.as_deref(),
            cuda_visible.as_deref(),
            env.local_rank,
        )
        .map(|reader| Some(Box::new(reader) as Box<dyn GpuReader>))
    };
    match config.gpu_source {
        GpuSourceKind::None => Ok(None),
        GpuSourceKind::Simulated => Ok(Some(Box::new(SimulatedReader::new(
            env,
            config.simulated_hot_rank,
            config.simulated_gpus,
        )))),
        GpuSourceKind::Nvml | GpuSourceKind::Auto => nvml(),
    }
}
