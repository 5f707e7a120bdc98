#![allow(dead_code)] // each user takes its share

//! A synthetic job of any size, in the tables the agent records: per rank
//! `step` stages holding inner stages of 29 names, GPU and host readings
//! ([`Shape`]). Rank 7 (where there is one; or the ranks the shape names)
//! is 30 % slower in `stage_07`.
//! The GPUs are labelled simulated.
//! Shared by the aggregation benchmark's generator
//! (`examples/gen_payloads.rs`), the aggregation tests and, for its
//! generator, the wire-size benchmark (`benches/wire_size.rs`).

use std::io::Write;
use std::path::Path;

use rankscope_common::payload::{self, Compression, GpuMeta, GpuSource, Payload, PayloadHeader};
use rankscope_common::spill::{self, SpillName};
use rankscope_common::table::{
    CollectiveRow, CollectivesBuilder, DiffusionStepRow, DiffusionStepsBuilder, EventRow,
    EventsBuilder, GpuSampleRow, GpuSamplesBuilder, HostSampleRow, HostSamplesBuilder, StageRow,
    StagesBuilder, Table, HOST_WINDOW,
};

const INNER_NAMES: u64 = 29;

/// How much one rank records.
#[derive(Clone, Copy)]
pub struct Shape {
    /// `step` stages.
    pub steps: u64,
    /// Stages inside each step.
    pub inner_per_step: u64,
    /// Length of an inner stage: uniform in this range, ns.
    pub inner_ns: (u64, u64),
    /// GPU readings over the session.
    pub gpu_readings: u64,
    /// Host readings over the session.
    pub host_readings: u64,
    /// The ranks 30 % slower in `stage_07`: `first..end`.
    pub slow_ranks: (u32, u32),
    /// A collective call (`all_reduce`, recorded on the host) in the middle
    /// half of every step's last inner stage.
    pub collectives: bool,
}

/// The aggregation benchmark's rank: 2,000 stages in about 4 s, 300 GPU
/// and 150 host readings.
pub const BENCH: Shape = Shape {
    steps: 100,
    inner_per_step: 19,
    inner_ns: (1_000_000, 3_000_000),
    gpu_readings: 300,
    host_readings: 150,
    slow_ranks: (SLOW_RANK, SLOW_RANK + 1),
    collectives: false,
};

/// A rank over about an hour at the default sampling rates (GPU every
/// 0.5 s, host every second): 6,000 steps of 3 inner stages.
pub const HOUR: Shape = Shape {
    steps: 6_000,
    inner_per_step: 3,
    inner_ns: (100_000_000, 300_000_000),
    gpu_readings: 7_200,
    host_readings: 3_600,
    slow_ranks: (SLOW_RANK, SLOW_RANK + 1),
    collectives: false,
};
/// The rank that is slower in `stage_07` in the shapes here.
pub const SLOW_RANK: u32 = 7;

/// A small repeatable generator (xorshift64*), so every run writes the same
/// files.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `low..high`.
    pub(crate) fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }
}

/// Writes the spill files of a job of `ranks` ranks of `shape` into `dir`,
/// encoded as the agent encodes them; their stage rows also go to `csv`.
pub fn write_job(
    dir: &Path,
    ranks: u32,
    shape: &Shape,
    csv: &mut impl Write,
) -> Result<(), Box<dyn std::error::Error>> {
    for rank in 0..ranks {
        let payload = rank_payload(rank, ranks, shape, csv)?;
        let name = SpillName {
            rank,
            run_id: None,
            process: u64::from(rank),
        };
        spill::write(dir, &name, &payload::encode(&payload, Compression::Zstd)?)?;
    }
    Ok(())
}

