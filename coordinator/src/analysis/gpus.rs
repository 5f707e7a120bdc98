//! GPUs and hosts over the session: per physical GPU (counted once even
//! when several ranks sample it) memory peak, utilisation, temperature,
//! power, energy, clocks and throttling, and the bottlenecks these show;
//! per rank the host's load.

use std::collections::BTreeMap;

use rankscope_common::payload::GpuMeta;
use rankscope_common::table::{GpuSamplesView, HostSamplesView};
use rankscope_common::{Payload, PayloadHeader};

use super::bottlenecks::{self, BottleneckRule, ReadingCounts, POWER_REASONS, THERMAL_REASONS};
use super::series;
use super::times::OuterStage;
use crate::model::{GpuSeries, GpuSummary, HostSummary};

/// Bytes in a MB (MiB), as the report counts memory.
pub const MB: f64 = (1u64 << 20) as f64;

/// A GPU metric followed over time: its label (name and unit), and its
/// value in a reading row.
pub struct GpuMetric {
    /// Name and unit, as the charts and the trace label it.
    pub label: &'static str,
    /// The value of reading row `i`, where there is one.
    pub value: fn(&GpuSamplesView<'_>, usize) -> Option<f64>,
}

/// The metrics followed over time, in the order of
/// [`GpuSeries::metrics_mut`] (and of the names [`rank_gpus`] gives their
/// readings).
pub const GPU_METRICS: [GpuMetric; 5] = [
    GpuMetric {
        label: "utilisation %",
        value: |v, i| v.util_gpu_pct.get(i),
    },
    GpuMetric {
        label: "memory MB",
        value: |v, i| v.memory_used_bytes.get(i).map(|b| b as f64 / MB),
    },
    GpuMetric {
        label: "temperature °C",
        value: |v, i| v.temperature_c.get(i),
    },
    GpuMetric {
        label: "power W",
        value: |v, i| v.power_w.get(i),
    },
    GpuMetric {
        label: "SM clock MHz",
        value: |v, i| v.sm_clock_mhz.get(i).map(f64::from),
    },
];

/// The reading rows of each of the `gpus` GPUs of a rank's header, in one
/// pass; a row naming no GPU of the header is left out.
pub fn rows_by_gpu(v: &GpuSamplesView<'_>, gpus: usize) -> Vec<Vec<usize>> {
    let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); gpus];
    for i in 0..v.len {
        if let Some(rows) = rows_of.get_mut(v.gpu[i] as usize) {
            rows.push(i);
        }
    }
    rows_of
}
/// NVML's "GPU idle" throttle reason: not a slowdown.
const IDLE_REASON: u64 = 0x1;

/// Energy in joules from power readings at `ts_ns`: Σ over consecutive
/// readings of the mean of their powers times the real time between them
/// (the trapezoid rule). Intervals with a missing reading at either end are
/// left out; `None` when no interval has both.
pub fn energy_joules(ts_ns: &[u64], power_w: &[Option<f64>]) -> Option<f64> {
    let mut energy = None;
    for i in 1..ts_ns.len().min(power_w.len()) {
        if let (Some(a), Some(b)) = (power_w[i - 1], power_w[i]) {
            let dt = ts_ns[i].saturating_sub(ts_ns[i - 1]) as f64 / 1e9;
            *energy.get_or_insert(0.0) += (a + b) / 2.0 * dt;
        }
    }
    energy
}

/// One summary per physical GPU, by host and UUID, with its bottlenecks,
/// and its readings over time: the [`rank_gpus`] of every rank, by rank,
/// merged. A GPU several ranks sampled counts once, with the readings of the
/// lowest of them.
pub fn gpu_summaries(
    ranks: impl IntoIterator<Item = Vec<(GpuSummary, GpuSeries)>>,
    rule: &BottleneckRule,
) -> (Vec<GpuSummary>, Vec<GpuSeries>) {
    let mut by_device: BTreeMap<(String, String), (GpuSummary, GpuSeries)> = BTreeMap::new();
    for (summary, series) in ranks.into_iter().flatten() {
        let key = (summary.host.clone(), summary.uuid.clone());
        match by_device.get_mut(&key) {
            Some((first, _)) => first.sampled_by.push(summary.rank),
            None => {
                by_device.insert(key, (summary, series));
            }
        }
    }
    let mut gpus: Vec<(GpuSummary, GpuSeries)> = by_device.into_values().collect();
    gpus.sort_by_key(|(g, _)| (g.rank, g.index));
    let (mut gpus, series): (Vec<GpuSummary>, Vec<GpuSeries>) = gpus.into_iter().unzip();
    bottlenecks::add_outliers(&mut gpus, rule);
    (gpus, series)
}

