//! The digest of a set of ranks, their stage calls merged.

use std::borrow::Cow;
use std::marker::PhantomData;

use rankscope_common::config::MAX_TRACE_RANKS;
use rankscope_common::gather::MAX_LISTED_SKIPPED;
use serde::de::{self, Deserializer, SeqAccess};
use serde::{Deserialize, Serialize};

use super::super::account::StepsAcross;
use super::super::times::StageTimes;
use super::{taken, DigestError, RankDigest};
use crate::model::SkippedInput;

/// The digests of a set of ranks (a node's, or the whole job's) with their
/// stage calls merged (call by call): what a node leader makes of its
/// ranks, and what rank 0 merges across nodes. Its stage calls' size is
/// set by the stages and their calls, not by the ranks; merging node
/// digests in any grouping gives the digest of all their ranks at once.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NodeDigest {
    /// The ranks' digests, in rank order, their stage calls taken out.
    pub ranks: Vec<RankDigest>,
    /// The stage calls of them all.
    pub(in crate::analysis) stages: StageTimes,
    /// Their steps side by side (for the time account).
    pub(in crate::analysis) steps: StepsAcross,
    /// The ranks whose stage tables were refused, and why, in rank order.
    #[serde(deserialize_with = "at_most::<_, _, MOST_REFUSED>")]
    pub(in crate::analysis) refused: Vec<(u32, String)>,
    /// What the node's leaders refused of their ranks' payloads, and why:
    /// the first [`MAX_LISTED_SKIPPED`].
    #[serde(deserialize_with = "at_most::<_, _, MAX_LISTED_SKIPPED>")]
    pub(in crate::analysis) skipped: Vec<SkippedInput>,
    /// How many more the leaders refused.
    pub(in crate::analysis) skipped_unlisted: u64,
    /// The analysis settings the ranks were digested under (their debug
    /// form): rank 0 takes a digest made under its own alone.
    pub(in crate::analysis) analysed_under: String,
    /// The ranks whose rows rank 0 writes into the trace and raw/ beside
    /// its own node's: of each node its busiest rank (the most time in
    /// stages, where a straggler shows), as `(seconds, rank, encoded
    /// payload)`; merged, those of the [`REPRESENTED_NODES`] busiest.
    #[serde(deserialize_with = "at_most::<_, _, 1>")]
    pub(in crate::analysis) representatives: Vec<Representative>,
    /// The payloads of its ranks named by `trace_ranks`, each kept
    /// whatever the merge, as `(rank, encoded payload)`.
    #[serde(deserialize_with = "at_most::<_, _, MAX_TRACE_RANKS>")]
    pub(in crate::analysis) traced: Vec<(u32, Bytes)>,
}

/// A node's busiest rank, for the trace and raw/: its seconds in stages,
/// the rank, and its payload, encoded.
pub type Representative = (f64, u32, Bytes);

/// Bytes that travel as one run of bytes, not as a list of numbers (a
/// payload of 70 KB decodes in one copy rather than 70,000 calls).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bytes(pub Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(decoder: D) -> Result<Self, D::Error> {
        /// Takes a run of bytes, borrowed or owned.
        struct Run;
        impl de::Visitor<'_> for Run {
            type Value = Bytes;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a run of bytes")
            }

            fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(bytes.to_vec()))
            }

            fn visit_byte_buf<E: de::Error>(self, bytes: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(bytes))
            }
        }
        decoder.deserialize_byte_buf(Run)
    }
}

/// How many nodes' busiest ranks a merge of node digests keeps for the
/// trace and raw/: their payloads, about 70 KB each for ten minutes, are
/// held until the rows are written.
pub const REPRESENTED_NODES: usize = 64;

/// The most stage tables a decoded digest may name as refused (one per
/// rank of a node of many).
const MOST_REFUSED: usize = 4_096;

