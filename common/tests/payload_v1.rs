//! A payload written by the first format version, kept so that every later
//! build still reads it (or says clearly that it no longer does).

use rankscope_common::payload::{self, GpuSource};
use rankscope_common::table::{StagesView, Table};

#[test]
fn a_version_1_capture_still_decodes() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/payload-v1.rsp"
    ))
    .unwrap();
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 1);
    let payload = payload::decode(&bytes).unwrap();
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
            (Table::Metrics, 2),
            (Table::Events, 1),
            (Table::MemorySnapshots, 0),
            (Table::ModelParameters, 3),
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