/// The GPUs one rank sampled, each summarised from its readings with the
/// bottlenecks they show on their own (outliers need the other GPUs: see
/// [`gpu_summaries`]), and its readings over time, at most `points` per
/// metric. `busy_spans` are the times some stage of the rank ran, sorted
/// and disjoint.
pub fn rank_gpus(
    payload: &Payload,
    busy_spans: &[(u64, u64)],
    rule: &BottleneckRule,
    points: usize,
) -> Vec<(GpuSummary, GpuSeries)> {
    let header = &payload.header;
    let view = payload.view::<GpuSamplesView>().ok().flatten();
    let rows_of = match &view {
        Some(v) => rows_by_gpu(v, header.gpus.len()),
        None => vec![Vec::new(); header.gpus.len()],
    };
    header
        .gpus
        .iter()
        .zip(rows_of)
        .map(|(meta, rows)| {
            let mut summary = header_summary(header, meta, rows.len() as u64);
            let mut series = GpuSeries {
                rank: header.rank.rank,
                index: meta.index,
                ..GpuSeries::default()
            };
            if let Some(v) = &view {
                // Each metric's readings, taken once: the summary and the
                // series both read them.
                let readings = GPU_METRICS.map(|metric| -> Vec<Option<f64>> {
                    rows.iter().map(|&i| finite((metric.value)(v, i))).collect()
                });
                let ts: Vec<u64> = rows.iter().map(|&i| v.ts_ns[i]).collect();
                summarise_readings(&mut summary, v, &rows, &ts, &readings, busy_spans, rule);
                let t: Vec<f64> = ts.iter().map(|&ns| ns as f64 / 1e9).collect();
                for (values, timed) in readings.iter().zip(series.metrics_mut()) {
                    *timed = series::readings(&t, values, points);
                }
            }
            (summary, series)
        })
        .collect()
}

/// A GPU's summary from what the rank's `header` says of it (`meta`),
/// before its `samples` readings are read.
fn header_summary(header: &PayloadHeader, meta: &GpuMeta, samples: u64) -> GpuSummary {
    GpuSummary {
        rank: header.rank.rank,
        sampled_by: vec![header.rank.rank],
        host: header.rank.host.clone(),
        index: meta.index,
        uuid: meta.uuid.clone(),
        name: meta.name.clone(),
        source: header.gpu_source,
        samples,
        memory_total_mb: meta.memory_total_bytes.map(|b| b as f64 / MB),
        memory_peak_mb: None,
        util_avg: None,
        temp_max_c: None,
        power_avg_w: None,
        energy_j: None,
        sm_clock_avg_mhz: None,
        sm_clock_max_mhz: meta.max_sm_clock_mhz,
        throttled_pct: None,
        bottlenecks: Vec::new(),
    }
}

/// Fills `summary` in from one GPU's readings (`rows` of `v`, taken at
/// `ts`; `readings` per metric of [`GPU_METRICS`]), with the bottlenecks
/// they show.
fn summarise_readings(
    summary: &mut GpuSummary,
    v: &GpuSamplesView<'_>,
    rows: &[usize],
    ts: &[u64],
    readings: &[Vec<Option<f64>>; 5],
    busy_spans: &[(u64, u64)],
    rule: &BottleneckRule,
) {
    let [util, memory_mb, temperature, power, sm_clock] = readings;
    fn all(values: &[Option<f64>]) -> impl Iterator<Item = f64> + '_ {
        values.iter().flatten().copied()
    }
    summary.memory_peak_mb = max(all(memory_mb));
    summary.memory_total_mb = summary.memory_total_mb.or_else(|| {
        max(rows
            .iter()
            .filter_map(|&i| v.memory_total_bytes.get(i))
            .map(|b| b as f64 / MB))
    });
    summary.util_avg = mean(all(util));
    summary.temp_max_c = max(all(temperature));
    summary.power_avg_w = mean(all(power));
    summary.energy_j = energy_joules(ts, power);
    summary.sm_clock_avg_mhz = mean(all(sm_clock));
    let counts = reading_counts(v, rows, busy_spans, rule);
    summary.throttled_pct = bottlenecks::share(counts.throttled, counts.with_reasons);
    summary.bottlenecks = bottlenecks::own_bottlenecks(summary, &counts, rule);
}

