//! A GPU that falls off the bus mid-run ends that device's sampling with an
//! event; the other device and the job carry on. Its own test process, so
//! the fake NVML starts with this configuration.

mod fake_nvml;

use rankscope::{Profiler, RankEnv};
use rankscope_common::payload;
use rankscope_common::table::{EventsView, GpuSamplesView, Table};

#[test]
fn a_lost_gpu_ends_with_an_event_not_a_crash() {
    std::env::set_var("FAKE_NVML_DEVICES", "2");
    std::env::set_var("FAKE_NVML_LOST_DEVICE", "0");
    std::env::set_var("FAKE_NVML_LOST_AFTER", "3");
    let out = tempfile::tempdir().unwrap();
    let profiler = Profiler::with_rank_env(fake_nvml::config(out.path()), RankEnv::single());
    let session = profiler.session("lost", &[]).unwrap();
    // Device 0's 2 readings, then device 1's, 6 of them at least.
    fake_nvml::wait_for_gpu_rows(&profiler, 2 + 6);
    let outcome = session.finish().unwrap();
    let payload = payload::decode(&std::fs::read(outcome.spill_file).unwrap()).unwrap();

    let view = GpuSamplesView::new(payload.table(Table::GpuSamples).unwrap()).unwrap();
    let count = |gpu| (0..view.len).filter(|&i| view.gpu[i] == gpu).count();
    // The fake loses device 0 once three utilisation reads are done, so the
    // third reading is cut short: two whole readings are kept.
    assert_eq!(count(0), 2, "the readings before the GPU was lost are kept");
    assert!(count(1) > 5, "the other GPU goes on");

    let events = EventsView::new(payload.table(Table::Events).unwrap()).unwrap();
    let lost: Vec<_> = (0..events.len)
        .filter(|&i| events.name.get(i) == "gpu_lost")
        .collect();
    assert_eq!(lost.len(), 1, "one event, once");
    let detail = events.payload.get(lost[0]).unwrap();
    assert!(detail.contains("GPU-fa4e0000"), "{detail}");
}
