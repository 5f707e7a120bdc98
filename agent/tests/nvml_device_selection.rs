//! Which GPUs a rank samples, from CUDA_VISIBLE_DEVICES and LOCAL_RANK,
//! through the real NVML path. One test in its own process: it sets
//! CUDA_VISIBLE_DEVICES.

mod fake_nvml;

use rankscope::{Config, Profiler, RankEnv};
use rankscope_common::payload::{self, GpuSource, PayloadHeader};

fn header(out: &std::path::Path, local_rank: u32) -> PayloadHeader {
    let config = Config {
        gpu_devices: None,
        ..fake_nvml::config(out)
    };
    let profiler = Profiler::with_rank_env(
        config,
        RankEnv {
            local_rank,
            ..RankEnv::single()
        },
    );
    let outcome = profiler.session("select", &[]).unwrap().finish().unwrap();
    payload::decode(&std::fs::read(outcome.spill_file).unwrap())
        .unwrap()
        .header
}

#[test]
fn devices_follow_cuda_visible_devices_and_local_rank() {
    std::env::set_var("FAKE_NVML_DEVICES", "4");
    let out = tempfile::tempdir().unwrap();
    // NVML index i sits on bus 0x10 · (4 − i): CUDA ordinal 0 is NVML index 3.
    std::env::remove_var("CUDA_VISIBLE_DEVICES");
    let h = header(out.path(), 0);
    assert_eq!(h.gpu_source, GpuSource::Nvml);
    assert_eq!(h.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), vec![3]);
    assert!(
        h.gpu_selection.contains("LOCAL_RANK=0"),
        "{}",
        h.gpu_selection
    );
    let h = header(out.path(), 2);
    assert_eq!(h.gpus[0].index, 1);

    std::env::set_var("CUDA_VISIBLE_DEVICES", "1");
    let h = header(out.path(), 3);
    assert_eq!(
        h.gpus[0].index, 2,
        "CUDA ordinal 1 is the second device by bus id"
    );
    assert_eq!(h.gpus[0].pci_bus_id, "00000000:20:00.0");

    std::env::set_var("CUDA_VISIBLE_DEVICES", "0,1,2,3");
    let h = header(out.path(), 1);
    assert_eq!(h.gpus[0].index, 2);

    std::env::set_var(
        "CUDA_VISIBLE_DEVICES",
        "GPU-fa4e0001-0000-4000-8000-000000000001",
    );
    let h = header(out.path(), 0);
    assert_eq!(h.gpus[0].index, 1);
    assert_eq!(
        h.gpu_selection,
        "CUDA_VISIBLE_DEVICES=GPU-fa4e0001-0000-4000-8000-000000000001"
    );

    // A UUID that matches nothing: telemetry off (with the reason on stderr),
    // the session itself still finishes.
    std::env::set_var("CUDA_VISIBLE_DEVICES", "GPU-deadbeef");
    let h = header(out.path(), 0);
    assert_eq!(h.gpu_source, GpuSource::None);
    assert!(h.gpus.is_empty());
}
