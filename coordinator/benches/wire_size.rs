//! Bytes on the wire per row, in the payload format this build writes
//! (version 3: timestamps and stage ids as differences) against version 2
//! (every column as values), on the same rows in the same run: GPU readings
//! as NVML gives them (integer percent and degrees, milliwatt power, memory
//! in MiB steps that moves, clocks that step between a few values) and
//! stages of a diffusion loop.
//!
//! `cargo bench -p rankscope-coordinator --bench wire_size`. Results go to
//! BENCHMARKS.md.

use std::collections::BTreeMap;

use rankscope_common::payload::{self, Compression, Limits, Payload, PayloadHeader};
use rankscope_common::table::{GpuSampleRow, GpuSamplesBuilder, StageRow, StagesBuilder, Table};

// The synthetic job's generator: the same rows every run.
#[path = "../tests/support/synthetic.rs"]
mod synthetic;
use synthetic::Rng;

/// Uniform in `0..n`.
fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.between(0, n)
}

/// About normal, mean 0 and deviation `sd` (a sum of uniforms).
fn noise(rng: &mut Rng, sd: f64) -> f64 {
    let sum: f64 = (0..12)
        .map(|_| below(rng, 1 << 20) as f64 / f64::from(1 << 20))
        .sum();
    (sum - 6.0) * sd
}

const MIB: u64 = 1 << 20;

/// `readings` rounds of 8 GPUs read every 0.5 s, each GPU 150 µs after the
/// one before.
fn gpu_readings(readings: u64, rng: &mut Rng) -> GpuSamplesBuilder {
    let mut builder = GpuSamplesBuilder::default();
    let mut memory_mib = [40_000u64; 8];
    let mut temperature = [60.0f64; 8];
    for round in 0..readings {
        let at = 5_000_000 + round * 500_000_000 + below(rng, 200_000);
        for gpu in 0..8u32 {
            let g = gpu as usize;
            memory_mib[g] = match below(rng, 12) {
                0 => memory_mib[g] + 64,
                1 => memory_mib[g].saturating_sub(64),
                2 => memory_mib[g] + 2,
                3 => memory_mib[g].saturating_sub(2),
                _ => memory_mib[g],
            };
            temperature[g] = (temperature[g]
                + [-1.0, 0.0, 0.0, 0.0, 0.0, 1.0][below(rng, 6) as usize] * 0.2)
                .clamp(40.0, 90.0);
            let percent = |rng: &mut Rng, mean: f64, sd: f64| {
                (mean + noise(rng, sd)).clamp(0.0, 100.0).round()
            };
            let power_mw = (300_000.0 + noise(rng, 40_000.0)) as u32;
            builder.append(&GpuSampleRow {
                ts_ns: at + u64::from(gpu) * 150_000,
                gpu,
                memory_used_bytes: Some(memory_mib[g] * MIB),
                memory_total_bytes: Some(81_559 * MIB),
                memory_reserved_bytes: Some(527 * MIB),
                util_gpu_pct: Some(percent(rng, 90.0, 6.0)),
                util_mem_pct: Some(percent(rng, 45.0, 8.0)),
                temperature_c: Some(temperature[g].round()),
                power_w: Some(f64::from(power_mw) / 1e3),
                power_limit_w: Some(700.0),
                sm_clock_mhz: Some([1980, 1980, 1980, 1965, 1950, 1755][below(rng, 6) as usize]),
                mem_clock_mhz: Some(2619),
                throttle_reasons: Some([0, 0, 0, 0, 4, 1][below(rng, 6) as usize]),
                pcie_tx_kbps: None,
                pcie_rx_kbps: None,
            });
        }
    }
    builder
}

/// `steps` denoising steps of 10 stages each (the step and nine inside
/// it) of a few milliseconds.
fn stages(steps: u64, rng: &mut Rng) -> StagesBuilder {
    let mut builder = StagesBuilder::default();
    let mut now = 1_000_000u64;
    let mut id = 0u64;
    for step in 0..steps {
        let step_id = id;
        let step_start = now;
        let mut inner = Vec::new();
        for (i, name) in [
            "attn", "mlp", "norm", "attn_out", "ffn", "rope", "qkv", "proj", "gate",
        ]
        .into_iter()
        .enumerate()
        {
            id += 1;
            let start = now + below(rng, 20_000);
            now = start + 1_000_000 + below(rng, 3_000_000);
            inner.push((name, id, start, now, i));
        }
        // Rows as pairing writes them: inner stages as they end, the step last.
        for (name, stage_id, start_ns, end_ns, _) in inner {
            builder.append(&StageRow {
                name: name.into(),
                thread: 0,
                thread_name: "main".into(),
                stage_id,
                parent_id: Some(step_id),
                depth: 1,
                start_ns,
                end_ns,
                call_index: step as u32,
                metadata: None,
            });
        }
        now += below(rng, 50_000);
        builder.append(&StageRow {
            name: "step".into(),
            thread: 0,
            thread_name: "main".into(),
            stage_id: step_id,
            parent_id: None,
            depth: 0,
            start_ns: step_start,
            end_ns: now,
            call_index: step as u32,
            metadata: None,
        });
        id += 1;
    }
    builder
}

/// Bytes of a payload of `batch` alone (header and framing included) in
/// format `version`.
fn bytes(version: u16, table: Table, batch: &arrow_array::RecordBatch) -> usize {
    let payload = Payload {
        header: PayloadHeader::new("job", "bench", 0, 1),
        tables: BTreeMap::from([(table, batch.clone())]),
    };
    payload::encode_as(version, &payload, Compression::Zstd, &Limits::DEFAULT)
        .unwrap()
        .len()
}

fn main() {
    let mut rng = Rng(0x5eed);
    let readings = 3_600;
    let gpu = gpu_readings(readings, &mut rng).finish().unwrap();
    let steps = 10_000;
    let stage_rows = stages(steps, &mut rng).finish().unwrap();
    println!(
        "{:<52} {:>10} {:>10}",
        "rows (zstd)", "version 2", "version 3"
    );
    for (what, table, batch) in [
        (
            "GPU readings: 8 GPUs x 3,600 rounds, bytes/reading",
            Table::GpuSamples,
            &gpu,
        ),
        (
            "stages: 10,000 steps x 10 stages, bytes/stage",
            Table::Stages,
            &stage_rows,
        ),
    ] {
        let rows = batch.num_rows() as f64;
        println!(
            "{what:<52} {:>10.2} {:>10.2}",
            bytes(2, table, batch) as f64 / rows,
            bytes(payload::FORMAT_VERSION, table, batch) as f64 / rows
        );
    }
}
