//! Turns what the threads recorded into the payload's Arrow batches, one
//! builder per table, at session end (never on the hot path).

use std::collections::BTreeMap;

use rankscope_common::table::*;
use rankscope_common::{ArrowError, RecordBatch};

use crate::recorder::ThreadData;

/// One builder per table.
#[derive(Default)]
pub(crate) struct TableBuilders {
    stages: StagesBuilder,
    gpu_samples: GpuSamplesBuilder,
    host_samples: HostSamplesBuilder,
    diffusion_steps: DiffusionStepsBuilder,
    blocks: BlocksBuilder,
    metrics: MetricsBuilder,
    events: EventsBuilder,
    snapshots: MemorySnapshotsBuilder,
    parameters: ModelParametersBuilder,
}

impl TableBuilders {
    /// Appends everything one thread recorded.
    pub(crate) fn append_thread(&mut self, track: u32, thread_name: &str, data: &ThreadData) {
        let names = &data.names;
        for s in &data.stages {
            self.stages.append(&StageRow {
                name: names.name(s.name).to_string(),
                thread: track,
                thread_name: thread_name.to_string(),
                stage_id: s.stage_id,
                parent_id: s.parent_id,
                depth: s.depth,
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                call_index: s.call_index,
                metadata: s.metadata.clone(),
            });
        }
        data.gpu_samples
            .iter()
            .for_each(|row| self.gpu_samples.append(row));
        data.host_samples
            .iter()
            .for_each(|row| self.host_samples.append(row));
        data.diffusion_steps
            .iter()
            .for_each(|row| self.diffusion_steps.append(row));
        data.blocks.iter().for_each(|row| self.blocks.append(row));
        for m in &data.metrics {
            self.metrics.append(&MetricRow {
                ts_ns: m.ts_ns,
                section: names.name(m.section).to_string(),
                name: names.name(m.name).to_string(),
                value: m.value,
            });
        }
        for e in &data.events {
            self.events.append(&EventRow {
                ts_ns: e.ts_ns,
                name: names.name(e.name).to_string(),
                payload: e.payload.clone(),
            });
        }
        for s in &data.snapshots {
            self.snapshots.append(&MemorySnapshotRow {
                ts_ns: s.ts_ns,
                label: names.name(s.label).to_string(),
                source: s.source.to_string(),
                gpu: s.reading.gpu,
                allocated_bytes: s.reading.allocated_bytes,
                reserved_bytes: s.reading.reserved_bytes,
                max_allocated_bytes: s.reading.max_allocated_bytes,
            });
        }
        for &(name, count) in &data.parameters {
            self.parameters.append(&ModelParameterRow {
                name: names.name(name).to_string(),
                count,
            });
        }
    }

    /// The non-empty tables as batches.
    pub(crate) fn finish(self) -> Result<BTreeMap<Table, RecordBatch>, ArrowError> {
        let built = [
            (Table::Stages, self.stages.finish()),
            (Table::GpuSamples, self.gpu_samples.finish()),
            (Table::HostSamples, self.host_samples.finish()),
            (Table::DiffusionSteps, self.diffusion_steps.finish()),
            (Table::Blocks, self.blocks.finish()),
            (Table::Metrics, self.metrics.finish()),
            (Table::Events, self.events.finish()),
            (Table::MemorySnapshots, self.snapshots.finish()),
            (Table::ModelParameters, self.parameters.finish()),
        ];
        let mut tables = BTreeMap::new();
        for (table, batch) in built {
            let batch = batch?;
            if batch.num_rows() > 0 {
                tables.insert(table, batch);
            }
        }
        Ok(tables)
    }
}
