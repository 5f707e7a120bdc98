//! The rank payload: the one format a rank's data takes on the wire and on
//! disk.
//!
//! ```text
//! offset  size  field
//! 0       4     magic "RSPL"
//! 4       2     format version (u16, little endian)
//! 6       2     reserved, zero
//! 8       8     total length of the payload in bytes, checksum included
//! 16      4     header length H
//! 20      H     header: PayloadHeader, bincode (standard config, serde);
//!               from version 3 followed by its tail (the fields added
//!               since version 2: the encode time)
//! ..      2     number of tables T
//! T times:
//!         1     table id (see Table::id)
//!         1     codec: 0 none, 1 LZ4 frame, 2 Zstandard
//!         8     length R of the table's Arrow IPC stream
//!         8     length L of the compressed stream
//!         L     the compressed Arrow IPC stream: the schema, its dictionaries,
//!               one record batch
//! ..      4     CRC-32 of every byte before it
//! ```
//!
//! From version 3 the timestamp and stage-id columns hold differences from
//! the row before (the `delta` module); the schema is the table's either way.
//!
//! The IPC stream itself is written uncompressed and compressed whole: the
//! Arrow reader trusts the uncompressed sizes inside a compressed IPC body
//! and allocates them up front, so a hostile length could abort the process.
//! Compressing outside lets [`decode`] bound every allocation.
//!
//! [`decode`] treats its input as untrusted: every length is checked against
//! what is left, the checksum is verified before anything is parsed, sizes are
//! capped, decompression stops at the announced size, the Arrow reader runs
//! with validation on and behind a panic guard, and each table must match its
//! schema.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};

use arrow_array::RecordBatch;
use arrow_ipc::writer::StreamWriter;
use serde::{Deserialize, Serialize};

use crate::table::{SchemaMismatch, Table, TableView};

mod delta;
mod header;
mod stream;

pub use header::{
    ClockMeta, ClockOffset, ClockSync, DroppedRows, GpuMeta, GpuSource, Overflow, PayloadHeader,
    RankMeta, SamplerStats, SessionMeta, TransportName,
};
use header::{HeaderTail, HeaderTailV3};
use stream::read_stream;

/// The four bytes every payload starts with.
pub const MAGIC: [u8; 4] = *b"RSPL";
/// The format version this build writes (and the newest it reads).
/// Versions 1 (no run identity, no measured clock offset), 2 (every
/// column stored as values) and 3 (no window in the header) are still read.
pub const FORMAT_VERSION: u16 = 4;
/// Largest header accepted.
pub const MAX_HEADER_BYTES: usize = 1 << 20;
/// Largest payload accepted: 4 GiB.
pub const MAX_PAYLOAD_BYTES: u64 = 1 << 32;
/// Largest uncompressed table stream accepted: 1 GiB.
pub const MAX_TABLE_BYTES: u64 = 1 << 30;

/// The bounds of a payload, one set for both sides: [`encode_within`] never
/// writes what [`decode_within`] with the same limits would refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest uncompressed Arrow IPC stream of one table, bytes.
    pub table_bytes: u64,
    /// Largest payload, bytes.
    pub payload_bytes: u64,
}

impl Limits {
    /// The limits of [`encode`] and [`decode`].
    pub const DEFAULT: Limits = Limits {
        table_bytes: MAX_TABLE_BYTES,
        payload_bytes: MAX_PAYLOAD_BYTES,
    };
}

/// Bytes at the start of every payload that announce its length.
pub const PREAMBLE_BYTES: usize = 20;
const CHECKSUM_BYTES: usize = 4;

/// Compression of the Arrow IPC streams inside a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// No compression.
    None,
    /// LZ4 frame: fast.
    Lz4,
    /// Zstandard: smallest.
    #[default]
    Zstd,
}

