//! Diffusion: step-time distribution, block throughput (each frame counted
//! once per block, not once per step) and parameter counts.

use std::collections::BTreeMap;

use rankscope_common::table::{BlocksView, DiffusionStepsView, ModelParametersView};
use rankscope_common::Payload;
use serde::{Deserialize, Serialize};

use super::stats::percentiles;
use crate::model::{BlockSummary, DiffusionSummary, RankValue, StepSummary};

/// What the diffusion summary keeps of one rank.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RankDiffusion {
    /// Step computation times, ms.
    steps_ms: Vec<f64>,
    /// Blocks computed, frames in them, and the seconds they took.
    blocks: Option<(u64, u64, f64)>,
    /// Parameter counts by component name.
    parameters: Vec<(String, u64)>,
}

impl RankDiffusion {
    /// Whether its numbers are as [`RankDiffusion::new`] leaves them:
    /// step times finite, block seconds finite and not negative.
    pub fn is_whole(&self) -> bool {
        self.steps_ms.iter().all(|ms| ms.is_finite())
            && self
                .blocks
                .is_none_or(|(_, _, seconds)| seconds.is_finite() && seconds >= 0.0)
    }

    /// The rank's step times, ms.
    pub fn steps_ms(&self) -> &[f64] {
        &self.steps_ms
    }

    /// The diffusion tables of `payload`, reduced.
    pub fn new(payload: &Payload) -> Self {
        // A crafted payload's NaN or infinite step is no step time.
        let steps_ms = match payload.view::<DiffusionStepsView>() {
            Ok(Some(view)) => view
                .computation_ms
                .iter()
                .copied()
                .filter(|ms| ms.is_finite())
                .collect(),
            _ => Vec::new(),
        };
        let blocks = match payload.view::<BlocksView>() {
            // Input-derived: a sum that cannot wrap.
            Ok(Some(view)) => Some((
                view.len as u64,
                view.block_size
                    .iter()
                    .fold(0u64, |sum, &frames| sum.saturating_add(frames)),
                view.computation_ms.iter().sum::<f64>() / 1e3,
            )),
            _ => None,
        };
        let parameters = match payload.view::<ModelParametersView>() {
            Ok(Some(view)) => (0..view.len)
                .map(|i| (view.name.value(i).to_string(), view.count[i]))
                .collect(),
            _ => Vec::new(),
        };
        RankDiffusion {
            steps_ms,
            blocks,
            parameters,
        }
    }
}

/// Summarises the diffusion tables of every rank, by rank.
pub fn diffusion(ranks: &[(u32, &RankDiffusion)]) -> DiffusionSummary {
    DiffusionSummary {
        steps: steps(ranks),
        blocks: blocks(ranks),
        model_parameters: model_parameters(ranks),
    }
}

fn steps(ranks: &[(u32, &RankDiffusion)]) -> Option<StepSummary> {
    let mut all_ms = Vec::new();
    let mut per_rank_mean_ms = Vec::new();
    for &(rank, diffusion) in ranks {
        let ms = &diffusion.steps_ms;
        if ms.is_empty() {
            continue;
        }
        per_rank_mean_ms.push(RankValue {
            rank,
            value: ms.iter().sum::<f64>() / ms.len() as f64,
        });
        all_ms.extend_from_slice(ms);
    }
    Some(StepSummary {
        count: all_ms.len() as u64,
        step_ms: percentiles(&mut all_ms)?,
        per_rank_mean_ms,
    })
}

fn blocks(ranks: &[(u32, &RankDiffusion)]) -> Option<BlockSummary> {
    let mut summary: Option<BlockSummary> = None;
    for &(rank, diffusion) in ranks {
        let Some((count, frames, seconds)) = diffusion.blocks else {
            continue;
        };
        if seconds <= 0.0 {
            continue;
        }
        let (fps, bps) = (frames as f64 / seconds, count as f64 / seconds);
        let s = summary.get_or_insert(BlockSummary {
            count: 0,
            frames: 0,
            fps,
            bps,
            per_rank_fps: Vec::new(),
        });
        s.count = s.count.max(count);
        s.frames = s.frames.max(frames);
        // The job moves at the pace of its slowest rank.
        s.fps = s.fps.min(fps);
        s.bps = s.bps.min(bps);
        s.per_rank_fps.push(RankValue { rank, value: fps });
    }
    summary
}

fn model_parameters(ranks: &[(u32, &RankDiffusion)]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (_, diffusion) in ranks {
        for (name, count) in &diffusion.parameters {
            let most = out.entry(name.clone()).or_insert(0);
            *most = (*count).max(*most);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::table::{BlockRow, BlocksBuilder, Table};
    use rankscope_common::PayloadHeader;

    #[test]
    fn frames_count_once_per_block_and_the_slowest_rank_sets_the_pace() {
        let payload = |rank: u32, block_ms: f64| {
            let mut blocks = BlocksBuilder::default();
            for block_index in 0..2 {
                blocks.append(&BlockRow {
                    ts_ns: 0,
                    block_index,
                    block_size: 16,
                    computation_ms: block_ms,
                    memory_mb: None,
                });
            }
            let mut p = Payload {
                header: PayloadHeader::new("s", "n", rank, 2),
                tables: Default::default(),
            };
            p.tables.insert(Table::Blocks, blocks.finish().unwrap());
            p
        };
        // Rank 0: 32 frames in 0.5 s = 64 fps, 4 bps; rank 1: 32 frames in 1 s = 32 fps.
        let (rank0, rank1) = (payload(0, 250.0), payload(1, 500.0));
        let s = blocks(&[
            (0, &RankDiffusion::new(&rank0)),
            (1, &RankDiffusion::new(&rank1)),
        ])
        .unwrap();
        assert_eq!((s.count, s.frames), (2, 32));
        assert_eq!((s.fps, s.bps), (32.0, 2.0));
        assert_eq!(s.per_rank_fps[0].value, 64.0);
    }

    #[test]
    fn a_hostile_frame_count_saturates_instead_of_wrapping() {
        let mut rows = BlocksBuilder::default();
        for block_size in [u64::MAX - 5, 10] {
            rows.append(&BlockRow {
                ts_ns: 0,
                block_index: 0,
                block_size,
                computation_ms: 1.0,
                memory_mb: None,
            });
        }
        let mut p = Payload {
            header: PayloadHeader::new("s", "n", 0, 1),
            tables: Default::default(),
        };
        p.tables.insert(Table::Blocks, rows.finish().unwrap());
        assert_eq!(
            blocks(&[(0, &RankDiffusion::new(&p))]).unwrap().frames,
            u64::MAX
        );
    }
}
