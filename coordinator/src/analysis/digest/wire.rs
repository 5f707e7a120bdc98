//! A [`NodeDigest`] as bytes, as a node leader sends it to rank 0:
//!
//! ```text
//! offset  size  field
//! 0       4     magic "RSND"
//! 4       2     version, little-endian (1)
//! 6       …     one zstd frame: the digest, bincode (standard config, serde)
//! ```
//!
//! Decoding refuses what is not a digest, another version, a frame past
//! the size it is allowed, and a digest whose parts do not fit together as
//! the analysis reads them (a call with more slowest ranks than are kept
//! or ranks that rise from one call to the next, a time that is not
//! finite, a timeline bar naming no name, a part of a rank it does not
//! hold): a clear error, never a panic.

use super::super::steady::{RankEvent, RANK_EVENTS};
use super::{NodeDigest, RankDigest};
#[cfg(test)]
use rankscope_common::gather::MAX_LISTED_SKIPPED;

/// The first bytes of an encoded digest.
const MAGIC: &[u8; 4] = b"RSND";
/// The version this build writes and reads.
const VERSION: u16 = 4;
/// The zstd level: the fastest, as rank 0 waits for it.
const LEVEL: i32 = 1;

/// Why bytes are not a node digest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// The bytes do not start as a digest does.
    #[error("not a node digest (no RSND magic)")]
    NotADigest,
    /// A digest of another version.
    #[error("node digest version {found}; this build reads version {VERSION}")]
    Version {
        /// The version found.
        found: u16,
    },
    /// The digest unpacks past its allowed size.
    #[error("node digest larger than {limit} bytes unpacked")]
    TooLarge {
        /// The allowed size, bytes.
        limit: usize,
    },
    /// The digest could not be read from where it was.
    #[error("reading a node digest")]
    Read(#[source] std::io::Error),
    /// The digest could not be packed.
    #[error("packing a node digest")]
    Pack(#[source] std::io::Error),
    /// The zstd frame is damaged.
    #[error("node digest's zstd frame")]
    Unpack(#[source] std::io::Error),
    /// The digest could not be encoded.
    #[error("encoding a node digest")]
    Encode(#[source] bincode::error::EncodeError),
    /// The bytes inside are not a digest of this version.
    #[error("decoding a node digest")]
    Decode(#[source] bincode::error::DecodeError),
    /// The digest is whole, but not one this report takes.
    #[error("node digest refused: {0}")]
    Refused(String),
    /// The digest decodes, but its parts do not fit together.
    #[error("node digest is inconsistent: {0}")]
    Inconsistent(String),
}

impl NodeDigest {
    /// The digest as bytes (the format above).
    pub fn encode(&self) -> Result<Vec<u8>, DigestError> {
        let body = bincode::serde::encode_to_vec(self, bincode::config::standard())
            .map_err(DigestError::Encode)?;
        let mut bytes = Vec::with_capacity(6 + body.len() / 2);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        let packed = zstd::bulk::compress(&body, LEVEL).map_err(DigestError::Pack)?;
        bytes.extend_from_slice(&packed);
        Ok(bytes)
    }

    /// The digest in `bytes`, unpacked to at most `limit` bytes.
    pub fn decode(bytes: &[u8], limit: usize) -> Result<NodeDigest, DigestError> {
        let rest = bytes.strip_prefix(MAGIC).ok_or(DigestError::NotADigest)?;
        let (version, packed) = rest.split_at_checked(2).ok_or(DigestError::NotADigest)?;
        let found = u16::from_le_bytes([version[0], version[1]]);
        if found != VERSION {
            return Err(DigestError::Version { found });
        }
        let body = unpack(packed, limit)?;
        let config = bincode::config::standard().with_limit::<{ 1 << 30 }>();
        let (digest, read): (NodeDigest, usize) =
            bincode::serde::decode_from_slice(&body, config).map_err(DigestError::Decode)?;
        if read != body.len() {
            return Err(DigestError::Inconsistent(format!(
                "{} bytes after the digest",
                body.len() - read
            )));
        }
        digest.check().map_err(DigestError::Inconsistent)?;
        Ok(digest)
    }

    /// Whether the parts of a decoded digest fit together as the analysis
    /// reads them, else what does not: ranks in rank order, each once;
    /// the stage calls (`StageTimes::is_whole`) and the refused stage
    /// tables of those ranks alone; each rank's parts its own, with
    /// finite numbers where the analysis adds them up.
    fn check(&self) -> Result<(), String> {
        let in_order = self
            .ranks
            .windows(2)
            .all(|w| w[0].header.rank.rank < w[1].header.rank.rank);
        if !in_order {
            return Err("its ranks are not each once, in order".into());
        }
        let holds = |rank: u32| self.holds(rank);
        self.stages.is_whole(holds)?;
        self.steps.is_whole(holds, self.ranks.len())?;
        if self.refused.iter().any(|&(rank, _)| !holds(rank)) {
            return Err("a refused stage table of a rank it does not hold".into());
        }
        for digest in &self.ranks {
            let rank = digest.header.rank.rank;
            rank_is_whole(digest).map_err(|part| format!("rank {rank}: its {part}"))?;
        }
        Ok(())
    }
}

/// Whether the parts of one rank's digest are that rank's and fit
/// together, else which part does not.
fn rank_is_whole(digest: &RankDigest) -> Result<(), &'static str> {
    let rank = digest.header.rank.rank;
    let timeline = &digest.timeline;
    let bars = timeline.name.len();
    let whole = timeline.rank == rank
        && [
            timeline.start_s.len(),
            timeline.end_s.len(),
            timeline.calls.len(),
        ]
        .iter()
        .all(|&n| n == bars)
        && timeline
            .name
            .iter()
            .all(|&at| (at as usize) < timeline.names.len());
    if !whole {
        return Err("timeline");
    }
    if !rankscope_common::parallel::are_valid(&digest.parallel) {
        return Err("parallel coordinates");
    }
    for (summary, series) in &digest.gpus {
        let readings = series
            .metrics()
            .iter()
            .all(|m| m.t_s.len() == m.value.len());
        if summary.rank != rank || series.rank != rank || !readings {
            return Err("GPUs");
        }
    }
    if !digest.diffusion.is_whole() {
        return Err("diffusion steps");
    }
    if matches!(&digest.kernels, Ok(Some(kernels)) if kernels.rank != rank) {
        return Err("kernel traces");
    }
    let event_whole = |e: &RankEvent| {
        [e.cost_s, e.profiler_s]
            .iter()
            .all(|s| s.is_finite() && *s >= 0.0)
    };
    if digest.events.len() > RANK_EVENTS || !digest.events.iter().all(event_whole) {
        return Err("one-off events");
    }
    digest.account.is_whole()?;
    // Its span is the header's (its window's, where it is a window's).
    let span_ns = digest
        .header
        .window
        .as_ref()
        .map_or(digest.header.clock.duration_ns, |w| w.duration_ns);
    if span_ns > 0 && (digest.account.wall_s - span_ns as f64 / 1e9).abs() > 1e-6 {
        return Err("time account's span");
    }
    if digest
        .events
        .iter()
        .any(|e| e.cost_s > digest.account.wall_s + 1e-9)
    {
        return Err("one-off events");
    }
    if matches!(&digest.kernels, Ok(Some(kernels)) if !kernels.gpu.is_whole()) {
        return Err("kernel traces' GPU account");
    }
    Ok(())
}

/// The zstd frame `packed`, unpacked to at most `limit` bytes: the size
/// its header gives is checked first, and the frame unpacked into that
/// much (one allocation, no stream window).
fn unpack(packed: &[u8], limit: usize) -> Result<Vec<u8>, DigestError> {
    let damaged = |what: &str| DigestError::Unpack(std::io::Error::other(what.to_string()));
    let size = match zstd::zstd_safe::get_frame_content_size(packed) {
        Ok(Some(size)) => size,
        Ok(None) => return Err(damaged("the frame does not give its size")),
        Err(_) => return Err(damaged("no zstd frame header")),
    };
    if size > limit as u64 {
        return Err(DigestError::TooLarge { limit });
    }
    let body = zstd::bulk::decompress(packed, size as usize).map_err(DigestError::Unpack)?;
    if body.len() as u64 != size {
        return Err(damaged("the frame is shorter than its size"));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::super::super::times::tests::rank_with_stages;
    use super::super::super::times::StageAcross;
    use super::*;
    use crate::model::SkippedInput;
    use crate::AnalysisConfig;

    /// The digest of ranks 4 and 5, each with two calls of `decode`.
    fn node() -> NodeDigest {
        let config = AnalysisConfig::default();
        let digests = [4, 5]
            .map(|rank| {
                let payload = rank_with_stages(
                    rank,
                    &[(1, None, "decode", 0.0, 1.0), (2, None, "decode", 1.0, 2.5)],
                );
                RankDigest::new(&payload, &config)
            })
            .into();
        NodeDigest::new(digests)
    }

    /// Why `node`, sent and read back, is refused.
    fn refused(node: &NodeDigest) -> String {
        let bytes = node.encode().unwrap();
        NodeDigest::decode(&bytes, 1 << 20).unwrap_err().to_string()
    }

    /// The stage `decode` of `node`.
    fn decode_stage(node: &mut NodeDigest) -> &mut StageAcross {
        node.stages.by_name.get_mut("decode").unwrap()
    }

    #[test]
    fn a_whole_digest_reads_back() {
        let bytes = node().encode().unwrap();
        let read = NodeDigest::decode(&bytes, 1 << 20).unwrap();
        assert_eq!(read.ranks.len(), 2);
        assert_eq!(read.stages.by_name["decode"].by_call.len(), 2);
    }

    #[test]
    fn forged_parts_are_refused_by_name() {
        // More ranks at a later call than at the one before.
        let mut rising = node();
        let stage = decode_stage(&mut rising);
        stage.by_call[0] = super::super::super::calls::CallAcross::one(4, 1.0, 0.0);
        assert!(refused(&rising).contains("stage \"decode\": its call 0"));
        // The slowest rank of a call a rank the digest does not hold.
        let mut stranger = node();
        let stage = decode_stage(&mut stranger);
        let mut call = super::super::super::calls::CallAcross::one(1, 9.0, 0.0);
        call.add(4, 1.0, 0.0);
        stage.by_call[1] = call;
        assert!(refused(&stranger).contains("its call 1"));
        // An infinite call time among those kept one by one.
        let mut infinite = node();
        decode_stage(&mut infinite).quantiles.add(&[f32::INFINITY]);
        assert!(refused(&infinite).contains("its calls' distribution"));
        // GPU time of a rank it does not hold.
        let mut gpu = node();
        gpu.stages
            .gpu_by_name
            .insert("decode".into(), [(0, 1e6)].into());
        assert!(refused(&gpu).contains("its GPU times"));
        // A rank twice.
        let mut twice = node();
        let copy = node().ranks.remove(0);
        twice.ranks.insert(0, copy);
        assert!(refused(&twice).contains("its ranks are not each once, in order"));
        // A refused stage table of a rank it does not hold.
        let mut refusal = node();
        refusal.refused.push((9, "damaged".into()));
        assert!(refused(&refusal).contains("a refused stage table"));
        // A dimension's name no process group gives.
        let mut named = node();
        named.ranks[0].parallel = vec![rankscope_common::parallel::ParallelCoord {
            dim: "x".repeat(100),
            index: 0,
            size: 2,
        }];
        assert!(refused(&named).contains("rank 4: its parallel coordinates"));
    }

    #[test]
    fn a_merge_keeps_the_busiest_nodes_representatives() {
        let mut merged = NodeDigest::default();
        for k in 0..70u32 {
            let mut one = NodeDigest::default();
            one.representatives
                .push((f64::from(k), k, Default::default()));
            merged.merge(one);
        }
        let mut kept: Vec<u32> = merged.representatives.iter().map(|r| r.1).collect();
        kept.sort_unstable();
        let first = 70 - super::super::REPRESENTED_NODES as u32;
        assert_eq!(kept, (first..70).collect::<Vec<u32>>());
        // A digest carries one, of a rank it holds.
        let mut two = node();
        two.representatives = vec![(1.0, 4, Default::default()), (1.0, 5, Default::default())];
        assert!(refused(&two).contains("decoding a node digest"));
    }

    #[test]
    fn a_list_of_refusals_past_its_bound_is_not_read() {
        let mut flood = node();
        flood.skipped = (0..MAX_LISTED_SKIPPED + 1)
            .map(|i| SkippedInput {
                source: i.to_string(),
                reason: String::new(),
            })
            .collect();
        assert!(
            refused(&flood).contains("decoding a node digest"),
            "{}",
            refused(&flood)
        );
        let mut merged = node();
        merged.add_skipped(flood.skipped, 3);
        assert_eq!(merged.skipped.len(), MAX_LISTED_SKIPPED);
        assert_eq!(merged.skipped_unlisted, 4);
    }
}
