//! GPU readings through NVML (nvml-wrapper). NVML is initialised once per
//! process; each rank reads only the devices it uses.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use rankscope_common::payload::{GpuMeta, GpuSource};
use rankscope_common::table::GpuSampleRecord;

use super::reader::{GpuEvent, GpuReader};
use super::select::{select, DeviceId, SelectError};
use crate::MemoryReading;

/// Why NVML readings cannot be had.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum NvmlOpenError {
    /// The library did not load.
    #[error("the NVML library could not be loaded (no NVIDIA driver here?)")]
    Load(#[source] Arc<NvmlError>),
    /// The library loaded, but NVML did not start.
    #[error("NVML could not start")]
    Start(#[source] Arc<NvmlError>),
    /// A device could not be listed or opened.
    #[error("NVML {what} of device {index}")]
    Device {
        /// NVML index.
        index: u32,
        /// What was asked.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: Arc<NvmlError>,
    },
    /// NVML could not count the devices.
    #[error("NVML device count")]
    Count(#[source] Arc<NvmlError>),
    /// The devices asked for are not there.
    #[error(transparent)]
    Select(#[from] SelectError),
}

/// The process's NVML handle: the first initialisation's outcome, kept.
fn nvml(library: Option<&Path>) -> Result<&'static Nvml, NvmlOpenError> {
    static NVML: OnceLock<Result<Nvml, NvmlOpenError>> = OnceLock::new();
    NVML.get_or_init(|| {
        let mut builder = Nvml::builder();
        if let Some(path) = library {
            builder.lib_path(path.as_os_str());
        }
        builder.init().map_err(|e| match e {
            NvmlError::LibloadingError(_) => NvmlOpenError::Load(Arc::new(e)),
            other => NvmlOpenError::Start(Arc::new(other)),
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// A failed NVML call about device `index`.
fn device_error(index: u32, what: &'static str) -> impl FnOnce(NvmlError) -> NvmlOpenError {
    move |source| NvmlOpenError::Device {
        index,
        what,
        source: Arc::new(source),
    }
}

/// Whether NVML loads on this machine (with the given library path).
pub fn available(library: Option<&Path>) -> bool {
    nvml(library).is_ok()
}

struct OpenDevice {
    device: Device<'static>,
    lost: bool,
}

/// Reads the chosen devices through NVML.
pub(crate) struct NvmlReader {
    devices: Vec<OpenDevice>,
    meta: Vec<GpuMeta>,
    selection: String,
    pid: u32,
}

impl NvmlReader {
    /// Initialises NVML (once per process) and opens the devices this rank uses.
    pub(crate) fn open(
        library: Option<&Path>,
        configured: Option<&str>,
        cuda_visible: Option<&str>,
        local_rank: u32,
    ) -> Result<Self, NvmlOpenError> {
        let nvml = nvml(library)?;
        let count = nvml
            .device_count()
            .map_err(|e| NvmlOpenError::Count(Arc::new(e)))?;
        let mut ids = Vec::new();
        for index in 0..count {
            let device = nvml
                .device_by_index(index)
                .map_err(device_error(index, "handle"))?;
            ids.push(DeviceId {
                index,
                uuid: device.uuid().map_err(device_error(index, "UUID"))?,
                pci_bus_id: device
                    .pci_info()
                    .map_err(device_error(index, "PCI info"))?
                    .bus_id,
            });
        }
        let selection = select(&ids, configured, cuda_visible, local_rank)?;
        let mut devices = Vec::new();
        let mut meta = Vec::new();
        for &index in &selection.indices {
            let device = nvml
                .device_by_index(index)
                .map_err(device_error(index, "handle"))?;
            let id = &ids[index as usize];
            meta.push(GpuMeta {
                index,
                uuid: id.uuid.clone(),
                name: device.name().unwrap_or_else(|_| "unknown".into()),
                pci_bus_id: id.pci_bus_id.clone(),
                memory_total_bytes: device.memory_info().ok().map(|m| m.total),
                max_sm_clock_mhz: device.max_clock_info(Clock::SM).ok(),
                max_mem_clock_mhz: device.max_clock_info(Clock::Memory).ok(),
            });
            devices.push(OpenDevice {
                device,
                lost: false,
            });
        }
        Ok(NvmlReader {
            devices,
            meta,
            selection: selection.how,
            pid: std::process::id(),
        })
    }
}

/// A reading's value; `None` when the device does not support it or the
/// call failed. A lost GPU is remembered in `lost`.
fn read<T>(result: Result<T, NvmlError>, lost: &mut Option<String>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(NvmlError::GpuLost) => {
            lost.get_or_insert_with(|| "the GPU has fallen off the bus".into());
            None
        }
        Err(_) => None,
    }
}

impl GpuReader for NvmlReader {
    fn source(&self) -> GpuSource {
        GpuSource::Nvml
    }

    fn devices(&self) -> &[GpuMeta] {
        &self.meta
    }

    fn selection(&self) -> &str {
        &self.selection
    }

    fn sample(
        &mut self,
        ts_ns: u64,
        _open_stages: &[String],
        pcie: bool,
        out: &mut Vec<GpuSampleRecord>,
        events: &mut Vec<GpuEvent>,
    ) {
        for (gpu, open) in self.devices.iter_mut().enumerate() {
            if open.lost {
                continue;
            }
            let device = &open.device;
            let mut lost = None;
            let memory = read(device.memory_info(), &mut lost);
            let util = read(device.utilization_rates(), &mut lost);
            let (pcie_tx_kbps, pcie_rx_kbps) = if pcie {
                (
                    read(device.pcie_throughput(PcieUtilCounter::Send), &mut lost),
                    read(device.pcie_throughput(PcieUtilCounter::Receive), &mut lost),
                )
            } else {
                (None, None)
            };
            let row = GpuSampleRecord {
                ts_ns,
                gpu: gpu as u32,
                memory_used_bytes: memory.as_ref().map(|m| m.used),
                memory_total_bytes: memory.as_ref().map(|m| m.total),
                memory_reserved_bytes: memory.as_ref().map(|m| m.reserved),
                util_gpu_pct: util.as_ref().map(|u| f64::from(u.gpu)),
                util_mem_pct: util.as_ref().map(|u| f64::from(u.memory)),
                temperature_c: read(device.temperature(TemperatureSensor::Gpu), &mut lost)
                    .map(f64::from),
                power_w: read(device.power_usage(), &mut lost).map(|mw| f64::from(mw) / 1e3),
                power_limit_w: read(device.enforced_power_limit(), &mut lost)
                    .map(|mw| f64::from(mw) / 1e3),
                sm_clock_mhz: read(device.clock_info(Clock::SM), &mut lost),
                mem_clock_mhz: read(device.clock_info(Clock::Memory), &mut lost),
                throttle_reasons: read(device.current_throttle_reasons(), &mut lost)
                    .map(|r| r.bits()),
                pcie_tx_kbps,
                pcie_rx_kbps,
            };
            match lost {
                None => out.push(row),
                Some(reason) => {
                    open.lost = true;
                    let meta = &self.meta[gpu];
                    events.push(GpuEvent {
                        name: "gpu_lost",
                        payload: serde_json::json!({
                            "gpu": gpu, "index": meta.index, "uuid": meta.uuid, "reason": reason,
                        }),
                    });
                }
            }
        }
    }

    fn memory(&mut self, gpu: u32) -> Option<MemoryReading> {
        let open = self.devices.get(gpu as usize).filter(|d| !d.lost)?;
        let device_used = open.device.memory_info().ok().map(|m| m.used);
        let own = open
            .device
            .running_compute_processes()
            .ok()
            .and_then(|processes| processes.into_iter().find(|p| p.pid == self.pid))
            .and_then(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            });
        Some(MemoryReading {
            gpu: Some(gpu),
            allocated_bytes: own,
            reserved_bytes: device_used,
            max_allocated_bytes: None,
        })
    }
}
