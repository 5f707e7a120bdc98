//! The two ends of a two-level gather: what a node leader sends rank 0 of
//! its node's payloads ([`leader_digest`]), and which of the node digests
//! rank 0 received it takes ([`accept_nodes`]): decoded, each checked to
//! be of this session and run and to hold only ranks of its leader's node.

use rankscope_common::error::Chain;
use std::borrow::Cow;

use rankscope_common::gather::NodeSent;
use rankscope_common::payload::{self, Compression};
use rankscope_common::{Gathered, Payload};

use super::node::{Bytes, Representative};
use super::{DigestError, NodeDigest, RankDigest};
use crate::model::SkippedInput;
use crate::AnalysisConfig;

/// The most bytes a node digest may unpack to at rank 0 (a node of 8 ranks
/// of an hour each makes about 1 MB).
pub const NODE_DIGEST_LIMIT: usize = 64 << 20;

/// The digest a node leader sends rank 0: the payloads it `gathered` (its
/// own and its node's), digested under `config` and merged, with the
/// inputs it refused, readied to travel ([`NodeDigest::bucket_for_job`]),
/// encoded.
pub fn leader_digest(gathered: &Gathered, config: &AnalysisConfig) -> Result<Vec<u8>, DigestError> {
    let digests: Vec<RankDigest> = gathered
        .payloads
        .iter()
        .map(|payload| RankDigest::new(payload, config))
        .collect();
    let mut node = NodeDigest::new(digests);
    let skipped = gathered.skipped.iter().map(|s| SkippedInput {
        source: s.source.clone(),
        reason: Chain(&s.reason).to_string(),
    });
    node.add_skipped(skipped.collect(), 0);
    node.analysed_under = format!("{config:?}");
    if let Some((seconds, rank)) = node.busiest() {
        let busiest = gathered
            .payloads
            .iter()
            .find(|p| p.header.rank.rank == rank);
        if let Some(encoded) = busiest.and_then(|p| payload::encode(p, Compression::Zstd).ok()) {
            node.representatives.push((seconds, rank, Bytes(encoded)));
        }
    }
    node.bucket_for_job();
    node.encode()
}

/// The node digests of `gathered` that are this job's, merged, and those
/// refused with why. A digest is this job's where it was made under
/// `config` and every rank it holds is of the session, run and world of
/// `gathered`'s own payloads (rank 0's first), of its leader's node, and
/// not among those payloads (the digest's own consistency, each rank once
/// and its parts its ranks', is checked as it is decoded).
pub fn accept_nodes(
    gathered: &Gathered,
    config: &AnalysisConfig,
) -> (NodeDigest, Vec<SkippedInput>) {
    let own = gathered.payloads.first().map(|p| &p.header);
    let taken: Vec<u32> = gathered
        .payloads
        .iter()
        .map(|p| p.header.rank.rank)
        .collect();
    let analysed_under = format!("{config:?}");
    let check = |sent: &NodeSent, node: &NodeDigest| {
        let own = own.ok_or("rank 0 has no payload of its own to check it against")?;
        if node.ranks.is_empty() {
            return Err("it holds no rank".to_string());
        }
        if node.analysed_under != analysed_under {
            return Err(
                "it was digested under other analysis settings (warm-up calls, straggler or \
                 bottleneck thresholds) than rank 0's"
                    .into(),
            );
        }
        for digest in &node.ranks {
            let header = &digest.header;
            let rank = header.rank.rank;
            if taken.contains(&rank) {
                return Err(format!(
                    "it holds rank {rank}, whose payload rank 0 took itself"
                ));
            }
            if !sent.ranks.contains(&rank) {
                return Err(format!(
                    "it holds rank {rank}, not of its leader's node (ranks {}..{})",
                    sent.ranks.start, sent.ranks.end
                ));
            }
            if header.session.id != own.session.id {
                return Err(format!("rank {rank} is of another session"));
            }
            if header.session.run_id != own.session.run_id {
                return Err(format!("rank {rank} is of another run"));
            }
            if header.rank.world_size != gathered.world_size {
                return Err(format!("rank {rank} claims another world size"));
            }
        }
        let represented = node.representatives.iter().map(|&(_, rank, _)| rank);
        if let Some(rank) = represented.into_iter().find(|&r| !node.holds(r)) {
            return Err(format!("its busiest rank {rank} is not one it holds"));
        }
        Ok(())
    };
    let (merged, refused) = NodeDigest::decode_all(
        &gathered.nodes,
        |sent| Ok(Cow::Borrowed(&sent.bytes)),
        check,
        NODE_DIGEST_LIMIT,
    );
    let refused = refused
        .into_iter()
        .map(|(at, why)| SkippedInput {
            source: gathered.nodes[at].source.clone(),
            reason: Chain(&why).to_string(),
        })
        .collect();
    (merged, refused)
}

/// The payloads of the busiest ranks the accepted node digests carried
/// (`represented`), decoded, those of this job alone (the session, run and
/// world of `gathered`'s own payloads), by rank.
pub fn represented_payloads(gathered: &Gathered, represented: Vec<Representative>) -> Vec<Payload> {
    let Some(own) = gathered.payloads.first().map(|p| &p.header) else {
        return Vec::new();
    };
    let mut payloads: Vec<Payload> = represented
        .into_iter()
        .filter_map(|(_, rank, bytes)| {
            let payload = payload::decode(&bytes.0).ok()?;
            let header = &payload.header;
            let ours = header.rank.rank == rank
                && header.session.id == own.session.id
                && header.session.run_id == own.session.run_id
                && header.rank.world_size == gathered.world_size;
            ours.then_some(payload)
        })
        .collect();
    payloads.sort_by_key(|p| p.header.rank.rank);
    payloads
}
