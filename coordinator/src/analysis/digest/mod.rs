//! What the analysis keeps of one rank's payload, the [`RankDigest`]: each
//! rank reduced on its own (and on any thread) as soon as it is decoded.
//! A report over a thousand ranks holds their digests, not their payloads:
//! per rank one number per stage call and diffusion step (for the lockstep
//! and percentile statistics), and bounded summaries of the rest. The
//! digests of a node's ranks become one [`NodeDigest`], their stage calls
//! merged call by call; node digests merge into the digest of the job.

use crate::AnalysisConfig;
use rankscope_common::gather::Headed;
use rankscope_common::parallel::ParallelCoord;
use rankscope_common::table::{
    counted_collectives, CollectivesView, KernelsView, MetricsView, StagesView,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use rankscope_common::{Payload, PayloadHeader};

use super::account::rank::Covered;
use super::account::RankAccount;
use super::diffusion::RankDiffusion;
use super::kernels::RankKernels;
use super::python::{rank_functions, RankFunction};
use super::steady::{RankEvent, Spans};
use super::times::{RankStages, RankSteadiness, Reading};
use super::{gpus, overhead, series};

mod node;
mod two_level;
mod wire;

use crate::model::{GpuSeries, GpuSummary, HostSummary, RankOverhead, RankTimeline};
pub(in crate::analysis) use node::Bytes;
pub use node::NodeDigest;
pub use node::REPRESENTED_NODES;
pub use two_level::{accept_nodes, leader_digest, represented_payloads, NodeOf, NODE_DIGEST_LIMIT};
pub use wire::DigestError;

/// One rank's payload reduced to what the analysis reads: its header, its
/// stage calls by name, a summary per GPU and of its host, and its
/// diffusion steps and blocks. A digest travels without its stage calls
/// (merged into a [`NodeDigest`] first).
#[derive(Debug, Serialize, Deserialize)]
pub struct RankDigest {
    /// The payload's header.
    pub header: PayloadHeader,
    /// Its stages by name, or why its stage table was refused.
    #[serde(skip, default = "taken")]
    pub(super) stages: Result<RankStages, String>,
    /// Its GPUs, with the bottlenecks each shows on its own, and their
    /// readings over time.
    pub(super) gpus: Vec<(GpuSummary, GpuSeries)>,
    /// Its outermost stages on its own clock, within its share of the
    /// timeline budget.
    pub(super) timeline: RankTimeline,
    /// Its host's load, when it sampled the host.
    pub(super) host: Option<HostSummary>,
    /// Its diffusion tables.
    pub(super) diffusion: RankDiffusion,
    /// Rows of each of its tables.
    pub(super) rows: BTreeMap<String, u64>,
    /// What profiling cost it, where its agent measured that.
    pub(super) overhead: Option<RankOverhead>,
    /// Its parallel coordinates (the header's, which travels without
    /// them).
    pub(super) parallel: Vec<ParallelCoord>,
    /// Its torch.profiler windows, where it recorded any, or why its
    /// kernel tables were refused.
    pub(super) kernels: Result<Option<RankKernels>, String>,
    /// Its traced Python functions, the most own time first, or why its
    /// table was refused.
    #[serde(default = "no_functions")]
    pub(super) python: Result<Vec<RankFunction>, String>,
    /// Its one-off events (warm-up, stalls, the profiler's), the costliest
    /// first, at most [`super::steady::RANK_EVENTS`].
    pub(super) events: Vec<RankEvent>,
    /// Its time, split once (its steps' collective times are taken into
    /// the node's steps side by side).
    pub(super) account: RankAccount,
    /// Which input it came from, for a reader that reads it again: the
    /// position the reader gave it.
    pub input: usize,
}

impl RankDigest {
    /// Reduces `payload` under the warm-up and bottleneck settings of
    /// `config`.
    pub fn new(payload: &Payload, config: &AnalysisConfig) -> Self {
        let header = &payload.header;
        let collectives = collective_spans(payload);
        let traced_from = traced_from(payload);
        let reading = Reading {
            warmup_calls: config.warmup_calls,
            collectives: &collectives,
            covered: covered(header),
            traced_from: &traced_from,
        };
        let (stages, outermost, mut steadiness) = match payload.view::<StagesView>() {
            Ok(Some(view)) => {
                let (mut stages, outermost, steadiness) = RankStages::new(&view, reading);
                if let Ok(Some(metrics)) = payload.view::<MetricsView>() {
                    stages.add_gpu_times(&metrics);
                }
                (Ok(stages), outermost, steadiness)
            }
            Ok(None) => (
                Ok(RankStages::default()),
                Vec::new(),
                RankSteadiness::default(),
            ),
            Err(e) => (Err(e.to_string()), Vec::new(), RankSteadiness::default()),
        };
        if steadiness.account.wall_s == 0.0 {
            // No stage table: the whole span is untracked.
            let wall_s = reading.covered.wall_ns as f64 / 1e9;
            steadiness.account = RankAccount {
                wall_s,
                untracked_s: wall_s,
                ..RankAccount::default()
            };
        }
        let world = header.rank.world_size as usize;
        let bars = series::share(series::TIMELINE_BARS, world);
        let gpu_metrics = world.saturating_mul(header.gpus.len()).saturating_mul(5);
        let points = series::share(series::GPU_POINTS, gpu_metrics);

        RankDigest {
            header: header.clone(),
            stages,
            gpus: gpus::rank_gpus(
                payload,
                &gpus::busy_spans(&outermost),
                &config.bottlenecks,
                points,
            ),
            timeline: series::rank_timeline(header.rank.rank, outermost, bars),
            host: gpus::host_summary(payload),
            diffusion: RankDiffusion::new(payload),
            rows: payload
                .tables
                .iter()
                .map(|(table, batch)| (table.name().to_string(), batch.num_rows() as u64))
                .collect(),
            overhead: overhead::rank_overhead(payload, steadiness.profiler_s),
            parallel: header.parallel.clone(),
            kernels: RankKernels::from_payload(payload, &steadiness.perturbed, &collectives),
            python: rank_functions(payload),
            events: steadiness.events,
            account: steadiness.account,
            input: 0,
        }
    }
}

/// The span a payload's account covers: its window, else its session.
fn covered(header: &PayloadHeader) -> Covered {
    match &header.window {
        Some(window) => Covered {
            from_ns: window.started_ns,
            wall_ns: window.duration_ns,
        },
        None => Covered {
            from_ns: 0,
            wall_ns: header.clock.duration_ns,
        },
    }
}

/// Where each of a payload's torch.profiler windows begins: its first GPU
/// activity, on the session clock.
fn traced_from(payload: &Payload) -> Vec<u64> {
    let Ok(Some(kernels)) = payload.view::<KernelsView>() else {
        return Vec::new();
    };
    let mut first: BTreeMap<u32, u64> = BTreeMap::new();
    for i in 0..kernels.len {
        let start = first.entry(kernels.window[i]).or_insert(u64::MAX);
        *start = (*start).min(kernels.start_ns[i]);
    }
    first.into_values().collect()
}

/// The spans of the collective calls a rank counts ([`counted_collectives`])
/// on its session clock; none where its table is absent or refused (the
/// kernel digest says why).
fn collective_spans(payload: &Payload) -> Spans {
    let Ok(Some(calls)) = payload.view::<CollectivesView>() else {
        return Spans::default();
    };
    Spans::new(counted_collectives(&calls).map(|i| {
        (
            calls.start_ns[i],
            calls.start_ns[i].saturating_add(calls.dur_ns[i]),
        )
    }))
}

impl Headed for RankDigest {
    fn header(&self) -> &PayloadHeader {
        &self.header
    }
}

/// The Python functions of a digest written before it had them.
fn no_functions() -> Result<Vec<RankFunction>, String> {
    Ok(Vec::new())
}

/// The stages of a digest whose stages were merged into a [`NodeDigest`].
fn taken() -> Result<RankStages, String> {
    Ok(RankStages::default())
}
