//! Encoding a [`Payload`]: the preamble, the header, each table as a
//! compressed Arrow IPC stream, the checksum; and [`encode_capped`], which
//! cuts rows until the payload fits its limits.

use super::codec::{codec_id, compress, expansion_allowed};
use super::decode::decode_header_of;
use super::header::{HeaderTail, HeaderTailV3, HeaderTailV4};
use super::stream::write_stream;
use super::{
    delta, Compression, Limits, Payload, PayloadError, PayloadHeader, CHECKSUM_BYTES,
    FORMAT_VERSION, MAGIC, MAX_HEADER_BYTES, PREAMBLE_BYTES,
};
use crate::table::Table;

/// Encodes a payload within the default [`Limits`].
pub fn encode(payload: &Payload, compression: Compression) -> Result<Vec<u8>, PayloadError> {
    encode_within(payload, compression, &Limits::DEFAULT)
}

/// Encodes a payload: header, then one compressed Arrow IPC stream per
/// non-empty table, then the checksum. Refuses (with
/// [`PayloadError::TableTooLarge`], [`PayloadError::TooLarge`] or a header
/// error) to write what [`decode_within`](super::decode_within) would refuse to read.
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
        4 => bincode::serde::encode_to_vec(
            HeaderTailV4 {
                encode_ns,
                window: header.window.clone(),
            },
            config,
        ),
        _ => bincode::serde::encode_to_vec(
            HeaderTail {
                encode_ns,
                window: header.window.clone(),
                parallel: header.parallel.clone(),
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
            source: Some(Box::new(e)),
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
