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

use std::collections::{BTreeMap, VecDeque};

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::table::{SchemaMismatch, Table, TableView};

mod codec;
mod decode;
mod delta;
mod encode;
mod header;
mod span;
mod stream;

pub use codec::{EXPANSION_FLOOR, MAX_EXPANSION};
#[cfg(feature = "fuzzing")]
pub use decode::read_table_stream;
pub use decode::{announced_length, check_layout, decode, decode_within};
pub use encode::{encode, encode_as, encode_capped, encode_within};

pub use header::{
    ClockMeta, ClockOffset, ClockSync, DroppedRows, GpuMeta, GpuSource, Overflow, PayloadHeader,
    RankMeta, SamplerStats, SessionMeta, TransportName,
};

/// The four bytes every payload starts with.
pub const MAGIC: [u8; 4] = *b"RSPL";
/// The format version this build writes (and the newest it reads).
/// Versions 1 (no run identity, no measured clock offset), 2 (every
/// column stored as values), 3 (no window in the header) and 4 (no
/// parallel coordinates) are still read.
pub const FORMAT_VERSION: u16 = 5;
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
/// Bytes of the checksum that ends a payload.
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

/// An underlying error of a table's stream: Arrow's, a codec's, or I/O.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

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
        /// The Arrow, codec or I/O error behind it, where there is one.
        #[source]
        source: Option<Cause>,
    },
}

#[cfg(test)]
mod tests;
