//! A GPU driver call that never returns (a wedged driver) does not hang
//! the session: its periodic flushes and its end build their headers from
//! the GPUs described as the reader opened, and its end leaves the stuck
//! sampler running, detached, and says so. Its own test process, so the
//! fake NVML starts with this configuration.

mod fake_nvml;

use std::time::Duration;

use rankscope::{Profiler, RankEnv};
use rankscope_common::payload;

#[test]
fn a_wedged_gpu_driver_does_not_hang_the_session_end() {
    std::env::set_var("FAKE_NVML_DEVICES", "2");
    std::env::set_var("FAKE_NVML_HANG_AFTER", "3");
    let out = tempfile::tempdir().unwrap();
    let hung = out.path().join("hung");
    std::env::set_var("FAKE_NVML_HANG_MARK", &hung);
    let config = rankscope::Config {
        flush_interval_s: 0.05,
        ..fake_nvml::config(out.path())
    };
    let profiler = Profiler::with_rank_env(config, RankEnv::single());
    let session = profiler.session("wedged", &[]).unwrap();
    // Device 0's fourth reading hangs (the sampler thread with it, so the
    // rows it took may never be counted: the driver's mark is waited for).
    let waited = std::time::Instant::now();
    while !hung.exists() {
        assert!(waited.elapsed() < Duration::from_secs(60), "no hang");
        std::thread::sleep(Duration::from_millis(5));
    }
    {
        let _stage = profiler.stage("after the hang");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Bounded by a minute, so that a hang fails the test instead of
    // stalling the suite.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(session.finish());
    });
    let outcome = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("the session ended though the driver hung")
        .unwrap();
    let payload = payload::decode(&std::fs::read(outcome.spill_file).unwrap()).unwrap();
    assert_eq!(payload.header.gpus.len(), 2, "{:?}", payload.header.gpus);
    // The next session's memory snapshot does not wait for the wedged
    // reader for good either, nor does its end.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let next = profiler.session("after", &[]).unwrap();
        profiler.memory_snapshot("after the hang", Default::default());
        let _ = done.send(next.finish().map(drop).is_ok());
    });
    assert!(finished
        .recv_timeout(Duration::from_secs(60))
        .expect("the next session ended though the driver hung"));
    assert!(
        payload
            .header
            .notices
            .iter()
            .any(|n| n.contains("did not stop within")),
        "{:?}",
        payload.header.notices
    );
}
