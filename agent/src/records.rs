//! The values a caller hands to the record calls.

/// One denoising step of a diffusion model.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DiffusionStep {
    /// Step number.
    pub step: u64,
    /// Scheduler timestep.
    pub timestep: f64,
    /// Frames (or tokens) in the block being denoised.
    pub block_size: u64,
    /// Time the step took, milliseconds.
    pub computation_ms: f64,
    /// Classifier-free guidance scale, if any.
    pub guidance_scale: Option<f64>,
}

/// One block computation: a group of frames generated together.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BlockComputation {
    /// Block number.
    pub block_index: u64,
    /// Frames in the block.
    pub block_size: u64,
    /// Time the block took, milliseconds.
    pub computation_ms: f64,
    /// Memory the block used, MB.
    pub memory_mb: Option<f64>,
}

/// Memory numbers for a snapshot; fields left `None` are unknown.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MemoryReading {
    /// GPU the numbers are for (index in the rank's GPU list).
    pub gpu: Option<u32>,
    /// Allocated bytes.
    pub allocated_bytes: Option<u64>,
    /// Reserved bytes.
    pub reserved_bytes: Option<u64>,
    /// Peak allocated bytes.
    pub max_allocated_bytes: Option<u64>,
}
