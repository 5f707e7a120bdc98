//! Diffusion: step-time distribution, block throughput (each frame counted
//! once per block, not once per step) and parameter counts.

use std::collections::BTreeMap;

use rankscope_common::table::{BlocksView, DiffusionStepsView, ModelParametersView};
use rankscope_common::Payload;

use super::stats::percentiles;
use crate::model::{BlockSummary, DiffusionSummary, RankValue, StepSummary};

/// Summarises the diffusion tables of every rank.
pub fn diffusion(payloads: &[Payload]) -> DiffusionSummary {
    DiffusionSummary {
        steps: steps(payloads),
        blocks: blocks(payloads),
        model_parameters: model_parameters(payloads),
    }
}

fn steps(payloads: &[Payload]) -> Option<StepSummary> {
    let mut all_ms = Vec::new();
    let mut per_rank_mean_ms = Vec::new();
    for payload in payloads {
        let Ok(Some(view)) = payload.view::<DiffusionStepsView>() else {
            continue;
        };
        let ms = view.computation_ms;
        per_rank_mean_ms.push(RankValue {
            rank: payload.header.rank.rank,
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

fn blocks(payloads: &[Payload]) -> Option<BlockSummary> {
    let mut summary: Option<BlockSummary> = None;
    for payload in payloads {
        let Ok(Some(view)) = payload.view::<BlocksView>() else {
            continue;
        };
        // Input-derived: a sum that cannot wrap.
        let frames = view
            .block_size
            .iter()
            .fold(0u64, |sum, &frames| sum.saturating_add(frames));
        let seconds = view.computation_ms.iter().sum::<f64>() / 1e3;
        if seconds <= 0.0 {
            continue;
        }
        let (fps, bps) = (frames as f64 / seconds, view.len as f64 / seconds);
        let rank = RankValue {
            rank: payload.header.rank.rank,
            value: fps,
        };
        let s = summary.get_or_insert(BlockSummary {
            count: 0,
            frames: 0,
            fps,
            bps,
            per_rank_fps: Vec::new(),
        });
        s.count = s.count.max(view.len as u64);
        s.frames = s.frames.max(frames);
        // The job moves at the pace of its slowest rank.
        s.fps = s.fps.min(fps);
        s.bps = s.bps.min(bps);
        s.per_rank_fps.push(rank);
    }
    summary
}

fn model_parameters(payloads: &[Payload]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for payload in payloads {
        let Ok(Some(view)) = payload.view::<ModelParametersView>() else {
            continue;
        };
        for i in 0..view.len {
            let count = out.entry(view.name.value(i).to_string()).or_insert(0);
            *count = view.count[i].max(*count);
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
        let s = blocks(&[payload(0, 250.0), payload(1, 500.0)]).unwrap();
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
        assert_eq!(blocks(&[p]).unwrap().frames, u64::MAX);
    }
}
