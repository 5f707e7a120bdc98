//! Simulated GPUs: one synthetic device per rank (or, with
//! `simulated_gpus`, a few per host that its ranks share by local rank)
//! whose readings follow the stages the rank runs (busy in diffusion steps,
//! memory rising through the decode), with one rank's GPU running hot and
//! throttling. Never real
//! hardware, and labelled so: the payload says `gpu_source: simulated`, the
//! device name says "Simulated", and the UUID starts with `SIMULATED-`.

use rankscope_common::env::RankEnv;
use rankscope_common::payload::{GpuMeta, GpuSource};
use rankscope_common::table::GpuSampleRecord;

use super::reader::{GpuEvent, GpuReader};
use crate::MemoryReading;

const GIB: u64 = 1 << 30;
const MEMORY_TOTAL: u64 = 80 * GIB;
const POWER_LIMIT_W: f64 = 700.0;
const MAX_SM_CLOCK_MHZ: u32 = 1980;
const MAX_MEM_CLOCK_MHZ: u32 = 2619;
/// NVML's SW and HW thermal slowdown reason bits.
const THERMAL_SLOWDOWN: u64 = 0x20 | 0x40;

/// What the rank is doing, as far as a GPU would notice.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Idle,
    Encode,
    Denoise,
    Decode,
}

impl Phase {
    fn of(open_stages: &[String]) -> Phase {
        let running = |words: &[&str]| {
            open_stages
                .iter()
                .any(|s| words.iter().any(|w| s.to_ascii_lowercase().contains(w)))
        };
        if running(&["denoise", "diffusion", "step", "attention"]) {
            Phase::Denoise
        } else if running(&["decode", "vae"]) {
            Phase::Decode
        } else if running(&["encod", "load"]) {
            Phase::Encode
        } else {
            Phase::Idle
        }
    }

    /// GPU utilisation and power share in this phase.
    fn load(self) -> (f64, f64) {
        match self {
            Phase::Idle => (3.0, 0.15),
            Phase::Encode => (55.0, 0.45),
            Phase::Denoise => (95.0, 0.85),
            Phase::Decode => (75.0, 0.65),
        }
    }
}

/// The simulated GPU of one rank.
pub(crate) struct SimulatedReader {
    meta: Vec<GpuMeta>,
    hot: bool,
    memory_used: u64,
    samples: u64,
}

impl SimulatedReader {
    /// The simulated GPU of the rank `env` describes: its own, or with
    /// `shared` GPUs on its host the one of its local rank among them; that
    /// of rank `hot_rank` runs hot and throttles (shared, on every rank
    /// sharing it).
    pub(crate) fn new(env: &RankEnv, hot_rank: Option<u32>, shared: Option<u32>) -> Self {
        let (index, uuid, hot) = match shared.filter(|&n| n > 0) {
            Some(n) => {
                let host = env
                    .node
                    .clone()
                    .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned());
                let index = env.local_rank % n;
                (
                    index,
                    format!("SIMULATED-GPU-{host}-{index}"),
                    hot_rank.is_some_and(|h| h % n == index),
                )
            }
            None => (
                env.local_rank,
                format!("SIMULATED-GPU-rank{}", env.rank),
                hot_rank == Some(env.rank),
            ),
        };
        SimulatedReader {
            meta: vec![GpuMeta {
                index,
                uuid,
                name: "Simulated GPU (not real hardware)".into(),
                pci_bus_id: "simulated".into(),
                memory_total_bytes: Some(MEMORY_TOTAL),
                max_sm_clock_mhz: Some(MAX_SM_CLOCK_MHZ),
                max_mem_clock_mhz: Some(MAX_MEM_CLOCK_MHZ),
            }],
            hot,
            memory_used: 18 * GIB,
            samples: 0,
        }
    }
}

impl GpuReader for SimulatedReader {
    fn source(&self) -> GpuSource {
        GpuSource::Simulated
    }

    fn devices(&self) -> &[GpuMeta] {
        &self.meta
    }

    fn selection(&self) -> &str {
        "simulated"
    }

    fn follows_stages(&self) -> bool {
        true
    }

