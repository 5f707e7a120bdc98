//! GPUs and hosts over the session: per physical GPU (counted once even
//! when several ranks sample it) memory peak, utilisation, temperature,
//! power, energy, clocks and throttling; per rank the host's load.

use std::collections::BTreeMap;

use rankscope_common::column::OptColumn;
use rankscope_common::table::{GpuSamplesView, HostSamplesView};
use rankscope_common::Payload;

use crate::model::{GpuSummary, HostSummary};

const MB: f64 = (1u64 << 20) as f64;
/// NVML's "GPU idle" throttle reason: not a slowdown.
const IDLE_REASON: u64 = 0x1;

/// Energy in joules from power readings at `ts_ns`: Σ over consecutive
/// readings of the mean of their powers times the real time between them
/// (the trapezoid rule). Intervals with a missing reading at either end are
/// left out; `None` when no interval has both.
pub fn energy_joules(ts_ns: &[u64], power_w: &[Option<f64>]) -> Option<f64> {
    let mut energy = None;
    for i in 1..ts_ns.len().min(power_w.len()) {
        if let (Some(a), Some(b)) = (power_w[i - 1], power_w[i]) {
            let dt = ts_ns[i].saturating_sub(ts_ns[i - 1]) as f64 / 1e9;
            *energy.get_or_insert(0.0) += (a + b) / 2.0 * dt;
        }
    }
    energy
}

/// One summary per physical GPU, by host and UUID.
pub fn gpu_summaries(payloads: &[Payload]) -> Vec<GpuSummary> {
    let mut by_device: BTreeMap<(String, String), GpuSummary> = BTreeMap::new();
    // Payloads come by rank, so the first to claim a GPU is the lowest rank.
    for payload in payloads {
        let header = &payload.header;
        let view = payload.view::<GpuSamplesView>().ok().flatten();
        // The rows of each GPU, in one pass over the readings.
        let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); header.gpus.len()];
        if let Some(v) = &view {
            for i in 0..v.len {
                if let Some(rows) = rows_of.get_mut(v.gpu[i] as usize) {
                    rows.push(i);
                }
            }
        }
        for (meta, rows) in header.gpus.iter().zip(rows_of) {
            let key = (header.rank.host.clone(), meta.uuid.clone());
            if let Some(existing) = by_device.get_mut(&key) {
                existing.sampled_by.push(header.rank.rank);
                continue;
            }
            let mut summary = GpuSummary {
                rank: header.rank.rank,
                sampled_by: vec![header.rank.rank],
                host: header.rank.host.clone(),
                index: meta.index,
                uuid: meta.uuid.clone(),
                name: meta.name.clone(),
                source: header.gpu_source,
                samples: rows.len() as u64,
                memory_total_mb: meta.memory_total_bytes.map(|b| b as f64 / MB),
                memory_peak_mb: None,
                util_avg: None,
                temp_max_c: None,
                power_avg_w: None,
                energy_j: None,
                sm_clock_avg_mhz: None,
                sm_clock_max_mhz: meta.max_sm_clock_mhz,
                throttled_pct: None,
                bottlenecks: Vec::new(),
            };
            if let Some(v) = &view {
                let values = |column: OptColumn<'_, _>| -> Vec<Option<f64>> {
                    rows.iter().map(|&i| column.get(i)).collect()
                };
                summary.memory_peak_mb = max(rows
                    .iter()
                    .filter_map(|&i| v.memory_used_bytes.get(i))
                    .map(|b| b as f64 / MB));
                summary.memory_total_mb = summary.memory_total_mb.or_else(|| {
                    max(rows
                        .iter()
                        .filter_map(|&i| v.memory_total_bytes.get(i))
                        .map(|b| b as f64 / MB))
                });
                summary.util_avg = mean(values(v.util_gpu_pct).into_iter().flatten());
                summary.temp_max_c = max(values(v.temperature_c).into_iter().flatten());
                let power = values(v.power_w);
                summary.power_avg_w = mean(power.iter().flatten().copied());
                let ts: Vec<u64> = rows.iter().map(|&i| v.ts_ns[i]).collect();
                summary.energy_j = energy_joules(&ts, &power);
                summary.sm_clock_avg_mhz = mean(
                    rows.iter()
                        .filter_map(|&i| v.sm_clock_mhz.get(i))
                        .map(f64::from),
                );
                let reasons: Vec<u64> = rows
                    .iter()
                    .filter_map(|&i| v.throttle_reasons.get(i))
                    .collect();
                if !reasons.is_empty() {
                    let throttled = reasons.iter().filter(|&&r| r & !IDLE_REASON != 0).count();
                    summary.throttled_pct = Some(throttled as f64 / reasons.len() as f64 * 100.0);
                }
            }
            by_device.insert(key, summary);
        }
    }
    let mut gpus: Vec<GpuSummary> = by_device.into_values().collect();
    gpus.sort_by_key(|g| (g.rank, g.index));
    gpus
}

