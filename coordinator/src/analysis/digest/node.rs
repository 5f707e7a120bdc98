//! The digest of a set of ranks, their stage calls merged.

use serde::{Deserialize, Serialize};

use super::super::times::StageTimes;
use super::{taken, RankDigest};

/// The digests of a set of ranks (a node's, or the whole job's) with their
/// stage calls merged ([`StageTimes`]): what a node leader makes of its
/// ranks, and what rank 0 merges across nodes. Its stage calls' size is
/// set by the stages and their calls, not by the ranks; merging node
/// digests in any grouping gives the digest of all their ranks at once.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NodeDigest {
    /// The ranks' digests, in rank order, their stage calls taken out.
    pub ranks: Vec<RankDigest>,
    /// The stage calls of them all.
    pub(in crate::analysis) stages: StageTimes,
    /// The ranks whose stage tables were refused, and why, in rank order.
    pub(in crate::analysis) refused: Vec<(u32, String)>,
}

impl NodeDigest {
    /// The digest of `ranks`, their stage calls moved into one merge.
    pub fn new(mut ranks: Vec<RankDigest>) -> Self {
        ranks.sort_by_key(|digest| digest.header.rank.rank);
        let mut node = NodeDigest::default();
        for digest in &mut ranks {
            let rank = digest.header.rank.rank;
            match std::mem::replace(&mut digest.stages, taken()) {
                Ok(stages) => node.stages.add(rank, stages),
                Err(reason) => node.refused.push((rank, reason)),
            }
        }
        node.ranks = ranks;
        node
    }

    /// Adds the ranks of `other` (none of them already here).
    pub fn merge(&mut self, other: NodeDigest) {
        self.ranks.extend(other.ranks);
        self.ranks.sort_by_key(|digest| digest.header.rank.rank);
        self.stages.merge(other.stages);
        self.refused.extend(other.refused);
        self.refused.sort_by_key(|&(rank, _)| rank);
    }
}