    fn sample(
        &mut self,
        ts_ns: u64,
        open_stages: &[String],
        _pcie: bool,
        out: &mut Vec<GpuSampleRecord>,
        _events: &mut Vec<GpuEvent>,
    ) {
        self.samples += 1;
        // A small repeatable wobble, so the series is not flat.
        let wobble = ((self.samples * 37) % 7) as f64 - 3.0;
        let phase = Phase::of(open_stages);
        let (util, power_share) = phase.load();
        match phase {
            Phase::Decode => {
                self.memory_used = (self.memory_used + 2 * GIB).min(MEMORY_TOTAL - GIB)
            }
            // Each block's denoising frees what the last decode held.
            Phase::Denoise => self.memory_used = 40 * GIB,
            _ => {}
        }
        let busy = phase != Phase::Idle;
        let (temperature, throttle, sm_clock) = if self.hot && busy {
            (88.0 + wobble / 3.0, THERMAL_SLOWDOWN, 1410)
        } else {
            (if busy { 68.0 } else { 45.0 } + wobble, 0, MAX_SM_CLOCK_MHZ)
        };
        out.push(GpuSampleRecord {
            ts_ns,
            gpu: 0,
            memory_used_bytes: Some(self.memory_used),
            memory_total_bytes: Some(MEMORY_TOTAL),
            memory_reserved_bytes: Some(GIB / 2),
            util_gpu_pct: Some((util + wobble).clamp(0.0, 100.0)),
            util_mem_pct: Some((util * 0.6 + wobble).clamp(0.0, 100.0)),
            temperature_c: Some(temperature),
            power_w: Some(POWER_LIMIT_W * power_share + wobble * 5.0),
            power_limit_w: Some(POWER_LIMIT_W),
            sm_clock_mhz: Some(sm_clock),
            mem_clock_mhz: Some(MAX_MEM_CLOCK_MHZ),
            throttle_reasons: Some(throttle),
            pcie_tx_kbps: None,
            pcie_rx_kbps: None,
        });
    }

    fn memory(&mut self, gpu: u32) -> Option<MemoryReading> {
        (gpu == 0).then_some(MemoryReading {
            gpu: Some(0),
            allocated_bytes: Some(self.memory_used),
            reserved_bytes: Some(self.memory_used + GIB / 2),
            max_allocated_bytes: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(reader: &mut SimulatedReader, stages: &[&str]) -> GpuSampleRecord {
        let stages: Vec<String> = stages.iter().map(|s| s.to_string()).collect();
        let mut out = Vec::new();
        reader.sample(0, &stages, false, &mut out, &mut Vec::new());
        out.pop().unwrap()
    }

    #[test]
    fn readings_follow_the_stages_and_the_hot_rank_throttles() {
        let env = RankEnv::single();
        let mut cool = SimulatedReader::new(&env, None, None);
        let idle = sample(&mut cool, &[]);
        let busy = sample(&mut cool, &["diffusion_block", "denoise_step"]);
        assert!(busy.util_gpu_pct.unwrap() > 85.0 && idle.util_gpu_pct.unwrap() < 10.0);
        assert!(busy.power_w > idle.power_w);
        let before = sample(&mut cool, &["vae_decode"])
            .memory_used_bytes
            .unwrap();
        let after = sample(&mut cool, &["vae_decode"])
            .memory_used_bytes
            .unwrap();
        assert!(after > before, "memory rises through the decode");
        assert_eq!(busy.throttle_reasons, Some(0));

        let mut hot = SimulatedReader::new(&env, Some(env.rank), None);
        let row = sample(&mut hot, &["denoise_step"]);
        assert_eq!(row.throttle_reasons, Some(THERMAL_SLOWDOWN));
        assert!(row.temperature_c.unwrap() > 85.0);
        assert!(row.sm_clock_mhz.unwrap() < MAX_SM_CLOCK_MHZ);
        assert!(hot.devices()[0].name.contains("Simulated"));
    }

    #[test]
    fn ranks_share_a_hosts_simulated_gpus_by_local_rank() {
        let on = |local_rank: u32| RankEnv {
            local_rank,
            rank: local_rank + 8,
            node: Some("node-1".into()),
            ..RankEnv::single()
        };
        let device = |local_rank: u32, hot: Option<u32>| {
            let reader = SimulatedReader::new(&on(local_rank), hot, Some(2));
            (
                reader.meta[0].index,
                reader.meta[0].uuid.clone(),
                reader.hot,
            )
        };
        assert_eq!(device(0, None), (0, "SIMULATED-GPU-node-1-0".into(), false));
        assert_eq!(
            device(3, Some(1)),
            (1, "SIMULATED-GPU-node-1-1".into(), true)
        );
        assert!(!device(2, Some(1)).2, "GPU 0 is not the hot one");
    }
}