/// The host summary of one rank, from its host readings.
pub fn host_summary(payload: &Payload) -> Option<HostSummary> {
    let view: HostSamplesView = payload.view().ok().flatten()?;
    let cpu = || (0..view.len).filter_map(|i| view.cpu_pct.get(i));
    Some(HostSummary {
        samples: view.len as u64,
        cpu_avg_pct: mean(cpu()),
        cpu_peak_pct: max(cpu()),
        memory_peak_mb: view.memory_used_bytes.iter().copied().max().unwrap_or(0) as f64 / MB,
        memory_total_mb: view.memory_total_bytes.iter().copied().max().unwrap_or(0) as f64 / MB,
        load_1_max: max((0..view.len).filter_map(|i| view.load_1.get(i))),
        process_rss_peak_mb: max((0..view.len)
            .filter_map(|i| view.process_rss_bytes.get(i))
            .map(|b| b as f64 / MB)),
    })
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

fn max(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::payload::{GpuMeta, GpuSource, PayloadHeader};
    use rankscope_common::table::{GpuSampleRow, GpuSamplesBuilder, Table};

    /// A rank on `host` that sampled one GPU, `uuid`, twice: 100 W then 300 W, 2 s apart.
    fn rank_with_gpu(rank: u32, host: &str, uuid: &str) -> Payload {
        let mut header = PayloadHeader::new("s", "n", rank, 3);
        header.rank.host = host.into();
        header.gpu_source = GpuSource::Nvml;
        header.gpus.push(GpuMeta {
            index: 0,
            uuid: uuid.into(),
            name: "GPU".into(),
            pci_bus_id: "00000000:10:00.0".into(),
            memory_total_bytes: Some(1 << 30),
            max_sm_clock_mhz: Some(1980),
            max_mem_clock_mhz: None,
        });
        let mut rows = GpuSamplesBuilder::default();
        for (ts_ns, power, reasons) in [(0, 100.0, 0x1), (2_000_000_000, 300.0, 0x40)] {
            rows.append(&GpuSampleRow {
                ts_ns,
                gpu: 0,
                memory_used_bytes: Some(256 << 20),
                memory_total_bytes: Some(1 << 30),
                memory_reserved_bytes: None,
                util_gpu_pct: Some(50.0),
                util_mem_pct: None,
                temperature_c: Some(70.0),
                power_w: Some(power),
                power_limit_w: Some(400.0),
                sm_clock_mhz: Some(1500),
                mem_clock_mhz: None,
                throttle_reasons: Some(reasons),
                pcie_tx_kbps: None,
                pcie_rx_kbps: None,
            });
        }
        let mut payload = Payload {
            header,
            tables: Default::default(),
        };
        payload
            .tables
            .insert(Table::GpuSamples, rows.finish().unwrap());
        payload
    }

    #[test]
    fn a_gpu_sampled_by_several_ranks_counts_once() {
        let payloads = [
            rank_with_gpu(0, "node-a", "GPU-1"),
            rank_with_gpu(1, "node-a", "GPU-1"),
            rank_with_gpu(2, "node-b", "GPU-1"),
        ];
        let gpus = gpu_summaries(&payloads);
        assert_eq!(gpus.len(), 2, "same UUID on another host is another GPU");
        assert_eq!((gpus[0].rank, gpus[0].sampled_by.clone()), (0, vec![0, 1]));
        let g = &gpus[0];
        assert_eq!(g.samples, 2, "one rank's readings, not both");
        assert_eq!(g.energy_j, Some(400.0), "(100 + 300) / 2 W over 2 s");
        assert_eq!(g.power_avg_w, Some(200.0));
        assert_eq!(
            (g.memory_peak_mb, g.memory_total_mb),
            (Some(256.0), Some(1024.0))
        );
        assert_eq!(g.throttled_pct, Some(50.0), "idle is not throttling");
        assert_eq!(g.source, GpuSource::Nvml);
    }

    #[test]
    fn many_gpus_and_readings_are_grouped_in_one_pass() {
        // A crafted payload: thousands of GPUs, many readings, and readings
        // of GPUs the header does not list. Each GPU gets exactly its rows.
        const GPUS: u32 = 4_000;
        let mut payload = rank_with_gpu(0, "node", "GPU-0");
        payload.header.gpus = (0..GPUS)
            .map(|i| GpuMeta {
                uuid: format!("GPU-{i}"),
                ..payload.header.gpus[0].clone()
            })
            .collect();
        let template = GpuSamplesView::new(&payload.tables[&Table::GpuSamples]).unwrap();
        let mut rows = GpuSamplesBuilder::default();
        for i in 0..100_000u32 {
            rows.append(&GpuSampleRow {
                ts_ns: u64::from(i),
                gpu: i % (GPUS + 10),
                memory_used_bytes: None,
                memory_total_bytes: None,
                memory_reserved_bytes: None,
                util_gpu_pct: template.util_gpu_pct.get(0),
                util_mem_pct: None,
                temperature_c: None,
                power_w: None,
                power_limit_w: None,
                sm_clock_mhz: None,
                mem_clock_mhz: None,
                throttle_reasons: None,
                pcie_tx_kbps: None,
                pcie_rx_kbps: None,
            });
        }
        payload
            .tables
            .insert(Table::GpuSamples, rows.finish().unwrap());
        let gpus = gpu_summaries(&[payload]);
        assert_eq!(gpus.len(), GPUS as usize);
        let samples: u64 = gpus.iter().map(|g| g.samples).sum();
        // Readings of the 10 GPUs not listed are left out.
        let listed = (0..100_000u32).filter(|i| i % (GPUS + 10) < GPUS).count();
        assert_eq!(samples, listed as u64);
        assert!(gpus.iter().all(|g| g.util_avg == Some(50.0)));
    }

    #[test]
    fn energy_over_uneven_intervals_by_hand() {
        // 0 → 1 s at 100 → 200 W: 150 J; 1 → 1.5 s at 200 → 300 W: 125 J;
        // 1.5 → 4 s with a missing reading: left out; 4 → 6 s at 100 W: 200 J.
        let ts = [
            0,
            1_000_000_000,
            1_500_000_000,
            2_500_000_000,
            4_000_000_000,
            6_000_000_000,
        ];
        let power = [
            Some(100.0),
            Some(200.0),
            Some(300.0),
            None,
            Some(100.0),
            Some(100.0),
        ];
        assert_eq!(energy_joules(&ts, &power), Some(475.0));
        assert_eq!(energy_joules(&ts[..1], &power[..1]), None);
        assert_eq!(energy_joules(&ts[..2], &[None, Some(1.0)]), None);
    }
}
