//! The records of diffusion pipelines, apart from the core's stages,
//! steps and metrics: denoising steps, block computations and model
//! parameter counts.

use rankscope_common::table::{BlockRecord, DiffusionStepRecord, ModelParameterRecord, Table};

use super::Profiler;
use crate::{BlockComputation, DiffusionStep};

/// Diffusion records.
impl Profiler {
    /// Records one denoising step.
    #[inline]
    pub fn record_diffusion_step(&self, step: DiffusionStep) {
        if let Some(rec) = self.recording() {
            rec.record_row(Table::DiffusionSteps, |t, ticks| {
                t.records.diffusion_steps.push_back(DiffusionStepRecord {
                    ts_ns: ticks,
                    step: step.step,
                    timestep: step.timestep,
                    block_size: step.block_size,
                    computation_ms: step.computation_ms,
                    guidance_scale: step.guidance_scale,
                })
            });
        }
    }

    /// Records one block computation.
    #[inline]
    pub fn record_block_computation(&self, block: BlockComputation) {
        if let Some(rec) = self.recording() {
            rec.record_row(Table::Blocks, |t, ticks| {
                t.records.blocks.push_back(BlockRecord {
                    ts_ns: ticks,
                    block_index: block.block_index,
                    block_size: block.block_size,
                    computation_ms: block.computation_ms,
                    memory_mb: block.memory_mb,
                })
            });
        }
    }

    /// Records the parameter count of a model or component.
    pub fn record_model_parameters(&self, name: &str, count: u64) {
        if let Some(rec) = self.recording() {
            rec.record_row(Table::ModelParameters, |t, _| {
                let name = t.names.intern(name);
                t.records
                    .model_parameters
                    .push_back(ModelParameterRecord { name, count });
            });
        }
    }
}
