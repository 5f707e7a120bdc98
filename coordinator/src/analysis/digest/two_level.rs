//! The two ends of a two-level gather: what a node leader sends rank 0 of
//! its node's payloads ([`leader_digest`]), and which of the node digests
//! rank 0 received it takes ([`accept_nodes`]): decoded, each checked to
//! be of this session and run and to hold only ranks of its leader's node.

use rankscope_common::error::Chain;
use std::borrow::Cow;
use std::ops::Range;

use rankscope_common::gather::NodeSent;
use rankscope_common::payload::{self, Compression};
use rankscope_common::{Gathered, Payload};

use super::node::Bytes;
use super::{DigestError, NodeDigest, RankDigest};
use crate::model::SkippedInput;
use crate::AnalysisConfig;

/// The most bytes a node digest may unpack to at rank 0 (a node of 8 ranks
/// of an hour each makes about 1 MB).
pub const NODE_DIGEST_LIMIT: usize = 64 << 20;
/// Of that, what the payloads a digest carries (its busiest rank's, those
/// `trace_ranks` names) may take: one past it stays out, so that the
/// digest itself always fits.
const CARRIED_BYTES: usize = NODE_DIGEST_LIMIT / 2;

/// The digest a node leader sends rank 0: the payloads it `gathered` (its
/// own and its node's), digested under `config` and merged, with the
/// inputs it refused, its busiest rank's payload and those of its ranks
/// `config` names to trace, readied to travel
/// ([`NodeDigest::bucket_for_job`]), encoded.
pub fn leader_digest(gathered: &Gathered, config: &AnalysisConfig) -> Result<Vec<u8>, DigestError> {
    leader_digest_within(gathered, config, CARRIED_BYTES)
}

/// [`leader_digest`], the payloads it carries within `room` bytes.
fn leader_digest_within(
    gathered: &Gathered,
    config: &AnalysisConfig,
    room: usize,
) -> Result<Vec<u8>, DigestError> {
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
    // The payloads carried, each while it fits in what is left of `room`;
    // one left out is named, with why.
    let mut room = room;
    let mut left_out = Vec::new();
    let mut carried = |rank: u32, as_what: &str| {
        let payload = gathered
            .payloads
            .iter()
            .find(|p| p.header.rank.rank == rank)?;
        let reason = match payload::encode(payload, Compression::Zstd) {
            Ok(bytes) => match room.checked_sub(bytes.len()) {
                Some(left) => {
                    room = left;
                    return Some(Bytes(bytes));
                }
                None => format!(
                    "past the {} MiB a node digest carries of payloads: its rows are in its \
                     spill file",
                    CARRIED_BYTES >> 20
                ),
            },
            Err(e) => format!("it could not be encoded again: {}", Chain(&e)),
        };
        left_out.push(SkippedInput {
            source: format!("rank {rank}'s payload, {as_what}"),
            reason,
        });
        None
    };
    let busiest = node.busiest();
    if let Some((seconds, rank)) = busiest {
        if let Some(bytes) = carried(rank, "as its node's busiest") {
            node.representatives.push((seconds, rank, bytes));
        }
    }
    let mut traced: Vec<u32> = config.trace_ranks.clone();
    traced.sort_unstable();
    traced.dedup();
    traced.retain(|&rank| node.holds(rank) && Some(rank) != busiest.map(|b| b.1));
    for rank in traced {
        if let Some(bytes) = carried(rank, "for trace_ranks") {
            node.traced.push((rank, bytes));
        }
    }
    node.add_skipped(left_out, 0);
    node.bucket_for_job();
    node.encode()
}

/// What a node digest must be of: its leader's node's ranks, of one
/// session and run.
#[derive(Debug, Clone, Copy)]
pub struct NodeOf<'a> {
    /// The ranks of the leader's node.
    pub ranks: &'a Range<u32>,
    /// The session's id.
    pub session_id: &'a str,
    /// The run's id.
    pub run_id: Option<&'a str>,
}