/// What the bottleneck rules need from one GPU's readings (`rows` of `v`).
fn reading_counts(
    v: &GpuSamplesView<'_>,
    rows: &[usize],
    busy_spans: &[(u64, u64)],
    rule: &BottleneckRule,
) -> ReadingCounts {
    let mut counts = ReadingCounts::default();
    let mut busy_clock = Vec::new();
    let mut util_in_stages = Vec::new();
    for &i in rows {
        let reasons = v.throttle_reasons.get(i);
        if let Some(r) = reasons {
            counts.with_reasons += 1;
            counts.throttled += u64::from(r & !IDLE_REASON != 0);
            counts.thermal += u64::from(r & THERMAL_REASONS != 0);
        }
        let near_limit = match (finite(v.power_w.get(i)), finite(v.power_limit_w.get(i))) {
            (Some(draw), Some(limit)) if limit > 0.0 => {
                Some(draw >= limit * rule.power_draw_pct / 100.0)
            }
            _ => None,
        };
        if reasons.is_some() || near_limit.is_some() {
            counts.with_power += 1;
            let capped =
                reasons.is_some_and(|r| r & POWER_REASONS != 0) || near_limit == Some(true);
            counts.capped += u64::from(capped);
        }
        if let Some(util) = finite(v.util_gpu_pct.get(i)) {
            if util >= rule.busy_util_pct {
                busy_clock.extend(v.sm_clock_mhz.get(i).map(f64::from));
            }
            if within(busy_spans, v.ts_ns[i]) {
                util_in_stages.push(util);
            }
        }
    }
    counts.busy_sm_clock_mhz = mean(busy_clock.into_iter());
    counts.util_in_stages = mean(util_in_stages.into_iter());
    counts
}

