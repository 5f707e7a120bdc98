//! The tables' codecs: compression and bounded decompression (no more than
//! announced, no decompression bombs), and their ids on the wire.

use std::cell::RefCell;
use std::io::{Read, Write};

use super::Compression;

/// The id a table entry gives `compression`.
pub(super) fn codec_id(compression: Compression) -> u8 {
    match compression {
        Compression::None => 0,
        Compression::Lz4 => 1,
        Compression::Zstd => 2,
    }
}

/// `stream` compressed with `compression`.
pub(super) fn compress(stream: &[u8], compression: Compression) -> std::io::Result<Vec<u8>> {
    match compression {
        Compression::None => Ok(stream.to_vec()),
        Compression::Lz4 => {
            let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
            encoder.write_all(stream)?;
            encoder.finish().map_err(std::io::Error::other)
        }
        Compression::Zstd => zstd::bulk::compress(stream, 3),
    }
}

/// How many times its compressed size a table stream may be, past
/// [`EXPANSION_FLOOR`] bytes: real tables compress 5 to 50 times; far more is
/// a decompression bomb, a few kilobytes that would take gigabytes.
pub const MAX_EXPANSION: u64 = 4096;
/// Table streams up to this size may be compressed any amount.
pub const EXPANSION_FLOOR: u64 = 16 << 20;

/// Whether a stream of `raw` bytes may be compressed into `compressed`.
pub(super) fn expansion_allowed(compressed: usize, raw: u64) -> bool {
    raw <= EXPANSION_FLOOR || raw <= (compressed as u64).saturating_mul(MAX_EXPANSION)
}

/// The most bytes any codec the encoder uses makes of `raw` bytes: zstd's
/// and LZ4's worst cases (incompressible data grows by under 1 %) and their
/// frames' headers. More announced is padding (a sparse file of gigabytes
/// for a table of kilobytes), refused before it is read.
pub(super) fn compressed_bound(raw: u64) -> u64 {
    raw.saturating_add(raw / 128).saturating_add(1024)
}

/// Whether `compressed` bytes announced for a stream of `raw` bytes are
/// what a codec could have made of it: neither a decompression bomb nor
/// padding.
pub(super) fn lengths_fit(compressed: u64, raw: u64) -> Result<(), CodecError> {
    let compressed =
        usize::try_from(compressed).map_err(|_| CodecError::Unaddressable(compressed))?;
    if !expansion_allowed(compressed, raw) {
        return Err(CodecError::Bomb {
            compressed,
            raw_len: raw,
        });
    }
    if compressed as u64 > compressed_bound(raw) {
        return Err(CodecError::Padded {
            compressed,
            raw_len: raw,
        });
    }
    Ok(())
}

/// Why a table's stream could not be decompressed.
#[derive(Debug, thiserror::Error)]
pub(super) enum CodecError {
    /// The announced size is past the table limit.
    #[error("announced size {raw_len} bytes exceeds the {limit}-byte limit")]
    OverLimit {
        /// The size announced.
        raw_len: u64,
        /// The limit.
        limit: u64,
    },
    /// The announced size is past [`MAX_EXPANSION`] times the compressed one.
    #[error(
        "{compressed} compressed bytes announce {raw_len}: more than {MAX_EXPANSION} times as \
         many (a decompression bomb)"
    )]
    Bomb {
        /// The compressed size.
        compressed: usize,
        /// The size announced.
        raw_len: u64,
    },
    /// More compressed bytes than any codec makes of the announced size
    /// ([`compressed_bound`]).
    #[error(
        "{compressed} compressed bytes for {raw_len}: more than any codec makes of them (padding)"
    )]
    Padded {
        /// The compressed size.
        compressed: usize,
        /// The size announced.
        raw_len: u64,
    },
    /// The announced size cannot be addressed here.
    #[error("{0} bytes announced")]
    Unaddressable(u64),
    /// The zstd decompression context could not be made.
    #[error("{0}")]
    Context(#[source] std::io::Error),
    /// The LZ4 frames do not decompress.
    #[error("decompressing: {0}")]
    Lz4(#[source] std::io::Error),
    /// The zstd frames do not decompress into the room announced.
    #[error("decompressing ({capacity} announced): {source}")]
    Zstd {
        /// The bytes announced.
        capacity: usize,
        /// zstd's error.
        #[source]
        source: std::io::Error,
    },
    /// The codec id is none this build knows.
    #[error("unknown codec {0}")]
    UnknownCodec(u8),
    /// The stream decompressed to another size than announced.
    #[error("decompressed to {found} bytes, {raw_len} announced")]
    WrongSize {
        /// The size it decompressed to.
        found: usize,
        /// The size announced.
        raw_len: u64,
    },
}

/// Decompresses the zstd frames `compressed`, at most `capacity` bytes, with
/// one decompression context per thread (making one per table cost as much
/// as decompressing a small table). The room is reserved, and written only
/// as far as the frames go.
fn unzstd(compressed: &[u8], capacity: usize) -> Result<Vec<u8>, CodecError> {
    thread_local! {
        static CONTEXT: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { RefCell::new(None) };
    }
    CONTEXT.with_borrow_mut(|context| {
        let context = match context {
            Some(context) => context,
            None => context.insert(zstd::bulk::Decompressor::new().map_err(CodecError::Context)?),
        };
        // zstd writes no further than the room it is given: a longer
        // stream fails.
        let mut out = Vec::with_capacity(capacity);
        context
            .decompress_to_buffer(compressed, &mut out)
            .map_err(|source| CodecError::Zstd { capacity, source })?;
        Ok(out)
    })
}

/// Decompresses `compressed` with codec `codec`, refusing to produce more
/// (or less) than the announced `raw_len` bytes.
pub(super) fn decompress(
    codec: u8,
    compressed: &[u8],
    raw_len: u64,
    limit: u64,
) -> Result<Vec<u8>, CodecError> {
    if raw_len > limit {
        return Err(CodecError::OverLimit { raw_len, limit });
    }
    lengths_fit(compressed.len() as u64, raw_len)?;
    // Both bounds above cap `raw_len`, so it can be allocated up front.
    let capacity = usize::try_from(raw_len).map_err(|_| CodecError::Unaddressable(raw_len))?;
    let out = match codec {
        0 => compressed.to_vec(),
        1 => {
            let mut out = Vec::with_capacity(capacity);
            lz4_flex::frame::FrameDecoder::new(compressed)
                .take(raw_len + 1)
                .read_to_end(&mut out)
                .map_err(CodecError::Lz4)?;
            out
        }
        2 => unzstd(compressed, capacity)?,
        other => return Err(CodecError::UnknownCodec(other)),
    };
    if out.len() as u64 != raw_len {
        return Err(CodecError::WrongSize {
            found: out.len(),
            raw_len,
        });
    }
    Ok(out)
}