impl NodeDigest {
    /// Whether the digest holds a rank at least, and only ranks of the
    /// node, session and run of `of`, else why not.
    pub fn is_of_node(&self, of: NodeOf<'_>) -> Result<(), String> {
        if self.ranks.is_empty() {
            return Err("it holds no rank".into());
        }
        for digest in &self.ranks {
            let session = &digest.header.session;
            let rank = digest.header.rank.rank;
            if !of.ranks.contains(&rank) {
                return Err(format!(
                    "it holds rank {rank}, not of its leader's node (ranks {}..{})",
                    of.ranks.start, of.ranks.end
                ));
            }
            if session.id != of.session_id {
                return Err(format!("rank {rank} is of another session"));
            }
            if session.run_id.as_deref() != of.run_id {
                return Err(format!("rank {rank} is of another run"));
            }
        }
        Ok(())
    }
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
        node.is_of_node(NodeOf {
            ranks: &sent.ranks,
            session_id: &own.session.id,
            run_id: own.session.run_id.as_deref(),
        })?;
        if node.analysed_under != analysed_under {
            return Err(
                "it was digested under other analysis settings (warm-up calls, straggler or \
                 bottleneck thresholds, ranks to trace) than rank 0's"
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
            if header.rank.world_size != gathered.world_size {
                return Err(format!("rank {rank} claims another world size"));
            }
        }
        let represented = node.representatives.iter().map(|&(_, rank, _)| rank);
        if let Some(rank) = represented.into_iter().find(|&r| !node.holds(r)) {
            return Err(format!("its busiest rank {rank} is not one it holds"));
        }
        let traced: Vec<u32> = node.traced.iter().map(|&(rank, _)| rank).collect();
        if !traced.is_sorted_by(|a, b| a < b) {
            return Err("the payloads it carries to trace are not each once in rank order".into());
        }
        let unasked = |rank: &&u32| !node.holds(**rank) || !config.trace_ranks.contains(rank);
        if let Some(rank) = traced.iter().find(unasked) {
            return Err(format!(
                "it carries the payload of rank {rank}, not one of its own that `trace_ranks` names"
            ));
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

/// The payloads the accepted node digests carried (`represented`: their
/// busiest ranks' and those `trace_ranks` names, as `(rank, payload)`),
/// decoded, those of this job alone (the session, run and world of
/// `gathered`'s own payloads), by rank, each once.
pub fn represented_payloads(
    gathered: &Gathered,
    represented: impl IntoIterator<Item = (u32, Bytes)>,
) -> Vec<Payload> {
    let Some(own) = gathered.payloads.first().map(|p| &p.header) else {
        return Vec::new();
    };
    let mut payloads: Vec<Payload> = represented
        .into_iter()
        .filter_map(|(rank, bytes)| {
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
    payloads.dedup_by_key(|p| p.header.rank.rank);
    payloads
}

#[cfg(test)]
mod tests {
    use super::super::super::times::tests::rank_with_stages;
    use super::*;

    /// Rank `rank` of a world of 8, `seconds` in one call of `decode`.
    fn payload(rank: u32, seconds: f64) -> Payload {
        let mut payload = rank_with_stages(rank, &[(1, None, "decode", 0.0, seconds)]);
        payload.header.rank.world_size = 8;
        payload
    }

    /// Rank 0's node (ranks 0 to 3) and the digest of node 1 (ranks 4 to
    /// 7, rank 7 the busiest), read back and changed by `forge`, as rank 0
    /// gathers them.
    fn gathered(leader: &AnalysisConfig, forge: impl FnOnce(&mut NodeDigest)) -> Gathered {
        let node = Gathered {
            world_size: 8,
            payloads: (4..8).map(|r| payload(r, f64::from(r))).collect(),
            ..Gathered::default()
        };
        let mut digest =
            NodeDigest::decode(&leader_digest(&node, leader).unwrap(), 1 << 20).unwrap();
        forge(&mut digest);
        let mut gathered = Gathered {
            world_size: 8,
            payloads: (0..4).map(|r| payload(r, 1.0)).collect(),
            missing: (4..8).collect(),
            ..Gathered::default()
        };
        gathered.add_nodes(vec![NodeSent {
            source: "node digest of rank 4".into(),
            leader: 4,
            ranks: 4..8,
            bytes: digest.encode().unwrap(),
        }]);
        gathered
    }

    /// The ranks whose payloads a digest of `gathered` carried, and why
    /// its digest was refused, if it was.
    fn carried(gathered: &Gathered, config: &AnalysisConfig) -> (Vec<u32>, Option<String>) {
        let (mut node, refused) = accept_nodes(gathered, config);
        let busiest = node.representatives.drain(..).map(|(_, r, b)| (r, b));
        let carried = represented_payloads(gathered, busiest.chain(node.traced));
        let ranks = carried.iter().map(|p| p.header.rank.rank).collect();
        (ranks, refused.first().map(|s| s.reason.clone()))
    }

    #[test]
    fn a_digest_is_of_its_leaders_node_session_and_run_alone() {
        let node = Gathered {
            world_size: 8,
            payloads: (4..8).map(|r| payload(r, 1.0)).collect(),
            ..Gathered::default()
        };
        let config = AnalysisConfig::default();
        let digest = NodeDigest::decode(&leader_digest(&node, &config).unwrap(), 1 << 20).unwrap();
        let run = digest.ranks[0].header.session.run_id.clone();
        let of = |ranks: &Range<u32>, session_id: &'static str, run_id: Option<&'static str>| {
            let of = NodeOf {
                ranks,
                session_id,
                run_id,
            };
            digest.is_of_node(of).err()
        };
        let run = run.as_deref();
        assert_eq!(
            digest.is_of_node(NodeOf {
                ranks: &(4..8),
                session_id: "s",
                run_id: run
            }),
            Ok(())
        );
        let refused = [
            (
                of(&(0..4), "s", None),
                "rank 4, not of its leader's node (ranks 0..4)",
            ),
            (of(&(4..8), "t", None), "rank 4 is of another session"),
            (
                of(&(4..8), "s", Some("another")),
                "rank 4 is of another run",
            ),
        ];
        for (why, expected) in refused {
            assert!(
                why.as_deref().is_some_and(|w| w.contains(expected)),
                "{why:?}"
            );
        }
        assert_eq!(
            NodeDigest::default().is_of_node(NodeOf {
                ranks: &(4..8),
                session_id: "s",
                run_id: run
            }),
            Err("it holds no rank".into())
        );
    }

    #[test]
    fn ranks_named_to_trace_travel_beside_the_busiest() {
        let config = AnalysisConfig::default();
        assert_eq!(
            carried(&gathered(&config, |_| ()), &config),
            (vec![7], None)
        );
        let named = AnalysisConfig {
            trace_ranks: vec![5, 7, 12],
            ..AnalysisConfig::default()
        };
        assert_eq!(
            carried(&gathered(&named, |_| ()), &named),
            (vec![5, 7], None)
        );
    }

    #[test]
    fn payloads_past_the_room_stay_out_and_are_named() {
        let named = AnalysisConfig {
            trace_ranks: vec![4, 5, 6],
            ..AnalysisConfig::default()
        };
        let node = Gathered {
            world_size: 8,
            payloads: (4..8).map(|r| payload(r, f64::from(r))).collect(),
            ..Gathered::default()
        };
        let one = payload::encode(&node.payloads[0], Compression::Zstd)
            .unwrap()
            .len();
        // Room for the busiest (rank 7) and one more.
        let bytes = leader_digest_within(&node, &named, 2 * one + one / 2).unwrap();
        let digest = NodeDigest::decode(&bytes, 1 << 20).unwrap();
        let busiest: Vec<u32> = digest.representatives.iter().map(|r| r.1).collect();
        let traced: Vec<u32> = digest.traced.iter().map(|t| t.0).collect();
        assert_eq!((busiest, traced), (vec![7], vec![4]));
        let named_out: Vec<&str> = digest.skipped.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(
            named_out,
            [
                "rank 5's payload, for trace_ranks",
                "rank 6's payload, for trace_ranks"
            ]
        );
        // No room even for the busiest: it is named too.
        let bytes = leader_digest_within(&node, &named, one / 2).unwrap();
        let digest = NodeDigest::decode(&bytes, 1 << 20).unwrap();
        assert!(digest.representatives.is_empty());
        assert_eq!(
            digest.skipped[0].source,
            "rank 7's payload, as its node's busiest"
        );
        assert_eq!(digest.skipped.len(), 4);
    }

    #[test]
    fn a_digest_carrying_ranks_not_named_is_refused() {
        let named = AnalysisConfig {
            trace_ranks: vec![5],
            ..AnalysisConfig::default()
        };
        let copy_of = |rank: u32| {
            move |digest: &mut NodeDigest| {
                let bytes = payload::encode(&payload(rank, 1.0), Compression::Zstd).unwrap();
                digest.traced.push((rank, Bytes(bytes)));
            }
        };
        let (ranks, refused) = carried(&gathered(&named, copy_of(6)), &named);
        assert!(ranks.is_empty());
        let refused = refused.unwrap();
        assert!(
            refused.contains("the payload of rank 6, not one of its own that `trace_ranks` names"),
            "{refused}"
        );
        let (_, twice) = carried(&gathered(&named, copy_of(5)), &named);
        assert!(twice.unwrap().contains("not each once in rank order"));
        // A leader with other ranks to trace digested under other settings.
        let (_, other) = carried(&gathered(&named, |_| ()), &AnalysisConfig::default());
        assert!(other.unwrap().contains("other analysis settings"));
    }
}
