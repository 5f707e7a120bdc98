//! Decoding a [`Payload`] from untrusted bytes: the envelope (magic,
//! version, length, checksum) checked first, then the header and each
//! table, every length bounded; and [`check_layout`], the same walk over a
//! file before it is read whole.

use std::collections::BTreeMap;

#[cfg(feature = "fuzzing")]
use arrow_array::RecordBatch;

use super::codec::{decompress, lengths_fit};
use super::header::{self, HeaderTail, HeaderTailV3, HeaderTailV4};
use super::stream::read_stream;
use super::{
    delta, Limits, Payload, PayloadError, PayloadHeader, CHECKSUM_BYTES, FORMAT_VERSION, MAGIC,
    MAX_HEADER_BYTES, MAX_TABLE_BYTES, PREAMBLE_BYTES,
};
use crate::table::Table;

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
        let stream = decompress(codec, compressed, raw_len, limits.table_bytes).map_err(|e| {
            PayloadError::Table {
                table: table.name(),
                reason: e.to_string(),
                source: Some(Box::new(e)),
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
        if let Err(e) = lengths_fit(len, raw_len) {
            return Err(PayloadError::Layout(format!(
                "table `{}`: {e}",
                table.name()
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
pub(super) fn format_version(bytes: &[u8]) -> u16 {
    u16::from_le_bytes([bytes[4], bytes[5]])
}

/// The header of a payload of format `version`, which must fill `bytes`
/// exactly.
pub(super) fn decode_header_of(version: u16, bytes: &[u8]) -> Result<PayloadHeader, PayloadError> {
    match version {
        1 => Ok(decode_header::<header::v1::PayloadHeader>(bytes)?.into()),
        2 => decode_header(bytes),
        3 => {
            let (mut header, used) = decode_prefix::<PayloadHeader>(bytes)?;
            let tail: HeaderTailV3 = decode_header(&bytes[used..])?;
            header.encode_ns = tail.encode_ns;
            Ok(header)
        }
        4 => {
            let (mut header, used) = decode_prefix::<PayloadHeader>(bytes)?;
            let tail: HeaderTailV4 = decode_header(&bytes[used..])?;
            header.encode_ns = tail.encode_ns;
            header.window = tail.window;
            Ok(header)
        }
        _ => {
            let (mut header, used) = decode_prefix::<PayloadHeader>(bytes)?;
            let tail: HeaderTail = decode_header(&bytes[used..])?;
            header.encode_ns = tail.encode_ns;
            header.window = tail.window;
            // Coordinates as a trace's groups give them, or none.
            if crate::parallel::are_valid(&tail.parallel) {
                header.parallel = tail.parallel;
            }
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
