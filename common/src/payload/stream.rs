//! One table's Arrow IPC stream, read from untrusted bytes: one schema
//! message, the dictionaries, one record batch.
//!
//! The messages are walked here rather than by Arrow's `StreamReader`, for
//! three reasons. Each message's metadata and body are checked to lie
//! inside the stream before Arrow sees them (the reader would allocate a
//! message's announced body length first). The columns are slices of the
//! decompressed stream, not copies of it. And a schema message whose bytes
//! are the ones this build writes for the table is not parsed again: at a
//! thousand ranks, parsing the same few schemas took a tenth of the
//! aggregation's time.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_ipc::reader::{read_dictionary, read_record_batch};
use arrow_schema::SchemaRef;

use super::PayloadError;
use crate::table::Table;

/// Reads the one record batch of `table`'s IPC stream `stream`, whose
/// schema must be the table's. The batch's columns share `stream`'s memory.
pub(super) fn read_stream(table: Table, stream: Vec<u8>) -> Result<RecordBatch, PayloadError> {
    let fail = |reason: String| PayloadError::Table {
        table: table.name(),
        reason,
    };
    let stream = Buffer::from_vec(stream);
    // Arrow validates what it reads, but is not promised to be panic-free
    // on hostile input: a panic becomes this table's error.
    crate::error::catch_quietly(|| read_batch(table, &stream))
        .map_err(|_| fail("malformed Arrow IPC stream (reader panicked)".into()))?
        .map_err(fail)
}

fn read_batch(table: Table, stream: &Buffer) -> Result<RecordBatch, String> {
    let malformed = |e: arrow_schema::ArrowError| format!("malformed Arrow IPC stream: {e}");
    let mut messages = messages(stream.as_slice())
        .map_err(|reason| format!("malformed Arrow IPC stream: {reason}"))?
        .into_iter();
    let schema = match messages.next() {
        Some(first) => schema_of(table, &first)?,
        None => return Err("malformed Arrow IPC stream: no schema".into()),
    };
    let mut dictionaries: HashMap<i64, ArrayRef> = HashMap::new();
    let mut batches = Vec::new();
    for message in messages {
        let body = stream.slice_with_length(message.body.start, message.body.len());
        let version = message.message.version();
        let header = message.message.header_type();
        if let Some(dictionary) = message.message.header_as_dictionary_batch() {
            read_dictionary(&body, dictionary, &schema, &mut dictionaries, &version)
                .map_err(malformed)?;
        } else if let Some(batch) = message.message.header_as_record_batch() {
            batches.push(
                read_record_batch(&body, batch, schema.clone(), &dictionaries, None, &version)
                    .map_err(malformed)?,
            );
        } else {
            return Err(format!(
                "malformed Arrow IPC stream: unexpected {header:?} message"
            ));
        }
    }
    match <[RecordBatch; 1]>::try_from(batches) {
        Ok([batch]) => Ok(batch),
        Err(batches) => Err(format!(
            "expected one record batch, found {}",
            batches.len()
        )),
    }
}

/// The schema of the stream's first message, which must be `table`'s. The
/// schema this build writes for the table is parsed once per process.
fn schema_of(table: Table, first: &Message<'_>) -> Result<SchemaRef, String> {
    let written = written_schema(table);
    if first.meta == written.meta {
        return Ok(written.schema.clone());
    }
    let schema = first
        .message
        .header_as_schema()
        .map(|schema| Arc::new(arrow_ipc::convert::fb_to_schema(schema)))
        .ok_or("malformed Arrow IPC stream: the first message is not a schema")?;
    if schema.fields() != written.schema.fields() {
        return Err(format!(
            "schema does not match: expected {:?}",
            written
                .schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
        ));
    }
    Ok(schema)
}

/// A table's schema message as this build writes it, and the schema Arrow
/// reads from it (with the dictionary ids the writer gave).
struct WrittenSchema {
    meta: Vec<u8>,
    schema: SchemaRef,
}

