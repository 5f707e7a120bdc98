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
//! the size it is allowed, and a digest whose parts do not fit together
//! (a call with more slowest ranks than are kept, a timeline bar naming no
//! name): a clear error, never a panic.

use super::NodeDigest;

/// The first bytes of an encoded digest.
const MAGIC: &[u8; 4] = b"RSND";
/// The version this build writes and reads.
const VERSION: u16 = 1;
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
        let packed = zstd::bulk::compress(&body, LEVEL).map_err(DigestError::Unpack)?;
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
    /// reads them.
    fn check(&self) -> Result<(), String> {
        for (name, stage) in &self.stages.by_name {
            let ranks = stage.ranks.len() as u64;
            for (k, call) in stage.by_call.iter().enumerate() {
                if !call.is_whole(ranks) {
                    return Err(format!("stage {name:?}, call {k}: its slowest ranks"));
                }
            }
            if !stage.quantiles.is_whole() {
                return Err(format!("stage {name:?}: its calls' distribution"));
            }
        }
        for digest in &self.ranks {
            let rank = digest.header.rank.rank;
            let timeline = &digest.timeline;
            let bars = timeline.name.len();
            let whole = [
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
                return Err(format!("rank {rank}: its timeline"));
            }
            for (_, series) in &digest.gpus {
                if series
                    .metrics()
                    .iter()
                    .any(|m| m.t_s.len() != m.value.len())
                {
                    return Err(format!("rank {rank}: GPU {}'s readings", series.index));
                }
            }
        }
        Ok(())
    }
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