/// A list of at most `N` entries, decoded: a damaged or forged digest
/// cannot make a long list out of a few bytes each.
fn at_most<'de, D, T, const N: usize>(decoder: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    /// Takes the entries while there are at most `N`.
    struct Bounded<T, const N: usize>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const N: usize> de::Visitor<'de> for Bounded<T, N> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of at most {N} entries")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut entries = Vec::new();
            while let Some(entry) = seq.next_element()? {
                if entries.len() == N {
                    return Err(de::Error::custom(format!("a list past {N} entries")));
                }
                entries.push(entry);
            }
            Ok(entries)
        }
    }
    decoder.deserialize_seq(Bounded::<T, N>(PhantomData))
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
            node.steps
                .add(rank, &std::mem::take(&mut digest.account.steps));
        }
        node.ranks = ranks;
        node
    }

    /// Readies the digest to travel from a node leader: each stage's calls
    /// counted in buckets where the job's calls of it, foreseen from this
    /// node's share of the world, will be past those kept one by one
    /// ([`crate::analysis::EXACT_CALLS`]), so that rank 0 adds
    /// buckets instead of counting every call of the job.
    pub fn bucket_for_job(&mut self) {
        let Some(world) = self.ranks.first().map(|r| r.header.rank.world_size) else {
            return;
        };
        let here = self.ranks.len() as u64;
        for stage in self.stages.by_name.values_mut() {
            let foreseen = stage.quantiles.count().saturating_mul(u64::from(world)) / here;
            stage.quantiles.bucket_for(foreseen);
        }
    }

    /// Adds the ranks of `other` (none of them already here); the ranks
    /// are in rank order again once [`NodeDigest::sort`] is called.
    pub fn merge(&mut self, other: NodeDigest) {
        self.ranks.extend(other.ranks);
        self.stages.merge(other.stages);
        self.steps.merge(&other.steps);
        self.refused.extend(other.refused);
        self.add_skipped(other.skipped, other.skipped_unlisted);
        self.representatives.extend(other.representatives);
        if self.representatives.len() > REPRESENTED_NODES {
            self.representatives
                .sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            self.representatives.truncate(REPRESENTED_NODES);
        }
        self.traced.extend(other.traced);
    }

    /// The busiest of its ranks, the most seconds in stages, and those
    /// seconds; `None` for a digest of no stage.
    pub(in crate::analysis) fn busiest(&self) -> Option<(f64, u32)> {
        self.stages
            .busy_by_rank()
            .into_iter()
            .map(|(rank, seconds)| (seconds, rank))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
    }

    /// Adds `skipped` (and `unlisted` more) to the inputs refused, listing
    /// the first [`MAX_LISTED_SKIPPED`] and counting the rest.
    pub(in crate::analysis) fn add_skipped(&mut self, skipped: Vec<SkippedInput>, unlisted: u64) {
        let room = MAX_LISTED_SKIPPED.saturating_sub(self.skipped.len());
        let over = skipped.len().saturating_sub(room) as u64;
        self.skipped.extend(skipped.into_iter().take(room));
        self.skipped_unlisted = self
            .skipped_unlisted
            .saturating_add(unlisted)
            .saturating_add(over);
    }

    /// Whether it holds `rank` (its ranks in rank order, as a merge leaves
    /// them once sorted and a decoded digest is checked to have them).
    pub(in crate::analysis) fn holds(&self, rank: u32) -> bool {
        self.ranks
            .binary_search_by_key(&rank, |digest| digest.header.rank.rank)
            .is_ok()
    }

    /// Puts the ranks, and the ranks refused, in rank order.
    pub fn sort(&mut self) {
        self.ranks.sort_by_key(|digest| digest.header.rank.rank);
        self.refused.sort_by_key(|&(rank, _)| rank);
    }

    /// The digests of `sources` (the bytes of each, as
    /// [`NodeDigest::encode`] writes them, from `bytes_of`: read, or
    /// borrowed where the source holds them; unpacked to at
    /// most `limit` bytes) decoded, checked by `check` and merged, on every
    /// core: each thread reads, decodes and merges its share one digest at
    /// a time, then the shares are merged. Those refused are returned by
    /// position, with why.
    pub fn decode_all<S: Sync>(
        sources: &[S],
        bytes_of: impl for<'s> Fn(&'s S) -> std::io::Result<Cow<'s, [u8]>> + Sync,
        check: impl Fn(&S, &NodeDigest) -> Result<(), String> + Sync,
        limit: usize,
    ) -> (NodeDigest, Vec<(usize, DigestError)>) {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let share = sources.len().div_ceil(threads).max(1);
        let decode_share = |first: usize, share: &[S]| {
            let mut merged = NodeDigest::default();
            let mut refused = Vec::new();
            for (i, source) in share.iter().enumerate() {
                let decoded = bytes_of(source)
                    .map_err(DigestError::Read)
                    .and_then(|bytes| NodeDigest::decode(&bytes, limit))
                    .and_then(|node| match check(source, &node) {
                        Ok(()) => Ok(node),
                        Err(why) => Err(DigestError::Refused(why)),
                    });
                match decoded {
                    Ok(node) => merged.merge(node),
                    Err(e) => refused.push((first + i, e)),
                }
            }
            (merged, refused)
        };
        // A share whose thread cannot be had (a limit on processes) is
        // decoded here.
        let shares: Vec<(NodeDigest, Vec<(usize, DigestError)>)> = std::thread::scope(|scope| {
            let spawned: Vec<_> = sources
                .chunks(share)
                .enumerate()
                .map(|(k, chunk)| {
                    std::thread::Builder::new()
                        .name("rankscope-merge".into())
                        .spawn_scoped(scope, move || decode_share(k * share, chunk))
                        .map_err(|_| (k, chunk))
                })
                .collect();
            spawned
                .into_iter()
                .map(|thread| match thread {
                    Ok(thread) => thread
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    Err((k, chunk)) => decode_share(k * share, chunk),
                })
                .collect()
        });
        let mut merged = NodeDigest::default();
        let mut refused = Vec::new();
        for (node, their_refused) in shares {
            merged.merge(node);
            refused.extend(their_refused);
        }
        merged.sort();
        (merged, refused)
    }
}