fn written_schema(table: Table) -> &'static WrittenSchema {
    static WRITTEN: OnceLock<Vec<WrittenSchema>> = OnceLock::new();
    let written = WRITTEN.get_or_init(|| {
        Table::ALL
            .iter()
            .map(|&table| {
                let stream = super::write_stream(table, &RecordBatch::new_empty(table.schema()))
                    .expect("an empty batch of a table's own schema is written");
                let first = messages(&stream)
                    .expect("a stream this build wrote is well framed")
                    .swap_remove(0);
                let schema = first
                    .message
                    .header_as_schema()
                    .map(arrow_ipc::convert::fb_to_schema)
                    .expect("the first message written is the schema");
                WrittenSchema {
                    meta: first.meta.to_vec(),
                    schema: Arc::new(schema),
                }
            })
            .collect()
    });
    &written[Table::ALL
        .iter()
        .position(|&t| t == table)
        .expect("every table is in Table::ALL")]
}

/// One message of a stream: its metadata, verified as a flatbuffer, and
/// where its body lies.
struct Message<'a> {
    meta: &'a [u8],
    message: arrow_ipc::Message<'a>,
    body: Range<usize>,
}

/// The messages of `stream` up to its end marker, each one's metadata and
/// body checked to lie inside the stream.
fn messages(stream: &[u8]) -> Result<Vec<Message<'_>>, String> {
    const CONTINUATION: [u8; 4] = [0xff; 4];
    let word = |at: usize| -> Result<[u8; 4], String> {
        stream
            .get(at..at.saturating_add(4))
            .map(|w| w.try_into().expect("4 bytes"))
            .ok_or_else(|| format!("message header at byte {at} runs past the end"))
    };
    let mut messages = Vec::new();
    let mut pos = 0usize;
    loop {
        let mut first = word(pos)?;
        if first == CONTINUATION {
            pos += 4;
            first = word(pos)?;
        }
        pos += 4;
        let meta_len = i32::from_le_bytes(first);
        if meta_len == 0 {
            return Ok(messages); // the end marker
        }
        let meta_len = usize::try_from(meta_len)
            .map_err(|_| format!("negative metadata length {meta_len}"))?;
        let meta = stream
            .get(pos..pos.saturating_add(meta_len))
            .ok_or_else(|| {
                format!("metadata of {meta_len} bytes at byte {pos} runs past the end")
            })?;
        let message =
            arrow_ipc::root_as_message(meta).map_err(|e| format!("message at byte {pos}: {e}"))?;
        let body_len = usize::try_from(message.bodyLength())
            .map_err(|_| format!("negative body length at byte {pos}"))?;
        pos += meta_len;
        if body_len > stream.len() - pos {
            return Err(format!(
                "message body of {body_len} bytes at byte {pos}, {} left",
                stream.len() - pos
            ));
        }
        messages.push(Message {
            meta,
            message,
            body: pos..pos + body_len,
        });
        pos += body_len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{StageRow, StagesBuilder};

    fn stages() -> RecordBatch {
        let mut builder = StagesBuilder::default();
        builder.append(&StageRow {
            name: "decode".into(),
            thread: 0,
            thread_name: "main".into(),
            stage_id: 1,
            parent_id: None,
            depth: 0,
            start_ns: 10,
            end_ns: 20,
            call_index: 0,
            metadata: None,
        });
        builder.finish().unwrap()
    }

    #[test]
    fn a_stream_this_build_wrote_is_read_back_without_parsing_its_schema_again() {
        let batch = stages();
        let stream = super::super::write_stream(Table::Stages, &batch).unwrap();
        let first = messages(&stream).unwrap().swap_remove(0);
        assert_eq!(first.meta, written_schema(Table::Stages).meta);
        let read = read_stream(Table::Stages, stream).unwrap();
        assert_eq!(read, batch);
    }

    #[test]
    fn a_schema_written_otherwise_is_parsed_and_must_match() {
        // The same fields, with metadata this build does not write: other
        // bytes, the same schema.
        let batch = stages();
        let mut schema = batch.schema().as_ref().clone();
        schema.metadata.insert("writer".into(), "another".into());
        let other = batch.clone().with_schema(Arc::new(schema)).unwrap();
        let stream = super::super::write_stream(Table::Stages, &other).unwrap();
        let read = read_stream(Table::Stages, stream).unwrap();
        assert_eq!(read.columns(), batch.columns());
        // Another table's schema is refused by name.
        let stream = super::super::write_stream(Table::Stages, &other).unwrap();
        let err = read_stream(Table::Events, stream).unwrap_err().to_string();
        assert!(err.contains("schema does not match"), "{err}");
    }
}