/// The times some of `stages` ran: their spans, sorted and merged where
/// they overlap.
pub fn busy_spans(stages: &[OuterStage<'_>]) -> Vec<(u64, u64)> {
    super::intervals::merge(
        stages
            .iter()
            .map(|&(start, end, _)| (start, end))
            .filter(|(start, end)| start < end),
    )
}

/// Whether `ts` falls in one of the sorted, disjoint `spans`.
fn within(spans: &[(u64, u64)], ts: u64) -> bool {
    let after = spans.partition_point(|&(start, _)| start <= ts);
    after > 0 && ts <= spans[after - 1].1
}

/// The host summary of one rank, from its host readings.
pub fn host_summary(payload: &Payload) -> Option<HostSummary> {
    let view: HostSamplesView = payload.view().ok().flatten()?;
    let cpu = || (0..view.len).filter_map(|i| view.cpu_pct.get(i));
    Some(HostSummary {
        samples: view.len as u64,
        cpu_avg_pct: mean(cpu()),
        cpu_peak_pct: max(cpu()),
        memory_peak_mb: view.memory_used_bytes.iter().copied().max().unwrap_or(0) as f64 / MB,
        memory_total_mb: view.memory_total_bytes.iter().copied().max().unwrap_or(0) as f64 / MB,
        load_1_max: max((0..view.len).filter_map(|i| view.load_1.get(i))),
        process_rss_peak_mb: max((0..view.len)
            .filter_map(|i| view.process_rss_bytes.get(i))
            .map(|b| b as f64 / MB)),
    })
}

/// The mean of the finite `values` (a crafted payload can hold NaN or
/// infinities); `None` when there are none.
fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .filter(|v| v.is_finite())
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The largest of the finite `values`.
fn max(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.filter(|v| v.is_finite()).reduce(f64::max)
}

/// A reading only when it is a number.
fn finite(value: Option<f64>) -> Option<f64> {
    value.filter(|v| v.is_finite())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use rankscope_common::payload::{GpuMeta, GpuSource, PayloadHeader};
    use rankscope_common::table::{
        GpuSampleRow, GpuSamplesBuilder, StageRow, StagesBuilder, StagesView, Table,
    };

    use crate::analysis::times::RankStages;
    use crate::model::BottleneckKind;

    /// A rank on `host` that sampled one GPU, `uuid`, twice: 100 W then 300 W, 2 s apart.
    fn rank_with_gpu(rank: u32, host: &str, uuid: &str) -> Payload {
        let mut header = PayloadHeader::new("s", "n", rank, 3);
        header.rank.host = host.into();
        header.gpu_source = GpuSource::Nvml;
        header.gpus.push(GpuMeta {
            index: 0,
            uuid: uuid.into(),
            name: "GPU".into(),
            pci_bus_id: "00000000:10:00.0".into(),
            memory_total_bytes: Some(1 << 30),
            max_sm_clock_mhz: Some(1980),
            max_mem_clock_mhz: None,
        });
        let mut rows = GpuSamplesBuilder::default();
        for (ts_ns, power, reasons) in [(0, 100.0, 0x1), (2_000_000_000, 300.0, 0x40)] {
            rows.append(&GpuSampleRow {
                ts_ns,
                gpu: 0,
                memory_used_bytes: Some(256 << 20),
                memory_total_bytes: Some(1 << 30),
                memory_reserved_bytes: None,
                util_gpu_pct: Some(50.0),
                util_mem_pct: None,
                temperature_c: Some(70.0),
                power_w: Some(power),
                power_limit_w: Some(400.0),
                sm_clock_mhz: Some(1500),
                mem_clock_mhz: None,
                throttle_reasons: Some(reasons),
                pcie_tx_kbps: None,
                pcie_rx_kbps: None,
            });
        }
        let mut payload = Payload {
            header,
            tables: Default::default(),
        };
        payload
            .tables
            .insert(Table::GpuSamples, rows.finish().unwrap());
        payload
    }

    #[test]
    fn a_gpu_sampled_by_several_ranks_counts_once() {
        let payloads = [
            rank_with_gpu(0, "node-a", "GPU-1"),
            rank_with_gpu(1, "node-a", "GPU-1"),
            rank_with_gpu(2, "node-b", "GPU-1"),
        ];
        let gpus = summaries(&payloads, &BottleneckRule::default());
        assert_eq!(gpus.len(), 2, "same UUID on another host is another GPU");
        assert_eq!((gpus[0].rank, gpus[0].sampled_by.clone()), (0, vec![0, 1]));
        let g = &gpus[0];
        assert_eq!(g.samples, 2, "one rank's readings, not both");
        assert_eq!(g.energy_j, Some(400.0), "(100 + 300) / 2 W over 2 s");
        assert_eq!(g.power_avg_w, Some(200.0));
        assert_eq!(
            (g.memory_peak_mb, g.memory_total_mb),
            (Some(256.0), Some(1024.0))
        );
        assert_eq!(g.throttled_pct, Some(50.0), "idle is not throttling");
        assert_eq!(g.source, GpuSource::Nvml);
    }

    /// A healthy reading, 1 s into the session: busy, cool, full clock,
    /// half the memory, well under the power limit.
    fn healthy(ts_s: u64) -> GpuSampleRow {
        GpuSampleRow {
            ts_ns: ts_s * 1_000_000_000,
            gpu: 0,
            memory_used_bytes: Some(512 << 20),
            memory_total_bytes: Some(1 << 30),
            memory_reserved_bytes: None,
            util_gpu_pct: Some(90.0),
            util_mem_pct: None,
            temperature_c: Some(65.0),
            power_w: Some(300.0),
            power_limit_w: Some(400.0),
            sm_clock_mhz: Some(1980),
            mem_clock_mhz: None,
            throttle_reasons: Some(0),
            pcie_tx_kbps: None,
            pcie_rx_kbps: None,
        }
    }

    /// Rank `rank` with one GPU of its own, `readings` of it (readings 0..n
    /// at 0..n s, each shaped by `shape`), and one stage over 0..n s.
    pub(in crate::analysis) fn rank_reading(
        rank: u32,
        n: u64,
        shape: impl Fn(u64, &mut GpuSampleRow),
    ) -> Payload {
        let mut payload = rank_with_gpu(rank, "node", &format!("GPU-{rank}"));
        payload.header.gpus[0].index = rank;
        let mut rows = GpuSamplesBuilder::default();
        for i in 0..n {
            let mut row = healthy(i);
            shape(i, &mut row);
            rows.append(&row);
        }
        payload
            .tables
            .insert(Table::GpuSamples, rows.finish().unwrap());
        set_one_stage(&mut payload, "denoise", n * 1_000_000_000);
        payload
    }

    /// Replaces the stages of `payload` with one: `name`, from 0 to `end_ns`.
    fn set_one_stage(payload: &mut Payload, name: &str, end_ns: u64) {
        let mut stages = StagesBuilder::default();
        stages.append(&StageRow {
            name: name.into(),
            thread: 0,
            thread_name: "main".into(),
            stage_id: 0,
            parent_id: None,
            depth: 0,
            start_ns: 0,
            end_ns,
            call_index: 0,
            metadata: None,
        });
        payload
            .tables
            .insert(Table::Stages, stages.finish().unwrap());
    }

    fn kinds(gpu: &GpuSummary) -> Vec<BottleneckKind> {
        gpu.bottlenecks.iter().map(|b| b.kind).collect()
    }

    /// The GPU summaries of `payloads`, one per rank.
    fn summaries(payloads: &[Payload], rule: &BottleneckRule) -> Vec<GpuSummary> {
        let spans_of = |p: &Payload| match p.view::<StagesView>().unwrap() {
            Some(stages) => busy_spans(
                &RankStages::new(
                    &stages,
                    crate::analysis::times::Reading::of_table(0, &Default::default()),
                )
                .1,
            ),
            None => Vec::new(),
        };
        let ranks = payloads
            .iter()
            .map(|p| rank_gpus(p, &spans_of(p), rule, 100));
        gpu_summaries(ranks, rule).0
    }

    fn summarise(payloads: &[Payload]) -> Vec<GpuSummary> {
        summaries(payloads, &BottleneckRule::default())
    }

    #[test]
    fn healthy_gpus_have_no_bottleneck() {
        // Eight GPUs that differ as real ones do: 62–69 °C, 86–93 %
        // utilisation, clocks 1935–1980 MHz, memory 400–700 MB; GPU 3 is
        // the coolest, busiest and fastest, which holds nothing back.
        let payloads: Vec<Payload> = (0..8u32)
            .map(|r| {
                rank_reading(r, 20, move |i, row| {
                    let jitter = f64::from((r * 7 + i as u32 * 3) % 8);
                    row.temperature_c = Some(if r == 3 { 55.0 } else { 62.0 + jitter });
                    row.util_gpu_pct = Some(if r == 3 { 99.0 } else { 86.0 + jitter });
                    row.sm_clock_mhz = Some(1935 + ((r * 13 + i as u32) % 4) * 15);
                    row.memory_used_bytes = Some((400 + u64::from(r) * 40) << 20);
                })
            })
            .collect();
        let gpus = summarise(&payloads);
        assert_eq!(gpus.len(), 8);
        for gpu in &gpus {
            assert_eq!(gpu.bottlenecks, [], "GPU {}", gpu.index);
        }
    }

    #[test]
    fn readings_that_are_no_numbers_are_left_out() {
        // A crafted payload: NaN and infinite readings fire nothing and do
        // not poison the means.
        let payload = rank_reading(0, 10, |i, row| {
            if i < 5 {
                row.temperature_c = Some(f64::INFINITY);
                row.util_gpu_pct = Some(f64::NEG_INFINITY);
                row.power_w = Some(f64::NAN);
            }
        });
        let gpu = &summarise(&[payload])[0];
        assert_eq!(gpu.bottlenecks, []);
        assert_eq!((gpu.temp_max_c, gpu.util_avg), (Some(65.0), Some(90.0)));
        assert_eq!(gpu.power_avg_w, Some(300.0));
    }

    #[test]
    fn thresholds_at_their_limits_do_not_call_a_healthy_gpu_throttled() {
        let rule = BottleneckRule {
            thermal_readings_pct: 0.0,
            power_readings_pct: 0.0,
            clock_pct: 100.0,
            ..BottleneckRule::default()
        };
        let gpus = summaries(&[rank_reading(0, 10, |_, _| {})], &rule);
        assert_eq!(gpus[0].bottlenecks, []);
    }

    #[test]
    fn a_thermally_throttled_gpu_is_named_with_its_numbers() {
        // 3 readings of 10 with thermal bits (30 %), 81 °C at most, and the
        // SM clock at 1386 MHz (70 % of 1980) in them.
        let payload = rank_reading(0, 10, |i, row| {
            if i < 3 {
                row.throttle_reasons = Some(THERMAL_REASONS);
                row.temperature_c = Some(81.0);
                row.sm_clock_mhz = Some(1386);
            }
        });
        let gpu = &summarise(&[payload])[0];
        assert_eq!(kinds(gpu), [BottleneckKind::ThermalThrottling]);
        assert_eq!(
            gpu.bottlenecks[0].evidence,
            "thermally throttled in 30% of 10 readings, 81 °C at most"
        );
    }

    #[test]
    fn heat_alone_and_a_clock_drop_under_load_are_found() {
        // Never a thermal bit, but 86 °C; every busy reading at 1500 MHz.
        let payload = rank_reading(0, 10, |i, row| {
            row.temperature_c = Some(if i == 5 { 86.0 } else { 70.0 });
            row.sm_clock_mhz = Some(1500);
        });
        let gpu = &summarise(&[payload])[0];
        assert_eq!(
            kinds(gpu),
            [
                BottleneckKind::ThermalThrottling,
                BottleneckKind::ClockThrottled
            ]
        );
        assert_eq!(gpu.bottlenecks[0].evidence, "86 °C at most");
        assert_eq!(
            gpu.bottlenecks[1].evidence,
            "SM clock 1500 of 1980 MHz under load (24% below max)"
        );
    }

    #[test]
    fn a_low_clock_while_idle_is_no_clock_bottleneck() {
        // The clock drops only in readings at 10 % utilisation, outside any
        // stage: a GPU resting, not one held back.
        let mut payload = rank_reading(0, 10, |i, row| {
            if i >= 5 {
                row.util_gpu_pct = Some(10.0);
                row.sm_clock_mhz = Some(300);
            }
        });
        payload.tables.remove(&Table::Stages);
        let gpu = &summarise(&[payload])[0];
        assert_eq!(gpu.bottlenecks, []);
    }

    #[test]
    fn memory_pressure_fires_at_90_percent_of_the_total() {
        let at = |mb: u64| {
            let payload = rank_reading(0, 4, move |i, row| {
                if i == 2 {
                    row.memory_used_bytes = Some(mb << 20);
                }
            });
            kinds(&summarise(&[payload])[0])
        };
        assert_eq!(at(922), [BottleneckKind::MemoryPressure], "922 of 1024 MB");
        assert_eq!(at(921), [], "921 of 1024 MB is under 90 %");
    }

    #[test]
    fn a_power_cap_shows_in_reason_bits_or_draw_at_the_limit() {
        // Bits in 2 readings of 10 (20 %): capped.
        let bits = rank_reading(0, 10, |i, row| {
            if i < 2 {
                row.throttle_reasons = Some(0x4);
            }
        });
        // Draw at 390 of 400 W (97.5 %) in 3 readings of 10: capped.
        let draw = rank_reading(1, 10, |i, row| {
            if i < 3 {
                row.power_w = Some(390.0);
            }
        });
        // One reading of 10 with the bit: under the 20 % share.
        let rare = rank_reading(2, 10, |i, row| {
            if i == 0 {
                row.throttle_reasons = Some(0x80);
            }
        });
        let gpus = summarise(&[bits, draw, rare]);
        assert_eq!(kinds(&gpus[0]), [BottleneckKind::PowerCapped]);
        assert_eq!(
            gpus[1].bottlenecks[0].evidence,
            "power-capped (a cap reason, or ≥ 95% of the enforced limit) in 30% of 10 readings"
        );
        assert_eq!(kinds(&gpus[2]), []);
    }

    #[test]
    fn utilisation_counts_only_while_stages_run() {
        // The stage covers readings 0..10 of 20; readings after it idle at
        // 2 %, which is no fault. Inside it: 40 % is underutilised.
        let payload = |util_inside: f64| {
            let mut payload = rank_reading(0, 20, move |i, row| {
                row.util_gpu_pct = Some(if i < 10 { util_inside } else { 2.0 });
            });
            set_one_stage(&mut payload, "step", 9_500_000_000);
            payload
        };
        let busy = &summarise(&[payload(90.0)])[0];
        assert_eq!(busy.bottlenecks, [], "busy inside the stage");
        let low = &summarise(&[payload(40.0)])[0];
        assert_eq!(kinds(low), [BottleneckKind::Underutilized]);
        assert_eq!(
            low.bottlenecks[0].evidence,
            "40% mean utilisation while stages ran"
        );
    }

    #[test]
    fn one_gpu_out_of_line_among_eight_is_an_outlier() {
        // GPU 5 runs at 60 % utilisation where the others run at 88–92 %
        // (over 50 %, so not underutilised; only its peers show it).
        let payloads: Vec<Payload> = (0..8)
            .map(|r| {
                rank_reading(r, 10, move |_, row| {
                    row.util_gpu_pct = Some(if r == 5 {
                        60.0
                    } else {
                        88.0 + f64::from(r % 3) * 2.0
                    });
                })
            })
            .collect();
        let gpus = summarise(&payloads);
        for gpu in &gpus {
            let expected: &[BottleneckKind] = if gpu.index == 5 {
                &[BottleneckKind::Outlier]
            } else {
                &[]
            };
            assert_eq!(kinds(gpu), expected, "GPU {}", gpu.index);
        }
        // Peers at 88, 90, 92, 88, 90, 88, 90: mean 89.4, deviation 1.4.
        assert_eq!(
            gpus[5].bottlenecks[0].evidence,
            "utilisation 60% against 89% ± 1 on its 7 peers"
        );
    }

    #[test]
    fn two_gpus_are_too_few_to_call_either_an_outlier() {
        let payloads = [
            rank_reading(0, 10, |_, row| row.util_gpu_pct = Some(95.0)),
            rank_reading(1, 10, |_, row| row.util_gpu_pct = Some(60.0)),
        ];
        for gpu in summarise(&payloads) {
            assert_eq!(gpu.bottlenecks, []);
        }
    }

    #[test]
    fn many_gpus_and_readings_are_grouped_in_one_pass() {
        // A crafted payload: thousands of GPUs, many readings, and readings
        // of GPUs the header does not list. Each GPU gets exactly its rows.
        const GPUS: u32 = 4_000;
        let mut payload = rank_with_gpu(0, "node", "GPU-0");
        payload.header.gpus = (0..GPUS)
            .map(|i| GpuMeta {
                uuid: format!("GPU-{i}"),
                ..payload.header.gpus[0].clone()
            })
            .collect();
        let template = GpuSamplesView::new(&payload.tables[&Table::GpuSamples]).unwrap();
        let mut rows = GpuSamplesBuilder::default();
        for i in 0..100_000u32 {
            rows.append(&GpuSampleRow {
                ts_ns: u64::from(i),
                gpu: i % (GPUS + 10),
                memory_used_bytes: None,
                memory_total_bytes: None,
                memory_reserved_bytes: None,
                util_gpu_pct: template.util_gpu_pct.get(0),
                util_mem_pct: None,
                temperature_c: None,
                power_w: None,
                power_limit_w: None,
                sm_clock_mhz: None,
                mem_clock_mhz: None,
                throttle_reasons: None,
                pcie_tx_kbps: None,
                pcie_rx_kbps: None,
            });
        }
        payload
            .tables
            .insert(Table::GpuSamples, rows.finish().unwrap());
        let gpus = summaries(&[payload], &BottleneckRule::default());
        assert_eq!(gpus.len(), GPUS as usize);
        let samples: u64 = gpus.iter().map(|g| g.samples).sum();
        // Readings of the 10 GPUs not listed are left out.
        let listed = (0..100_000u32).filter(|i| i % (GPUS + 10) < GPUS).count();
        assert_eq!(samples, listed as u64);
        assert!(gpus.iter().all(|g| g.util_avg == Some(50.0)));
    }

    #[test]
    fn energy_over_uneven_intervals_by_hand() {
        // 0 → 1 s at 100 → 200 W: 150 J; 1 → 1.5 s at 200 → 300 W: 125 J;
        // 1.5 → 4 s with a missing reading: left out; 4 → 6 s at 100 W: 200 J.
        let ts = [
            0,
            1_000_000_000,
            1_500_000_000,
            2_500_000_000,
            4_000_000_000,
            6_000_000_000,
        ];
        let power = [
            Some(100.0),
            Some(200.0),
            Some(300.0),
            None,
            Some(100.0),
            Some(100.0),
        ];
        assert_eq!(energy_joules(&ts, &power), Some(475.0));
        assert_eq!(energy_joules(&ts[..1], &power[..1]), None);
        assert_eq!(energy_joules(&ts[..2], &[None, Some(1.0)]), None);
    }
}