/// A rank's header and tables, decoded.
#[derive(Debug, Clone)]
pub struct Payload {
    /// Session and rank metadata.
    pub header: PayloadHeader,
    /// The non-empty tables.
    pub tables: BTreeMap<Table, RecordBatch>,
}

impl Payload {
    /// The batch of `table`, if the rank recorded any rows in it.
    pub fn table(&self, table: Table) -> Option<&RecordBatch> {
        self.tables.get(&table)
    }

    /// A typed view of the table `V` views: `Ok(None)` when the rank
    /// recorded no rows in it.
    pub fn view<'a, V: TableView<'a>>(&'a self) -> Result<Option<V>, SchemaMismatch> {
        self.table(V::TABLE).map(V::view).transpose()
    }

    /// Rows in `table` (0 when absent).
    pub fn rows(&self, table: Table) -> usize {
        self.table(table).map_or(0, RecordBatch::num_rows)
    }
}

impl Payload {
    /// One payload of the rows of every part, in order, under the last
    /// part's header (the parts of one rank's session: its flushes, then
    /// its finish), the telemetry tables (GPU and host
    /// readings: rings, whose newest count) kept to their newest
    /// `max_telemetry` rows, the cut counted as dropped. Parts are taken one
    /// at a time: however long the session, no more than one part and the
    /// rows kept are held. `None` without parts.
    pub fn concat(
        parts: impl IntoIterator<Item = Payload>,
        max_telemetry: usize,
    ) -> Result<Option<Payload>, arrow_schema::ArrowError> {
        let mut header: Option<PayloadHeader> = None;
        // Rows the parts before the last dropped, and the telemetry cut.
        let mut dropped: Vec<(String, u64)> = Vec::new();
        let mut by_table: BTreeMap<Table, VecDeque<RecordBatch>> = BTreeMap::new();
        let mut telemetry_rows: BTreeMap<Table, usize> = BTreeMap::new();
        for part in parts {
            if let Some(earlier) = header.replace(part.header) {
                dropped.extend(earlier.dropped.into_iter().map(|d| (d.table, d.rows)));
            }
            for (table, batch) in part.tables {
                let batches = by_table.entry(table).or_default();
                let rows = batch.num_rows();
                batches.push_back(batch);
                if !matches!(table, Table::GpuSamples | Table::HostSamples) {
                    continue;
                }
                let kept = telemetry_rows.entry(table).or_default();
                *kept += rows;
                // The oldest rows past the bound go, a batch or a slice at a time.
                while *kept > max_telemetry {
                    let excess = *kept - max_telemetry;
                    let oldest = batches.front_mut().expect("rows are in batches");
                    let cut = excess.min(oldest.num_rows());
                    if cut == oldest.num_rows() {
                        batches.pop_front();
                    } else {
                        *oldest = oldest.slice(cut, oldest.num_rows() - cut);
                    }
                    *kept -= cut;
                    dropped.push((table.name().to_string(), cut as u64));
                }
            }
        }
        let Some(mut header) = header else {
            return Ok(None);
        };
        for (table, rows) in dropped {
            header.add_dropped(&table, rows);
        }
        let mut tables = BTreeMap::new();
        for (table, batches) in by_table {
            let batches: Vec<RecordBatch> = batches.into_iter().collect();
            if batches.is_empty() {
                continue;
            }
            let batch = arrow_select::concat::concat_batches(&table.schema(), &batches)?;
            tables.insert(table, batch);
        }
        Ok(Some(Payload { header, tables }))
    }
}