/// One rank's payload; its stage rows also go to `csv` (rank, name,
/// start_ns, end_ns).
pub fn rank_payload(
    rank: u32,
    world: u32,
    shape: &Shape,
    csv: &mut impl Write,
) -> Result<Payload, Box<dyn std::error::Error>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (u64::from(rank) + 1).wrapping_mul(0x1000_0001));
    let names: Vec<String> = (0..INNER_NAMES).map(|i| format!("stage_{i:02}")).collect();
    let mut stages = StagesBuilder::default();
    let mut steps = DiffusionStepsBuilder::default();
    let mut events = EventsBuilder::default();
    let mut collectives = CollectivesBuilder::default();
    let mut now = 0u64;
    let mut id = 0u64;
    for step in 0..shape.steps {
        let step_id = id;
        let step_start = now;
        id += 1;
        if step % 10 == 0 {
            events.append(&EventRow {
                ts_ns: now,
                name: "checkpoint".into(),
                payload: Some(format!("{{\"step\":{step}}}")),
            });
        }
        let mut inner = Vec::new();
        for k in 0..shape.inner_per_step {
            let which = (step + k) % INNER_NAMES;
            let mut ns = rng.between(shape.inner_ns.0, shape.inner_ns.1);
            if (shape.slow_ranks.0..shape.slow_ranks.1).contains(&rank) && which == 7 {
                ns = ns * 13 / 10;
            }
            inner.push((which, now, now + ns));
            now += ns + 20_000;
        }
        now += 500_000;
        if let (true, Some(&(_, start, end))) = (shape.collectives, inner.last()) {
            let quarter = (end - start) / 4;
            collectives.append(&CollectiveRow {
                window: HOST_WINDOW,
                kind: "all_reduce".into(),
                group: Some("0".into()),
                bytes: Some(1 << 20),
                start_ns: start + quarter,
                dur_ns: 2 * quarter,
            });
        }
        let mut row = |name: &str, stage_id, parent_id, depth, start_ns, end_ns| {
            stages.append(&StageRow {
                name: name.into(),
                thread: 0,
                thread_name: "main".into(),
                stage_id,
                parent_id,
                depth,
                start_ns,
                end_ns,
                call_index: step as u32,
                metadata: None,
            });
            writeln!(csv, "{rank},{name},{start_ns},{end_ns}")
        };
        row("step", step_id, None, 0, step_start, now)?;
        for (which, start, end) in inner {
            row(&names[which as usize], id, Some(step_id), 1, start, end)?;
            id += 1;
        }
    }
    let duration_ns = now;
    for step in 0..shape.steps {
        steps.append(&DiffusionStepRow {
            ts_ns: duration_ns * step / shape.steps,
            step,
            timestep: (shape.steps - step) as f64,
            block_size: 16,
            computation_ms: (duration_ns / shape.steps) as f64 / 1e6,
            guidance_scale: Some(5.0),
        });
    }

    let mut gpu = GpuSamplesBuilder::default();
    for i in 0..shape.gpu_readings {
        gpu.append(&GpuSampleRow {
            ts_ns: duration_ns * i / shape.gpu_readings,
            gpu: 0,
            memory_used_bytes: Some(rng.between(30, 60) << 30),
            memory_total_bytes: Some(80 << 30),
            memory_reserved_bytes: None,
            util_gpu_pct: Some(rng.between(80, 99) as f64),
            util_mem_pct: Some(rng.between(40, 70) as f64),
            temperature_c: Some(rng.between(60, 70) as f64),
            power_w: Some(rng.between(400, 600) as f64),
            power_limit_w: Some(700.0),
            sm_clock_mhz: Some(1_980),
            mem_clock_mhz: Some(2_619),
            throttle_reasons: Some(0),
            pcie_tx_kbps: None,
            pcie_rx_kbps: None,
        });
    }
    let mut host = HostSamplesBuilder::default();
    for i in 0..shape.host_readings {
        host.append(&HostSampleRow {
            ts_ns: duration_ns * i / shape.host_readings,
            cpu_pct: Some(rng.between(10, 40) as f64),
            memory_used_bytes: 64 << 30,
            memory_total_bytes: 512 << 30,
            load_1: Some(4.0),
            load_5: Some(4.0),
            load_15: Some(4.0),
            process_rss_bytes: Some(8 << 30),
        });
    }

    let mut header = PayloadHeader::new("aggregate-bench", "aggregate-bench", rank, world);
    header.rank.host = format!("node-{:03}", rank / 8);
    header.rank.local_rank = rank % 8;
    header.clock.duration_ns = duration_ns;
    header.gpu_source = GpuSource::Simulated;
    header.gpus.push(GpuMeta {
        index: rank % 8,
        uuid: format!("SIMULATED-GPU-rank{rank}"),
        name: "Simulated GPU (not real hardware)".into(),
        pci_bus_id: "simulated".into(),
        memory_total_bytes: Some(80 << 30),
        max_sm_clock_mhz: Some(1_980),
        max_mem_clock_mhz: Some(2_619),
    });
    let mut payload = Payload {
        header,
        tables: Default::default(),
    };
    payload.tables.insert(Table::Stages, stages.finish()?);
    payload.tables.insert(Table::GpuSamples, gpu.finish()?);
    payload.tables.insert(Table::HostSamples, host.finish()?);
    payload
        .tables
        .insert(Table::DiffusionSteps, steps.finish()?);
    payload.tables.insert(Table::Events, events.finish()?);
    if shape.collectives {
        payload
            .tables
            .insert(Table::Collectives, collectives.finish()?);
    }
    Ok(payload)
}
