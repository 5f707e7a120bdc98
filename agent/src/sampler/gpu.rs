//! The GPU side of the sampler: a small trait that NVML and the simulated
//! GPUs implement, and the choice between them.

use std::sync::{Arc, Mutex};

use rankscope_common::config::GpuSourceKind;
use rankscope_common::env::RankEnv;
use rankscope_common::payload::{GpuMeta, GpuSource};
use rankscope_common::table::GpuSampleRecord;
use rankscope_common::Config;

use super::nvml::{NvmlOpenError, NvmlReader};
use super::simulated::SimulatedReader;
use crate::MemoryReading;

/// Something that happened to a GPU, recorded as an event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuEvent {
    /// Event name, e.g. `gpu_lost`.
    pub(crate) name: &'static str,
    /// Event payload.
    pub(crate) payload: serde_json::Value,
}

/// Reads the GPUs a rank uses.
pub(crate) trait GpuReader: Send {
    /// Where the readings come from.
    fn source(&self) -> GpuSource;
    /// The devices read, in the order of the `gpu` column.
    fn devices(&self) -> &[GpuMeta];
    /// How the devices were chosen.
    fn selection(&self) -> &str;
    /// Whether readings depend on the stages running (simulated GPUs).
    fn follows_stages(&self) -> bool {
        false
    }
    /// Reads every device once, appending one row per device to `out`;
    /// `open_stages` is what the rank is running now, `pcie` whether to read
    /// PCIe throughput this time.
    fn sample(
        &mut self,
        ts_ns: u64,
        open_stages: &[String],
        pcie: bool,
        out: &mut Vec<GpuSampleRecord>,
        events: &mut Vec<GpuEvent>,
    );
    /// Memory numbers of device `gpu` for a snapshot.
    fn memory(&mut self, gpu: u32) -> Option<MemoryReading>;
}

/// A GPU reader shared by the sampler thread and `memory_snapshot`.
pub(crate) type SharedGpuReader = Arc<Mutex<Box<dyn GpuReader>>>;

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
