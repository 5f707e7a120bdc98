//! The live display: one line of the rank's latest GPU and host readings.

use std::fmt::Write;

use rankscope_common::payload::{GpuMeta, GpuSource};
use rankscope_common::table::{GpuSampleRecord, HostSampleRecord};

const MB: f64 = (1u64 << 20) as f64;

/// e.g. `rank 0 GPU0: mem 8420/24564 MB (34%) util 85% 72°C 210/300 W | CPU 45% mem 12840/32768 MB`;
/// simulated readings are marked `[simulated]`.
pub(crate) fn line(
    rank: u32,
    source: GpuSource,
    devices: &[GpuMeta],
    gpus: &[GpuSampleRecord],
    host: Option<&HostSampleRecord>,
) -> String {
    let mut out = format!("rank {rank}");
    if source == GpuSource::Simulated {
        out.push_str(" [simulated]");
    }
    let num =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for row in gpus {
        let index = devices.get(row.gpu as usize).map_or(row.gpu, |d| d.index);
        let used = row.memory_used_bytes.map(|b| b as f64 / MB);
        let total = row.memory_total_bytes.map(|b| b as f64 / MB);
        let share = used
            .zip(total)
            .filter(|(_, t)| *t > 0.0)
            .map(|(u, t)| u / t * 100.0);
        let _ = write!(
            out,
            " GPU{index}: mem {}/{} MB ({}%) util {}% {}°C {}/{} W",
            num(used, 0),
            num(total, 0),
            num(share, 0),
            num(row.util_gpu_pct, 0),
            num(row.temperature_c, 0),
            num(row.power_w, 0),
            num(row.power_limit_w, 0),
        );
    }
    if let Some(host) = host {
        let _ = write!(
            out,
            " | CPU {}% mem {:.0}/{:.0} MB",
            num(host.cpu_pct, 0),
            host.memory_used_bytes as f64 / MB,
            host.memory_total_bytes as f64 / MB
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_reads_like_the_issue_says() {
        let gpu = GpuSampleRecord {
            ts_ns: 0,
            gpu: 0,
            memory_used_bytes: Some(8420 << 20),
            memory_total_bytes: Some(24564 << 20),
            memory_reserved_bytes: None,
            util_gpu_pct: Some(85.0),
            util_mem_pct: None,
            temperature_c: Some(72.0),
            power_w: Some(210.0),
            power_limit_w: Some(300.0),
            sm_clock_mhz: None,
            mem_clock_mhz: None,
            throttle_reasons: None,
            pcie_tx_kbps: None,
            pcie_rx_kbps: None,
        };
        let host = HostSampleRecord {
            ts_ns: 0,
            cpu_pct: Some(45.0),
            memory_used_bytes: 12840 << 20,
            memory_total_bytes: 32768 << 20,
            load_1: None,
            load_5: None,
            load_15: None,
            process_rss_bytes: None,
        };
        assert_eq!(
            line(0, GpuSource::Nvml, &[], std::slice::from_ref(&gpu), Some(&host)),
            "rank 0 GPU0: mem 8420/24564 MB (34%) util 85% 72°C 210/300 W | CPU 45% mem 12840/32768 MB"
        );
        let missing = GpuSampleRecord {
            power_w: None,
            ..gpu
        };
        let text = line(3, GpuSource::Simulated, &[], &[missing], None);
        assert!(text.starts_with("rank 3 [simulated] GPU0:"), "{text}");
        assert!(
            text.contains(" -/300 W"),
            "a missing reading shows as -, not 0: {text}"
        );
    }
}
