//! The GPU side of the sampler: a small trait that NVML and the simulated
//! GPUs implement.

use std::sync::{Arc, Mutex};

use rankscope_common::payload::{GpuMeta, GpuSource};
use rankscope_common::table::GpuSampleRecord;

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
