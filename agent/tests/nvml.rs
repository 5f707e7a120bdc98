//! The NVML sampler through the real nvml-wrapper code path, against the
//! fake NVML library built from `fake_nvml/fake_nvml.c`.

mod fake_nvml;

use std::sync::Once;

use rankscope::{Config, MemoryReading, Profiler, RankEnv};
use rankscope_common::payload::{self, GpuSource};
use rankscope_common::table::{GpuSamplesView, MemorySnapshotsView, Table};
use rankscope_common::Payload;

/// Four fake GPUs, device 2 hot. Set once, before NVML starts in this process.
fn profiler(out: &std::path::Path, tweak: impl FnOnce(&mut Config)) -> Profiler {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        std::env::set_var("FAKE_NVML_DEVICES", "4");
        std::env::set_var("FAKE_NVML_HOT_DEVICE", "2");
    });
    let mut config = fake_nvml::config(out);
    tweak(&mut config);
    Profiler::with_rank_env(config, RankEnv::single())
}

fn run_session(profiler: &Profiler, work: impl FnOnce()) -> Payload {
    let session = profiler.session("nvml", &[]).unwrap();
    work();
    let outcome = session.finish().unwrap();
    payload::decode(&std::fs::read(outcome.spill_file).unwrap()).unwrap()
}

#[test]
fn every_field_is_read_from_the_chosen_devices() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |_| {});
    // 4 devices, 3 readings each.
    let payload = run_session(&profiler, || fake_nvml::wait_for_gpu_rows(&profiler, 4 * 3));
    let header = &payload.header;
    assert_eq!(header.gpu_source, GpuSource::Nvml);
    assert_eq!(header.gpu_selection, "gpu_devices=all");
    assert_eq!(header.gpus.len(), 4);
    let gpu0 = &header.gpus[0];
    assert_eq!(gpu0.name, "Fake GPU 0");
    assert_eq!(gpu0.uuid, "GPU-fa4e0000-0000-4000-8000-000000000000");
    assert_eq!(gpu0.pci_bus_id, "00000000:40:00.0");
    assert_eq!(gpu0.memory_total_bytes, Some(80 << 30));
    assert_eq!(
        (gpu0.max_sm_clock_mhz, gpu0.max_mem_clock_mhz),
        (Some(1980), Some(2619))
    );

    let view = GpuSamplesView::new(payload.table(Table::GpuSamples).unwrap()).unwrap();
    let rows_of = |gpu: u32| (0..view.len).filter(move |&i| view.gpu[i] == gpu);
    for gpu in 0..4 {
        assert!(rows_of(gpu).count() >= 3, "gpu {gpu} sampled repeatedly");
    }
    let i = rows_of(0).next().unwrap();
    assert_eq!(view.memory_total_bytes.get(i), Some(80 << 30));
    assert_eq!(view.memory_reserved_bytes.get(i), Some(512 << 20));
    assert!(view.memory_used_bytes.get(i).unwrap() >= 1 << 30);
    assert!((50.0..90.0).contains(&view.util_gpu_pct.get(i).unwrap()));
    assert!(view.util_mem_pct.get(i).is_some());
    assert_eq!(view.temperature_c.get(i), Some(60.0));
    assert_eq!(view.power_w.get(i), Some(250.0));
    assert_eq!(view.power_limit_w.get(i), Some(700.0));
    assert_eq!(
        (view.sm_clock_mhz.get(i), view.mem_clock_mhz.get(i)),
        (Some(1980), Some(2619))
    );
    assert_eq!(view.throttle_reasons.get(i), Some(0));
    assert_eq!(view.pcie_tx_kbps.get(i), None, "PCIe is off by default");

    // Device 1 does not support power readings: missing, not zero.
    assert!(rows_of(1).all(|i| view.power_w.get(i).is_none()));
    assert!(rows_of(1).all(|i| view.temperature_c.get(i) == Some(61.0)));
    // Device 2 is hot and throttling.
    let hot = rows_of(2).next().unwrap();
    assert_eq!(view.throttle_reasons.get(hot), Some(0x60));
    assert_eq!(view.sm_clock_mhz.get(hot), Some(1410));
    // The sampler reports its own cost: one reading covers all four GPUs.
    let cost = &header.sampler;
    assert_eq!(cost.gpu_readings as usize, rows_of(0).count());
    assert!(cost.gpu_read_ns_mean > 0 && cost.gpu_read_ns_mean <= cost.gpu_read_ns_max);
    assert_eq!(cost.host_readings, 0, "host sampling is off");

    // Timestamps rise per device.
    let ts: Vec<u64> = rows_of(3).map(|i| view.ts_ns[i]).collect();
    assert!(ts.windows(2).all(|w| w[0] < w[1]), "{ts:?}");
}

#[test]
fn pcie_throughput_is_read_on_its_own_schedule() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| {
        c.gpu_devices = Some("0".into());
        c.pcie_interval_s = Some(0.05);
    });
    // PCIe every 50 ms against GPU readings every 10 ms: 12 readings span
    // two PCIe readings at least, and more readings than those.
    let payload = run_session(&profiler, || fake_nvml::wait_for_gpu_rows(&profiler, 12));
    let view = GpuSamplesView::new(payload.table(Table::GpuSamples).unwrap()).unwrap();
    let with_pcie = (0..view.len)
        .filter(|&i| view.pcie_tx_kbps.get(i).is_some())
        .count();
    assert!(with_pcie >= 2, "some readings carry PCIe");
    assert!(with_pcie < view.len, "not every reading: PCIe is slower");
    let i = (0..view.len)
        .find(|&i| view.pcie_tx_kbps.get(i).is_some())
        .unwrap();
    assert_eq!(
        (view.pcie_tx_kbps.get(i), view.pcie_rx_kbps.get(i)),
        (Some(1000), Some(2000))
    );
}

#[test]
fn a_memory_snapshot_without_numbers_reads_nvml() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| c.gpu_devices = Some("3".into()));
    let payload = run_session(&profiler, || {
        profiler.memory_snapshot("after_load", MemoryReading::default());
        profiler.memory_snapshot(
            "given",
            MemoryReading {
                allocated_bytes: Some(7),
                ..MemoryReading::default()
            },
        );
    });
    let view = MemorySnapshotsView::new(payload.table(Table::MemorySnapshots).unwrap()).unwrap();
    assert_eq!(view.source.get(0), "nvml");
    // This process's entry in the fake's process list (count, then fill).
    assert_eq!(view.allocated_bytes.get(0), Some(512 << 20));
    assert!(view.reserved_bytes.get(0).unwrap() >= 1 << 30);
    assert_eq!(view.gpu.get(0), Some(0));
    assert_eq!(view.source.get(1), "caller");
    assert_eq!(view.allocated_bytes.get(1), Some(7));
}
