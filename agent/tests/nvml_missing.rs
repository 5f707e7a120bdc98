//! No NVML library: the agent says GPU telemetry is off, records
//! `gpu_source: none` and carries on. Its own test process, so NVML's
//! once-per-process start sees the missing library.

use rankscope::{Config, Profiler, RankEnv};
use rankscope_common::config::GpuSourceKind;
use rankscope_common::payload::{self, GpuSource};
use rankscope_common::table::Table;

#[test]
fn without_the_library_telemetry_is_off_and_the_job_goes_on() {
    let out = tempfile::tempdir().unwrap();
    let missing = out.path().join("libnvidia-ml.so.1");
    assert!(!rankscope::nvml_available(Some(&missing)));
    let profiler = Profiler::with_rank_env(
        Config {
            output_dir: out.path().into(),
            gpu_source: GpuSourceKind::Auto,
            nvml_library: Some(missing),
            host_interval_s: 0.01,
            ..Config::default()
        },
        RankEnv::single(),
    );
    let session = profiler.session("no-gpu", &[]).unwrap();
    drop(profiler.stage("work"));
    std::thread::sleep(std::time::Duration::from_millis(50));
    let outcome = session.finish().unwrap();
    let payload = payload::decode(&std::fs::read(outcome.spill_file).unwrap()).unwrap();
    assert_eq!(payload.header.gpu_source, GpuSource::None);
    assert!(payload.header.gpus.is_empty());
    assert!(payload.table(Table::GpuSamples).is_none());
    assert_eq!(payload.rows(Table::Stages), 1);
    assert!(
        payload.rows(Table::HostSamples) >= 2,
        "host telemetry still runs"
    );
}