/// Why a payload could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// Shorter than its own length field says (or than a preamble).
    #[error("truncated payload: {found} bytes, expected {expected}")]
    Truncated {
        /// Bytes the payload should have.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// Does not start with the payload magic.
    #[error("not a rankscope payload (bad magic bytes)")]
    NotAPayload,
    /// Written by a newer (or unknown) format version.
    #[error(
        "payload format version {found} is not supported (this build reads up to {supported})"
    )]
    UnsupportedVersion {
        /// Version in the file.
        found: u16,
        /// Newest version this build reads.
        supported: u16,
    },
    /// [`encode_as`] was asked for a version this build does not write.
    #[error(
        "payload format version {0} cannot be written (this build writes 2 to {FORMAT_VERSION})"
    )]
    UnwritableVersion(u16),
    /// The length field is out of bounds.
    #[error("payload length {0} bytes is out of bounds")]
    BadLength(u64),
    /// A table too large to encode within the limits.
    #[error("table `{}`: {bytes} bytes uncompressed, more than the {limit}-byte limit", .table.name())]
    TableTooLarge {
        /// The table.
        table: Table,
        /// Its uncompressed stream, bytes.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The whole payload too large to encode within the limits.
    #[error("payload of {bytes} bytes, more than the {limit}-byte limit")]
    TooLarge {
        /// The payload's size, bytes.
        bytes: u64,
        /// The limit.
        limit: u64,
        /// The table whose compressed stream is the largest.
        largest: Option<Table>,
    },
    /// Bytes follow the checksum: the file holds more than one payload, or
    /// was appended to.
    #[error("{0} unexpected bytes after the payload's checksum")]
    TrailingBytes(u64),
    /// The reserved field is not zero: written by something else.
    #[error("reserved header field is {0:#06x}, not zero")]
    Reserved(u16),
    /// The checksum does not match the content.
    #[error("payload checksum mismatch (corrupt data)")]
    ChecksumMismatch,
    /// The header breaks one of the payload's own bounds.
    #[error("payload header: {0}")]
    Header(String),
    /// The header's bytes do not decode.
    #[error("payload header does not decode")]
    HeaderDecode(#[source] bincode::error::DecodeError),
    /// The header could not be encoded.
    #[error("payload header cannot be encoded")]
    HeaderEncode(#[source] bincode::error::EncodeError),
    /// The layout after the header is malformed.
    #[error("payload layout: {0}")]
    Layout(String),
    /// A table's Arrow stream could not be read or written.
    #[error("table `{table}`: {reason}")]
    Table {
        /// Table name.
        table: &'static str,
        /// What went wrong.
        reason: String,
    },
}

/// Encodes a payload within the default [`Limits`].
pub fn encode(payload: &Payload, compression: Compression) -> Result<Vec<u8>, PayloadError> {
    encode_within(payload, compression, &Limits::DEFAULT)
}

/// Encodes a payload: header, then one compressed Arrow IPC stream per
/// non-empty table, then the checksum. Refuses (with
/// [`PayloadError::TableTooLarge`], [`PayloadError::TooLarge`] or a header
/// error) to write what [`decode_within`] would refuse to read.
pub fn encode_within(
    payload: &Payload,
    compression: Compression,
    limits: &Limits,
) -> Result<Vec<u8>, PayloadError> {
    encode_as(FORMAT_VERSION, payload, compression, limits)
}

/// [`encode_within`] in format `version`: 2 (every column stored as
/// values, what builds before version 3 read) to [`FORMAT_VERSION`]. The
/// agent writes the newest; the older one is for comparing the two (`cargo
/// bench -p rankscope-coordinator --bench wire_size`) and for tests that a
/// version-2 payload still reads.
pub fn encode_as(
    version: u16,
    payload: &Payload,
    compression: Compression,
    limits: &Limits,
) -> Result<Vec<u8>, PayloadError> {
    encode_measured(version, payload, compression, limits, None).map(|(bytes, _)| bytes)
}

/// The payload's bytes, and the `encode_ns` their header holds: the
/// payload's own or, when `spent_ns` is given, that plus how long its
/// tables took to encode here.
fn encode_measured(
    version: u16,
    payload: &Payload,
    compression: Compression,
    limits: &Limits,
    spent_ns: Option<u64>,
) -> Result<(Vec<u8>, Option<u64>), PayloadError> {
    if !(2..=FORMAT_VERSION).contains(&version) {
        return Err(PayloadError::UnwritableVersion(version));
    }
    let started = std::time::Instant::now();
    let (tables, largest) = encode_tables(version, payload, compression, limits)?;
    let encode_ns = match spent_ns {
        Some(spent) => Some(spent.saturating_add(elapsed_ns(started))),
        None => payload.header.encode_ns,
    };
    let header = encode_header(version, &payload.header, encode_ns)?;
    let mut out = Vec::with_capacity(PREAMBLE_BYTES + header.len() + tables.len() + CHECKSUM_BYTES);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes()); // total length, filled in below
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&tables);

    let total = (out.len() + CHECKSUM_BYTES) as u64;
    if total > limits.payload_bytes {
        return Err(PayloadError::TooLarge {
            bytes: total,
            limit: limits.payload_bytes,
            largest,
        });
    }
    out[8..16].copy_from_slice(&total.to_le_bytes());
    let checksum = crc32fast::hash(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    Ok((out, encode_ns))
}

/// The header's bytes in format `version` (format 3 adds the
/// [`HeaderTail`]), refused if the decoder would refuse them.
fn encode_header(
    version: u16,
    header: &PayloadHeader,
    encode_ns: Option<u64>,
) -> Result<Vec<u8>, PayloadError> {
    let config = bincode::config::standard();
    let fail = PayloadError::HeaderEncode;
    let mut bytes = bincode::serde::encode_to_vec(header, config).map_err(fail)?;
    let tail = match version {
        ..=2 => Ok(Vec::new()),
        3 => bincode::serde::encode_to_vec(HeaderTailV3 { encode_ns }, config),
        _ => bincode::serde::encode_to_vec(
            HeaderTail {
                encode_ns,
                window: header.window.clone(),
            },
            config,
        ),
    };
    bytes.extend(tail.map_err(fail)?);
    if bytes.len() > MAX_HEADER_BYTES {
        return Err(PayloadError::Header(format!(
            "{} bytes exceeds the {MAX_HEADER_BYTES}-byte limit",
            bytes.len()
        )));
    }
    // The decoder's own bounds (bincode's allocation limit among them) are
    // the judge: a header it would refuse is never written.
    decode_header_of(version, &bytes)?;
    Ok(bytes)
}

/// The tables' part of a payload (their count, then each one framed), and
/// the table whose compressed stream is the largest.
fn encode_tables(
    version: u16,
    payload: &Payload,
    compression: Compression,
    limits: &Limits,
) -> Result<(Vec<u8>, Option<Table>), PayloadError> {
    let tables: Vec<_> = payload
        .tables
        .iter()
        .filter(|(_, batch)| batch.num_rows() > 0)
        .collect();
    let mut out = Vec::new();
    out.extend_from_slice(&(tables.len() as u16).to_le_bytes());
    let mut largest: Option<(usize, Table)> = None;
    for (&table, batch) in tables {
        let stream = match version {
            3.. => write_stream(table, &delta::encode(batch))?,
            _ => write_stream(table, batch)?,
        };
        if stream.len() as u64 > limits.table_bytes {
            return Err(PayloadError::TableTooLarge {
                table,
                bytes: stream.len() as u64,
                limit: limits.table_bytes,
            });
        }
        let mut codec = compression;
        let mut compressed = compress(&stream, codec).map_err(|e| PayloadError::Table {
            table: table.name(),
            reason: format!("compressing: {e}"),
        })?;
        if !expansion_allowed(compressed.len(), stream.len() as u64) {
            // Data this repetitive would read as a decompression bomb:
            // stored as it is instead.
            codec = Compression::None;
            compressed = stream.clone();
        }
        if largest.is_none_or(|(size, _)| compressed.len() > size) {
            largest = Some((compressed.len(), table));
        }
        out.push(table.id());
        out.push(codec_id(codec));
        out.extend_from_slice(&(stream.len() as u64).to_le_bytes());
        out.extend_from_slice(&(compressed.len() as u64).to_le_bytes());
        out.extend_from_slice(&compressed);
    }
    Ok((out, largest.map(|(_, table)| table)))
}

/// Encodes `payload` within `limits`, making it fit if it does not: the
/// largest offending table keeps the rows that fit (its first ones) and the
/// rows cut are counted in the header's `dropped`, as rows past
/// `max_data_points` are. The agent's encoder: the time it spends
/// (attempts that did not fit included) is added to the header's
/// `encode_ns`, in the bytes and in `payload`.
pub fn encode_capped(
    payload: &mut Payload,
    compression: Compression,
    limits: &Limits,
) -> Result<Vec<u8>, PayloadError> {
    let mut spent_ns = payload.header.encode_ns.unwrap_or(0);
    loop {
        let started = std::time::Instant::now();
        let result = encode_measured(FORMAT_VERSION, payload, compression, limits, Some(spent_ns));
        if let Ok((bytes, encode_ns)) = result {
            payload.header.encode_ns = encode_ns;
            return Ok(bytes);
        }
        spent_ns = spent_ns.saturating_add(elapsed_ns(started));
        let (table, keep) = match &result {
            Err(PayloadError::TableTooLarge {
                table,
                bytes,
                limit,
            }) => {
                let rows = payload.rows(*table);
                // Rows shrink the stream about in proportion; a margin for
                // the schema and the framing.
                let fit = (rows as f64 * *limit as f64 / *bytes as f64 * 0.9) as usize;
                (*table, fit)
            }
            Err(PayloadError::TooLarge {
                largest: Some(table),
                ..
            }) => (*table, payload.rows(*table) / 2),
            _ => return result.map(|(bytes, _)| bytes),
        };
        if keep >= payload.rows(table) {
            // Nothing left to cut: the error stands.
            return result.map(|(bytes, _)| bytes);
        }
        let batch = &payload.tables[&table];
        let cut = (batch.num_rows() - keep) as u64;
        let kept = batch.slice(0, keep);
        payload.tables.insert(table, kept);
        payload.header.add_dropped(table.name(), cut);
    }
}

/// Nanoseconds since `started`, saturating.
fn elapsed_ns(started: std::time::Instant) -> u64 {
    started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64
}

fn write_stream(table: Table, batch: &RecordBatch) -> Result<Vec<u8>, PayloadError> {
    let fail = |e: arrow_schema::ArrowError| PayloadError::Table {
        table: table.name(),
        reason: e.to_string(),
    };
    let mut writer = StreamWriter::try_new(Vec::new(), &batch.schema()).map_err(fail)?;
    writer.write(batch).map_err(fail)?;
    writer.finish().map_err(fail)?;
    writer.into_inner().map_err(fail)
}

fn codec_id(compression: Compression) -> u8 {
    match compression {
        Compression::None => 0,
        Compression::Lz4 => 1,
        Compression::Zstd => 2,
    }
}

fn compress(stream: &[u8], compression: Compression) -> std::io::Result<Vec<u8>> {
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
fn expansion_allowed(compressed: usize, raw: u64) -> bool {
    raw <= EXPANSION_FLOOR || raw <= (compressed as u64).saturating_mul(MAX_EXPANSION)
}

/// Decompresses the zstd frames `compressed`, at most `capacity` bytes, with
/// one decompression context per thread (making one per table cost as much
/// as decompressing a small table). The room is reserved, and written only
/// as far as the frames go.
fn unzstd(compressed: &[u8], capacity: usize) -> Result<Vec<u8>, String> {
    thread_local! {
        static CONTEXT: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { RefCell::new(None) };
    }
    CONTEXT.with_borrow_mut(|context| {
        let context = match context {
            Some(context) => context,
            None => context.insert(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?),
        };
        // zstd writes no further than the room it is given: a longer
        // stream fails.
        let mut out = Vec::with_capacity(capacity);
        context
            .decompress_to_buffer(compressed, &mut out)
            .map_err(|e| format!("decompressing ({capacity} announced): {e}"))?;
        Ok(out)
    })
}

/// Decompresses `compressed` with codec `codec`, refusing to produce more
/// (or less) than the announced `raw_len` bytes.
fn decompress(codec: u8, compressed: &[u8], raw_len: u64, limit: u64) -> Result<Vec<u8>, String> {
    if raw_len > limit {
        return Err(format!(
            "announced size {raw_len} bytes exceeds the {limit}-byte limit"
        ));
    }
    if !expansion_allowed(compressed.len(), raw_len) {
        return Err(format!(
            "{} compressed bytes announce {raw_len}: more than {MAX_EXPANSION} times as many \
             (a decompression bomb)",
            compressed.len()
        ));
    }
    // Both bounds above cap `raw_len`, so it can be allocated up front.
    let capacity = usize::try_from(raw_len).map_err(|_| format!("{raw_len} bytes announced"))?;
    let out = match codec {
        0 => compressed.to_vec(),
        1 => {
            let mut out = Vec::with_capacity(capacity);
            lz4_flex::frame::FrameDecoder::new(compressed)
                .take(raw_len + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("decompressing: {e}"))?;
            out
        }
        2 => unzstd(compressed, capacity)?,
        other => return Err(format!("unknown codec {other}")),
    };
    if out.len() as u64 != raw_len {
        return Err(format!(
            "decompressed to {} bytes, {raw_len} announced",
            out.len()
        ));
    }
    Ok(out)
}

/// Reads one table's Arrow IPC stream as [`decode`] reads each table of a
/// payload once its checksum held and it was decompressed: the stream
/// reader, for fuzzing on its own (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub fn read_table_stream(table: Table, stream: Vec<u8>) -> Result<RecordBatch, PayloadError> {
    read_stream(table, stream)
}

/// Decodes a payload from untrusted bytes, within the default [`Limits`].
pub fn decode(bytes: &[u8]) -> Result<Payload, PayloadError> {
    decode_within(bytes, &Limits::DEFAULT)
}

/// Decodes a payload from untrusted bytes, refusing anything past `limits`.
pub fn decode_within(bytes: &[u8], limits: &Limits) -> Result<Payload, PayloadError> {
    let total = check_envelope(bytes, limits.payload_bytes)?;
    let body = &bytes[..total - CHECKSUM_BYTES];
    let mut reader = ByteReader {
        bytes: body,
        pos: PREAMBLE_BYTES - 4,
    };

    let header_len = reader.u32("header length")? as usize;
    if header_len > MAX_HEADER_BYTES {
        return Err(PayloadError::Header(format!(
            "length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit"
        )));
    }
    let header_bytes = reader.take(header_len, "header")?;
    let version = format_version(bytes);
    let header = decode_header_of(version, header_bytes)?;

    let table_count = reader.u16("table count")?;
    let mut tables = BTreeMap::new();
    for _ in 0..table_count {
        let id = reader.u8("table id")?;
        let table = Table::from_id(id)
            .ok_or_else(|| PayloadError::Layout(format!("unknown table id {id}")))?;
        let codec = reader.u8("codec")?;
        let raw_len = reader.u64("table length")?;
        let len = reader.u64("compressed table length")?;
        let compressed = reader.take(
            usize::try_from(len).map_err(|_| PayloadError::BadLength(len))?,
            table.name(),
        )?;
        let stream =
            decompress(codec, compressed, raw_len, limits.table_bytes).map_err(|reason| {
                PayloadError::Table {
                    table: table.name(),
                    reason,
                }
            })?;
        let batch = match version {
            3.. => delta::decode(&read_stream(table, stream)?),
            _ => read_stream(table, stream)?,
        };
        if tables.insert(table, batch).is_some() {
            return Err(PayloadError::Layout(format!(
                "table `{}` appears twice",
                table.name()
            )));
        }
    }
    if reader.pos != body.len() {
        return Err(PayloadError::Layout(format!(
            "{} unexpected bytes after the last table",
            body.len() - reader.pos
        )));
    }
    Ok(Payload { header, tables })
}

/// Walks the layout of a payload file of `total` bytes whose `preamble`
/// was checked ([`announced_length`]) before the file is read whole: its
/// header (decoded) and each table's entry, seeking past the tables'
/// bytes; the last table must end where the checksum begins. A file that
/// is no payload past its preamble (a sparse file of gigabytes) is refused
/// having read at most its header. Leaves `file` anywhere.
pub fn check_layout<R: std::io::Read + std::io::Seek>(
    file: &mut R,
    preamble: &[u8],
    total: u64,
) -> Result<(), PayloadError> {
    let io = |e: std::io::Error| PayloadError::Layout(format!("reading the layout: {e}"));
    let header_len = u32::from_le_bytes(
        preamble[PREAMBLE_BYTES - 4..PREAMBLE_BYTES]
            .try_into()
            .expect("4 bytes"),
    );
    let header_len = header_len as usize;
    let body_end = total.saturating_sub(CHECKSUM_BYTES as u64);
    if header_len > MAX_HEADER_BYTES || (PREAMBLE_BYTES + header_len + 2) as u64 > body_end {
        return Err(PayloadError::Header(format!(
            "length {header_len} does not fit the payload's {total} bytes or the {MAX_HEADER_BYTES}-byte limit"
        )));
    }
    file.seek(std::io::SeekFrom::Start(PREAMBLE_BYTES as u64))
        .map_err(io)?;
    let mut header = vec![0u8; header_len];
    file.read_exact(&mut header).map_err(io)?;
    decode_header_of(format_version(preamble), &header)?;
    let mut count = [0u8; 2];
    file.read_exact(&mut count).map_err(io)?;
    let mut pos = (PREAMBLE_BYTES + header_len + 2) as u64;
    for _ in 0..u16::from_le_bytes(count) {
        // Table id, codec, uncompressed and compressed lengths.
        let mut entry = [0u8; 18];
        file.read_exact(&mut entry).map_err(io)?;
        let table = Table::from_id(entry[0])
            .ok_or_else(|| PayloadError::Layout(format!("unknown table id {}", entry[0])))?;
        let raw_len = u64::from_le_bytes(entry[2..10].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(entry[10..18].try_into().expect("8 bytes"));
        pos += entry.len() as u64;
        if raw_len > MAX_TABLE_BYTES || len > body_end.saturating_sub(pos) {
            return Err(PayloadError::Layout(format!(
                "table `{}`: {len} bytes ({raw_len} uncompressed) announced, {} left",
                table.name(),
                body_end.saturating_sub(pos)
            )));
        }
        pos += len;
        file.seek(std::io::SeekFrom::Start(pos)).map_err(io)?;
    }
    if pos != body_end {
        return Err(PayloadError::Layout(format!(
            "{} unexpected bytes after the last table",
            body_end - pos
        )));
    }
    Ok(())
}

/// The format version of a payload whose envelope was checked.
fn format_version(bytes: &[u8]) -> u16 {
    u16::from_le_bytes([bytes[4], bytes[5]])
}

/// The header of a payload of format `version`, which must fill `bytes`
/// exactly.
fn decode_header_of(version: u16, bytes: &[u8]) -> Result<PayloadHeader, PayloadError> {
    match version {
        1 => Ok(decode_header::<header::v1::PayloadHeader>(bytes)?.into()),
        2 => decode_header(bytes),
        3 => {
            let (mut header, used) = decode_prefix::<PayloadHeader>(bytes)?;
            let tail: HeaderTailV3 = decode_header(&bytes[used..])?;
            header.encode_ns = tail.encode_ns;
            Ok(header)
        }
        _ => {
            let (mut header, used) = decode_prefix::<PayloadHeader>(bytes)?;
            let tail: HeaderTail = decode_header(&bytes[used..])?;
            header.encode_ns = tail.encode_ns;
            header.window = tail.window;
            Ok(header)
        }
    }
}

/// Decodes an `H` from the start of `bytes`; returns it and the bytes used.
fn decode_prefix<H: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<(H, usize), PayloadError> {
    bincode::serde::decode_from_slice(
        bytes,
        bincode::config::standard().with_limit::<MAX_HEADER_BYTES>(),
    )
    .map_err(PayloadError::HeaderDecode)
}

/// Decodes an `H` that must fill `bytes` exactly.
fn decode_header<H: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<H, PayloadError> {
    let (header, used) = decode_prefix::<H>(bytes)?;
    if used != bytes.len() {
        return Err(PayloadError::Header(format!(
            "{} trailing bytes after the header",
            bytes.len() - used
        )));
    }
    Ok(header)
}

/// Checks magic, version, length and checksum; returns the payload length.
fn check_envelope(bytes: &[u8], limit: u64) -> Result<usize, PayloadError> {
    let found = bytes.len() as u64;
    let total = announced_length(bytes, limit)?;
    if found < total {
        return Err(PayloadError::Truncated {
            expected: total,
            found,
        });
    }
    if found > total {
        return Err(PayloadError::TrailingBytes(found - total));
    }
    let total = total as usize;
    let (body, rest) = bytes[..total].split_at(total - CHECKSUM_BYTES);
    let stored = u32::from_le_bytes(rest.try_into().expect("4 bytes"));
    if crc32fast::hash(body) != stored {
        return Err(PayloadError::ChecksumMismatch);
    }
    Ok(total)
}

/// The length a payload announces in its first 20 bytes (its preamble): checks magic, version, reserved field and that the
/// announced length lies within `limit`, and returns that length. A reader
/// can refuse a file of another size before reading it.
pub fn announced_length(bytes: &[u8], limit: u64) -> Result<u64, PayloadError> {
    let found = bytes.len() as u64;
    if bytes.len() < MAGIC.len() {
        return Err(PayloadError::Truncated {
            expected: PREAMBLE_BYTES as u64,
            found,
        });
    }
    if bytes[..4] != MAGIC {
        return Err(PayloadError::NotAPayload);
    }
    if bytes.len() < PREAMBLE_BYTES {
        return Err(PayloadError::Truncated {
            expected: PREAMBLE_BYTES as u64,
            found,
        });
    }
    let version = format_version(bytes);
    if version == 0 || version > FORMAT_VERSION {
        return Err(PayloadError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let total = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if total < (PREAMBLE_BYTES + CHECKSUM_BYTES) as u64 || total > limit {
        return Err(PayloadError::BadLength(total));
    }
    let reserved = u16::from_le_bytes([bytes[6], bytes[7]]);
    if reserved != 0 {
        return Err(PayloadError::Reserved(reserved));
    }
    Ok(total)
}

/// Reads little-endian fields with bounds checks.
struct ByteReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8], PayloadError> {
        let left = self.bytes.len() - self.pos;
        if len > left {
            return Err(PayloadError::Layout(format!(
                "{what}: {len} bytes announced, {left} left"
            )));
        }
        let slice = &self.bytes[self.pos..self.pos + len];
        self.pos += len;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], PayloadError> {
        Ok(self.take(N, what)?.try_into().expect("N bytes"))
    }

    fn u8(&mut self, what: &str) -> Result<u8, PayloadError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, PayloadError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &str) -> Result<u32, PayloadError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, PayloadError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
}

#[cfg(test)]
mod tests;
