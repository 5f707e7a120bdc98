//! What the analysis keeps of one rank's payload, the [`RankDigest`]: each
//! rank reduced on its own (and on any thread) as soon as it is decoded, so
//! that a report over a thousand ranks never holds all their rows at once.

use rankscope_common::gather::Headed;
use rankscope_common::table::StagesView;
use rankscope_common::{Config, Payload, PayloadHeader};

use super::bottlenecks::BottleneckRule;
use super::diffusion::RankDiffusion;
use super::gpus;
use super::times::RankStages;
use crate::model::{GpuSummary, HostSummary};

/// One rank's payload reduced to what the analysis reads: its header, its
/// stage calls by name, a summary per GPU and of its host, and its
/// diffusion steps and blocks.
#[derive(Debug)]
pub struct RankDigest {
    /// The payload's header.
    pub header: PayloadHeader,
    /// Its stages by name, or why its stage table was refused.
    pub(super) stages: Result<RankStages, String>,
    /// Its GPUs, with the bottlenecks each shows on its own.
    pub(super) gpus: Vec<GpuSummary>,
    /// Its host's load, when it sampled the host.
    pub(super) host: Option<HostSummary>,
    /// Its diffusion tables.
    pub(super) diffusion: RankDiffusion,
}

impl RankDigest {
    /// Reduces `payload` under the warm-up and bottleneck settings of
    /// `config`.
    pub fn new(payload: &Payload, config: &Config) -> Self {
        let mut stages = match payload.view::<StagesView>() {
            Ok(Some(view)) => Ok(RankStages::new(&view, config.warmup_calls)),
            Ok(None) => Ok(RankStages::default()),
            Err(e) => Err(e.to_string()),
        };
        let busy_spans = match &mut stages {
            Ok(stages) => std::mem::take(&mut stages.busy_spans),
            Err(_) => Vec::new(),
        };
        let rule = BottleneckRule::from_config(config);
        RankDigest {
            header: payload.header.clone(),
            stages,
            gpus: gpus::rank_gpus(payload, &busy_spans, &rule),
            host: gpus::host_summary(payload),
            diffusion: RankDiffusion::new(payload),
        }
    }
}

impl Headed for RankDigest {
    fn header(&self) -> &PayloadHeader {
        &self.header
    }
}
