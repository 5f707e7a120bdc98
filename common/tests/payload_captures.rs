//! Payloads written by each format version (rank 2 of `rankscope demo`,
//! captured from the build of their time), kept so that every later build
//! still reads them (or says clearly that it no longer does).

use rankscope_common::payload::{self, GpuSource, Payload, TransportName};
use rankscope_common::table::{StagesView, Table};

/// The capture `name`, checked to be of format `version`, decoded.
fn capture(name: &str, version: u16) -> Payload {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), version);
    payload::decode(&bytes).unwrap()
}

/// What every capture of the demo's rank 2 holds; `metrics` rows differ by
/// the agent that wrote them (the builds since version 2 add the
/// profiler's own cost).
fn check_demo_rank_2(payload: &Payload, metrics: usize) {
    let h = &payload.header;
    assert_eq!(h.session.name, "t2v-demo");
    assert_eq!((h.rank.rank, h.rank.world_size), (2, 4));
    assert_eq!(h.gpu_source, GpuSource::Simulated);
    assert_eq!(h.gpus[0].uuid, "SIMULATED-GPU-rank2");
    assert!(h.sampler.gpu_readings > 0);
    let rows: Vec<(Table, usize)> = Table::ALL.iter().map(|&t| (t, payload.rows(t))).collect();
    assert_eq!(
        rows,
        vec![
            (Table::Stages, 18),
            (Table::GpuSamples, payload.rows(Table::GpuSamples)),
            (Table::HostSamples, payload.rows(Table::HostSamples)),
            (Table::DiffusionSteps, 12),
            (Table::Blocks, 3),
            (Table::Metrics, metrics),
            (Table::Events, 1),
            (Table::MemorySnapshots, 0),
            (Table::ModelParameters, 3),
            // Tables of later builds: none in an old capture.
            (Table::Kernels, 0),
            (Table::Collectives, 0),
            (Table::CpuOps, 0),
            (Table::CpuSpans, 0),
            (Table::PythonFunctions, 0),
            (Table::PythonCalls, 0),
        ]
    );
    assert!(payload.rows(Table::GpuSamples) > 10 && payload.rows(Table::HostSamples) > 2);
    let stages = StagesView::new(payload.table(Table::Stages).unwrap()).unwrap();
    let vae = (0..stages.len)
        .find(|&i| stages.name.get(i) == "vae_decode")
        .unwrap();
    // Rank 2 was the demo's straggler: its decode took ~140 ms.
    let ms = (stages.end_ns[vae] - stages.start_ns[vae]) as f64 / 1e6;
    assert!((130.0..200.0).contains(&ms), "{ms}");
}

#[test]
fn a_version_1_capture_still_decodes() {
    check_demo_rank_2(&capture("payload-v1.rsp", 1), 2);
}

#[test]
fn a_version_2_capture_still_decodes() {
    let payload = capture("payload-v2.rsp", 2);
    assert_eq!(
        payload.header.transport,
        TransportName::Tcp,
        "a field new in version 2"
    );
    assert!(!payload.header.agent_version.is_empty());
    check_demo_rank_2(&payload, 5);
}

#[test]
fn a_version_3_capture_decodes() {
    let payload = capture("payload-v3.rsp", 3);
    assert!(
        payload.header.encode_ns.is_some(),
        "a field new in version 3"
    );
    check_demo_rank_2(&payload, 5);
}
