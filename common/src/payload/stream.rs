//! One table's Arrow IPC stream, written ([`write_stream`]) and read from
//! untrusted bytes: the schema, one dictionary per dictionary id, one
//! record batch and the end marker, in that order and nothing else, as
//! this build writes it.
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
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, FieldRef, SchemaRef};

use super::PayloadError;
use crate::table::Table;

/// Reads the one record batch of `table`'s IPC stream `stream`, whose
/// schema must be the table's. The batch's columns are slices of `stream`,
/// which they keep alive.
pub(super) fn read_stream(table: Table, stream: Vec<u8>) -> Result<RecordBatch, PayloadError> {
    let fail = |reason: String| PayloadError::Table {
        table: table.name(),
        reason,
        source: None,
    };
    // Made here, not under the panic guard below: a fault of this build
    // shows as itself.
    let written = written_schema(table);
    // Every buffer of a message lies 8-aligned in its body (checked below),
    // so a body 8-aligned in memory leaves Arrow nothing to copy.
    let stream = if stream.as_ptr().align_offset(8) == 0 {
        Buffer::from_vec(stream)
    } else {
        Buffer::from(stream.as_slice())
    };
    // Checked before Arrow reads it (`read_batch`), but Arrow is not
    // promised to be panic-free on hostile input: a panic that gets past
    // the checks becomes this table's error.
    crate::error::fence(|| read_batch(written, &stream))
        .map_err(|_| fail(malformed("the reader panicked")))?
        .map_err(fail)
}

/// The error of a stream that is not what this build writes.
fn malformed(reason: impl std::fmt::Display) -> String {
    format!("malformed Arrow IPC stream: {reason}")
}

/// The stream's messages in the order this build writes them: the schema,
/// one dictionary per dictionary id, one record batch, the end marker.
/// Each is read as it is framed, so a stream is refused at its first fault.
fn read_batch(written: &WrittenSchema, stream: &Buffer) -> Result<RecordBatch, String> {
    let mut frames = Frames {
        stream: stream.as_slice(),
        pos: 0,
    };
    let first = frames.next().ok_or_else(|| malformed("no schema"))?;
    let schema = schema_of(written, &first?)?;
    let mut dictionaries: HashMap<i64, ArrayRef> = HashMap::new();
    let batch = loop {
        let frame = frames
            .next()
            .ok_or_else(|| malformed("no record batch"))??;
        let body = stream.slice_with_length(frame.body.start, frame.body.len());
        let version = frame.message.version();
        if let Some(dictionary) = frame.message.header_as_dictionary_batch() {
            let id = dictionary.id();
            if dictionary.isDelta() {
                return Err(malformed(format!("a delta dictionary for id {id}")));
            }
            if dictionaries.contains_key(&id) {
                return Err(malformed(format!("a second dictionary for id {id}")));
            }
            let data = dictionary
                .data()
                .ok_or_else(|| malformed(format!("dictionary {id} without data")))?;
            let values = written.dictionary_values(id).ok_or_else(|| {
                malformed(format!("a dictionary for id {id}, which no column has"))
            })?;
            check_batch(&data, frame.body.len())?;
            check_columns(&data, std::slice::from_ref(&values))?;
            read_dictionary(&body, dictionary, &schema, &mut dictionaries, &version)
                .map_err(malformed)?;
        } else if let Some(batch) = frame.message.header_as_record_batch() {
            check_batch(&batch, frame.body.len())?;
            check_columns(&batch, schema.fields())?;
            break read_record_batch(&body, batch, schema.clone(), &dictionaries, None, &version)
                .map_err(malformed)?;
        } else {
            return Err(malformed(format!(
                "unexpected {:?} message",
                frame.message.header_type()
            )));
        }
    };
    match frames.next() {
        None => Ok(batch),
        Some(Err(reason)) => Err(reason),
        Some(Ok(after)) => Err(malformed(format!(
            "a {:?} message after the record batch",
            after.message.header_type()
        ))),
    }
}

/// Checks a batch's message (a record batch's, or a dictionary's data)
/// before Arrow reads it:
/// - its buffers lie inside its body of `body_len` bytes, each 8-aligned
///   (enough for every column type of the tables: see the test
///   `no_column_needs_more_than_8_byte_alignment`). Arrow would copy a
///   misaligned buffer whole, and a hostile message can point many buffers
///   at the same bytes;
/// - its body is not compressed by Arrow (the payload compresses whole
///   streams; Arrow would allocate the sizes a compressed body announces);
/// - it has no variadic buffers (no table has a column that uses them).
fn check_batch(batch: &arrow_ipc::RecordBatch<'_>, body_len: usize) -> Result<(), String> {
    if batch.compression().is_some() {
        return Err(malformed("a body compressed by Arrow"));
    }
    if batch
        .variadicBufferCounts()
        .is_some_and(|counts| !counts.is_empty())
    {
        return Err(malformed("variadic buffers"));
    }
    for buffer in batch.buffers().into_iter().flatten() {
        let (offset, length) = (buffer.offset(), buffer.length());
        let inside = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(length).ok())
            .and_then(|(offset, length)| offset.checked_add(length))
            .is_some_and(|end| end <= body_len);
        if !inside || offset % 8 != 0 {
            return Err(malformed(format!(
                "a buffer of {length} bytes at {offset} in a body of {body_len}"
            )));
        }
    }
    Ok(())
}

/// Checks each column's buffers against its node before Arrow reads them
/// (its reader asserts these, and panics where they fail): the node's null
/// count lies within its rows; a column with nulls has a validity bitmap
/// that covers its rows; each buffer of fixed-width values (numbers,
/// dictionary keys, string offsets) holds a whole number of them, at least
/// as many as the rows need. `fields` are the columns, one node each.
fn check_columns(batch: &arrow_ipc::RecordBatch<'_>, fields: &[FieldRef]) -> Result<(), String> {
    let nodes: Vec<_> = batch.nodes().into_iter().flatten().collect();
    if nodes.len() != fields.len() {
        return Err(malformed(format!(
            "{} column nodes for {} columns",
            nodes.len(),
            fields.len()
        )));
    }
    let mut buffers = batch.buffers().into_iter().flatten();
    for (node, field) in nodes.iter().zip(fields) {
        let column = field.name();
        let rows = usize::try_from(node.length())
            .map_err(|_| malformed(format!("column `{column}` of {} rows", node.length())))?;
        if !(0..=node.length()).contains(&node.null_count()) {
            return Err(malformed(format!(
                "column `{column}`: {} nulls in {rows} rows",
                node.null_count()
            )));
        }
        let mut next = |what: &str| {
            buffers
                .next()
                .map(|b| b.length() as usize)
                .ok_or_else(|| malformed(format!("column `{column}` has no {what} buffer")))
        };
        let validity = next("validity")?;
        if node.null_count() > 0 && validity < rows.div_ceil(8) {
            return Err(malformed(format!(
                "column `{column}`: a validity bitmap of {validity} bytes for {rows} rows"
            )));
        }
        // The fixed-width buffer: bytes per value, and values needed.
        let (width, values) = match field.data_type() {
            // No rows may have no offsets at all.
            DataType::Utf8 if rows == 0 => (4, 0),
            DataType::Utf8 => (4, rows + 1),
            DataType::Dictionary(key, _) => (key.primitive_width().unwrap_or(0), rows),
            DataType::Boolean => (1, rows.div_ceil(8)),
            other => (other.primitive_width().unwrap_or(0), rows),
        };
        let bytes = next("values")?;
        if width == 0 || bytes % width != 0 || bytes / width < values {
            return Err(malformed(format!(
                "column `{column}`: a values buffer of {bytes} bytes for {rows} rows of {}",
                field.data_type()
            )));
        }
        if field.data_type() == &DataType::Utf8 {
            next("string bytes")?;
        }
    }
    Ok(())
}

/// The schema of the stream's first message, which must be the table's.
/// The schema this build writes for the table is parsed once per process.
fn schema_of(written: &WrittenSchema, first: &Framed<'_>) -> Result<SchemaRef, String> {
    let schema = first
        .message
        .header_as_schema()
        .ok_or_else(|| malformed("the first message is not a schema"))?;
    if !first.body.is_empty() {
        return Err(malformed("a schema message with a body"));
    }
    if first.meta == written.meta || same_schema(schema, written.message().header_as_schema()) {
        return Ok(written.schema.clone());
    }
    Err(format!(
        "schema does not match: expected {:?}",
        written
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>()
    ))
}

/// Whether `theirs` declares the columns of `ours` (the schema this build
/// writes): the same names, nullability, types and dictionaries, in order.
/// Compared as flatbuffers, never handed to Arrow's converter, which
/// panics on types and widths it does not support; a type this build does
/// not write is a mismatch.
fn same_schema(theirs: arrow_ipc::Schema<'_>, ours: Option<arrow_ipc::Schema<'_>>) -> bool {
    let (Some(theirs), Some(ours)) = (theirs.fields(), ours.and_then(|s| s.fields())) else {
        return false;
    };
    theirs.len() == ours.len()
        && theirs
            .iter()
            .zip(ours.iter())
            .all(|(a, b)| same_field(a, b))
}

fn same_field(theirs: arrow_ipc::Field<'_>, ours: arrow_ipc::Field<'_>) -> bool {
    let no_children = |f: arrow_ipc::Field<'_>| f.children().is_none_or(|c| c.is_empty());
    let dictionary = match (theirs.dictionary(), ours.dictionary()) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.id() == b.id()
                && a.isOrdered() == b.isOrdered()
                && a.dictionaryKind() == b.dictionaryKind()
                && match (a.indexType(), b.indexType()) {
                    (Some(a), Some(b)) => {
                        a.bitWidth() == b.bitWidth() && a.is_signed() == b.is_signed()
                    }
                    _ => false,
                }
        }
        _ => false,
    };
    theirs.name() == ours.name()
        && theirs.nullable() == ours.nullable()
        && dictionary
        && no_children(theirs)
        && no_children(ours)
        && same_type(theirs, ours)
}

/// The column types the tables use; anything else is no match.
fn same_type(theirs: arrow_ipc::Field<'_>, ours: arrow_ipc::Field<'_>) -> bool {
    use arrow_ipc::Type;
    if theirs.type_type() != ours.type_type() {
        return false;
    }
    match ours.type_type() {
        Type::Int => match (theirs.type_as_int(), ours.type_as_int()) {
            (Some(a), Some(b)) => a.bitWidth() == b.bitWidth() && a.is_signed() == b.is_signed(),
            _ => false,
        },
        Type::FloatingPoint => match (
            theirs.type_as_floating_point(),
            ours.type_as_floating_point(),
        ) {
            (Some(a), Some(b)) => a.precision() == b.precision(),
            _ => false,
        },
        Type::Utf8 | Type::Bool => true,
        _ => false,
    }
}

/// A table's schema message as this build writes it, and the schema Arrow
/// reads from it (with the dictionary ids the writer gave).
struct WrittenSchema {
    meta: Vec<u8>,
    schema: SchemaRef,
}

impl WrittenSchema {
    /// The values of dictionary `id`, as a column of their own.
    fn dictionary_values(&self, id: i64) -> Option<FieldRef> {
        let fields = self.message().header_as_schema()?.fields()?;
        let index = fields
            .iter()
            .position(|f| f.dictionary().is_some_and(|d| d.id() == id))?;
        let field = self.schema.fields().get(index)?;
        match field.data_type() {
            DataType::Dictionary(_, values) => Some(Arc::new(Field::new(
                field.name(),
                values.as_ref().clone(),
                true,
            ))),
            _ => None,
        }
    }

    /// The schema message, as written.
    fn message(&self) -> arrow_ipc::Message<'_> {
        arrow_ipc::root_as_message(&self.meta).expect("this build's schema message is valid")
    }
}

/// `batch` as an Arrow IPC stream, uncompressed.
pub(super) fn write_stream(table: Table, batch: &RecordBatch) -> Result<Vec<u8>, PayloadError> {
    let fail = |e: arrow_schema::ArrowError| PayloadError::Table {
        table: table.name(),
        reason: e.to_string(),
        source: Some(Box::new(e)),
    };
    let mut writer = StreamWriter::try_new(Vec::new(), &batch.schema()).map_err(fail)?;
    writer.write(batch).map_err(fail)?;
    writer.finish().map_err(fail)?;
    writer.into_inner().map_err(fail)
}

fn written_schema(table: Table) -> &'static WrittenSchema {
    static WRITTEN: OnceLock<Vec<WrittenSchema>> = OnceLock::new();
    let written = WRITTEN.get_or_init(|| {
        Table::ALL
            .iter()
            .map(|&table| {
                let stream = write_stream(table, &RecordBatch::new_empty(table.schema()))
                    .expect("an empty batch of a table's own schema is written");
                let first = Frames {
                    stream: &stream,
                    pos: 0,
                }
                .next()
                .expect("a stream starts with its schema")
                .expect("a stream this build wrote is well framed");
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
    &written[table as usize]
}

/// One message of a stream: its metadata, verified as a flatbuffer, and
/// where its body lies.
struct Framed<'a> {
    meta: &'a [u8],
    message: arrow_ipc::Message<'a>,
    body: Range<usize>,
}

/// The messages of a stream up to its end marker, each framed as this
/// build writes them (a continuation marker, then the metadata's length)
/// and its metadata and body checked to lie inside the stream, the body
/// 8-aligned, before it is handed out (Arrow would allocate a message's
/// announced body length first).
struct Frames<'a> {
    stream: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Framed<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.frame().transpose();
        if matches!(item, Some(Err(_))) {
            self.pos = self.stream.len() + 1; // nothing after a fault
        }
        item
    }
}

impl<'a> Frames<'a> {
    const CONTINUATION: [u8; 4] = [0xff; 4];

    /// The next message; `None` at the end marker.
    fn frame(&mut self) -> Result<Option<Framed<'a>>, String> {
        if self.pos > self.stream.len() {
            return Ok(None);
        }
        let Some(meta_len) = self.prefix()? else {
            return Ok(None);
        };
        let pos = self.pos;
        let (meta, message) = self.metadata(pos, meta_len)?;
        let body = self.body(pos + meta_len, &message)?;
        self.pos = body.end;
        Ok(Some(Framed {
            meta,
            message,
            body,
        }))
    }

    /// The 4 bytes at `at`.
    fn word(&self, at: usize) -> Result<[u8; 4], String> {
        self.stream
            .get(at..at.saturating_add(4))
            .map(|w| w.try_into().expect("4 bytes"))
            .ok_or_else(|| {
                malformed(format!(
                    "message header at byte {at} runs past the end (no end marker)"
                ))
            })
    }

    /// Reads the continuation marker and the metadata's length that open a
    /// message: the length, or `None` at the end marker (nothing may follow
    /// it).
    fn prefix(&mut self) -> Result<Option<usize>, String> {
        let stream = self.stream;
        if self.word(self.pos)? != Self::CONTINUATION {
            return Err(malformed(format!(
                "no continuation marker at byte {}",
                self.pos
            )));
        }
        let meta_len = i32::from_le_bytes(self.word(self.pos + 4)?);
        self.pos += 8;
        if meta_len == 0 {
            let after = stream.len().saturating_sub(self.pos);
            self.pos = stream.len() + 1;
            return match after {
                0 => Ok(None),
                _ => Err(malformed(format!("{after} bytes after the end marker"))),
            };
        }
        usize::try_from(meta_len)
            .map(Some)
            .map_err(|_| malformed(format!("negative metadata length {meta_len}")))
    }

    /// The `meta_len` bytes of metadata at `pos`, and the message they
    /// verify as.
    fn metadata(
        &self,
        pos: usize,
        meta_len: usize,
    ) -> Result<(&'a [u8], arrow_ipc::Message<'a>), String> {
        let meta = self
            .stream
            .get(pos..pos.saturating_add(meta_len))
            .ok_or_else(|| {
                malformed(format!(
                    "metadata of {meta_len} bytes at byte {pos} runs past the end"
                ))
            })?;
        let message = arrow_ipc::root_as_message(meta)
            .map_err(|e| malformed(format!("message at byte {pos}: {e}")))?;
        Ok((meta, message))
    }

    /// Where the body of `message` lies, from byte `start`: inside the
    /// stream, and 8-aligned.
    fn body(&self, start: usize, message: &arrow_ipc::Message<'_>) -> Result<Range<usize>, String> {
        let left = self.stream.len() - start;
        let body_len = usize::try_from(message.bodyLength())
            .ok()
            .filter(|&len| len <= left)
            .ok_or_else(|| {
                malformed(format!(
                    "message body of {} bytes at byte {start}, {left} left",
                    message.bodyLength(),
                ))
            })?;
        let body = start..start + body_len;
        // Buffers are checked 8-aligned within their body; the body itself
        // must be, within a stream that is.
        if body.start % 8 != 0 {
            return Err(malformed(format!("a body at byte {}", body.start)));
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{StageRow, StagesBuilder};
    use arrow_schema::DataType;

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

    fn written(batch: &RecordBatch) -> Vec<u8> {
        write_stream(Table::Stages, batch).unwrap()
    }

    /// The bytes of each message of a well-framed `stream`, its prefix
    /// included, and the end marker last.
    fn messages(stream: &[u8]) -> Vec<Vec<u8>> {
        let mut frames = Frames { stream, pos: 0 };
        let mut out = Vec::new();
        loop {
            let start = frames.pos;
            match frames.next() {
                Some(frame) => {
                    frame.unwrap();
                    out.push(stream[start..frames.pos].to_vec());
                }
                None => {
                    out.push(stream[start..].to_vec());
                    return out;
                }
            }
        }
    }

    fn error_of(stream: Vec<u8>) -> String {
        read_stream(Table::Stages, stream).unwrap_err().to_string()
    }

    #[test]
    fn every_table_has_its_written_schema() {
        for &table in Table::ALL {
            let written = written_schema(table);
            assert_eq!(
                written.schema.fields(),
                table.schema().fields(),
                "{table:?}"
            );
        }
    }

    #[test]
    fn a_stream_this_build_wrote_is_read_back_without_parsing_its_schema_again() {
        let batch = stages();
        let read = read_stream(Table::Stages, written(&batch)).unwrap();
        assert_eq!(read, batch);
        assert!(Arc::ptr_eq(
            &read.schema(),
            &written_schema(Table::Stages).schema
        ));
    }

    /// A table of no rows, as Arrow writes it (string columns with no
    /// offsets at all), reads back.
    #[test]
    fn a_table_of_no_rows_reads_back() {
        let empty = RecordBatch::new_empty(Table::Stages.schema());
        let read = read_stream(Table::Stages, written(&empty)).unwrap();
        assert_eq!(read.num_rows(), 0);
    }

    #[test]
    fn a_schema_written_otherwise_is_compared_and_must_match() {
        // The same fields, with metadata this build does not write: other
        // bytes, the same columns, read with this build's schema (compared
        // field by field, never parsed by Arrow).
        let batch = stages();
        let mut schema = batch.schema().as_ref().clone();
        schema.metadata.insert("writer".into(), "another".into());
        let other = written(&batch.clone().with_schema(Arc::new(schema)).unwrap());
        assert_ne!(other, written(&batch), "other bytes");
        let read = read_stream(Table::Stages, other.clone()).unwrap();
        assert_eq!(read.columns(), batch.columns());
        assert!(Arc::ptr_eq(
            &read.schema(),
            &written_schema(Table::Stages).schema
        ));
        // Read as another table, its fields differ.
        let err = read_stream(Table::Events, other).unwrap_err().to_string();
        assert!(err.contains("schema does not match"), "{err}");
    }

    #[test]
    fn no_column_needs_more_than_8_byte_alignment() {
        // What `check_batch` assumes: a new column type that needs more
        // (a 128-bit decimal, say) must come with a check of its own.
        fn widest(data_type: &DataType) -> usize {
            match data_type {
                DataType::Dictionary(key, value) => widest(key).max(widest(value)),
                DataType::Utf8 => 4,
                other => other
                    .primitive_width()
                    .unwrap_or_else(|| panic!("{other} is not checked here")),
            }
        }
        for &table in Table::ALL {
            for field in table.schema().fields() {
                assert!(widest(field.data_type()) <= 8, "{table:?} {field}");
            }
        }
    }

    #[test]
    fn the_columns_read_are_slices_of_the_stream() {
        let stream = written(&stages());
        let range = stream.as_ptr_range();
        let inside = (range.start as usize)..(range.end as usize);
        let read = read_stream(Table::Stages, stream).unwrap();
        // Every buffer: values, offsets, validity, and the dictionaries'.
        fn buffers(data: &arrow_data::ArrayData) -> Vec<usize> {
            let own = data.buffers().iter().map(|b| b.as_ptr() as usize);
            let nulls = data.nulls().map(|n| n.buffer().as_ptr() as usize);
            let children = data.child_data().iter().flat_map(buffers);
            own.chain(nulls).chain(children).collect()
        }
        for column in read.columns() {
            for at in buffers(&column.to_data()) {
                assert!(inside.contains(&at), "{:?}", column.data_type());
            }
        }
    }

    #[test]
    fn messages_out_of_the_written_order_are_refused() {
        // schema, two dictionaries (name, thread_name), the batch, the end.
        let parts = messages(&written(&stages()));
        assert_eq!(parts.len(), 5);
        let join =
            |order: &[usize]| -> Vec<u8> { order.iter().flat_map(|&i| parts[i].clone()).collect() };
        let cases: [(&[usize], &str); 7] = [
            (&[4], "no schema"),
            (&[3, 4], "the first message is not a schema"),
            (&[0, 1, 2, 4], "no record batch"),
            (&[0, 0, 1, 2, 3, 4], "unexpected Schema message"),
            (&[0, 1, 1, 2, 3, 4], "a second dictionary for id"),
            (
                &[0, 1, 2, 3, 3, 4],
                "a RecordBatch message after the record batch",
            ),
            (
                &[0, 1, 2, 3, 2, 4],
                "a DictionaryBatch message after the record batch",
            ),
        ];
        for (order, expected) in cases {
            let err = error_of(join(order));
            assert!(err.contains(expected), "{order:?}: {err}");
        }
        let err = error_of(join(&[0, 3, 4]));
        assert!(err.contains("Cannot find a dictionary batch"), "{err}");
        assert!(read_stream(Table::Stages, join(&[0, 1, 2, 3, 4])).is_ok());
    }

    /// `part`, a record batch message, with the offset and length of its
    /// first buffer of at least 8 bytes changed by `change`; also that
    /// buffer's offset and length as written.
    fn with_a_buffer(
        part: &[u8],
        change: impl Fn(i64, i64) -> (i64, i64),
    ) -> (Vec<u8>, (i64, i64)) {
        let meta_len = i32::from_le_bytes(part[4..8].try_into().unwrap()) as usize;
        let message = arrow_ipc::root_as_message(&part[8..8 + meta_len]).unwrap();
        let buffers = message.header_as_record_batch().unwrap().buffers().unwrap();
        let buffer = buffers.iter().find(|b| b.length() >= 8).unwrap();
        // The buffer's place in the metadata: a flatbuffer struct is read
        // where it lies.
        let at = buffer as *const arrow_ipc::Buffer as usize - part.as_ptr() as usize;
        let written = (buffer.offset(), buffer.length());
        let (offset, length) = change(written.0, written.1);
        let mut part = part.to_vec();
        part[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        part[at + 8..at + 16].copy_from_slice(&length.to_le_bytes());
        (part, written)
    }

    #[test]
    fn buffers_outside_their_body_or_misaligned_are_refused() {
        let parts = messages(&written(&stages()));
        let with_batch = |batch: Vec<u8>| -> Vec<u8> {
            [&parts[0][..], &parts[1], &parts[2], &batch, &parts[4]].concat()
        };
        let body = |part: &[u8]| {
            let meta_len = i32::from_le_bytes(part[4..8].try_into().unwrap()) as i64;
            part.len() as i64 - 8 - meta_len
        };
        let body_len = body(&parts[3]);
        let (past, (offset, _)) = with_a_buffer(&parts[3], |offset, _| (offset, body_len));
        let err = error_of(with_batch(past));
        let expected = format!("a buffer of {body_len} bytes at {offset} in a body of {body_len}");
        assert!(err.contains(&expected), "{err}");
        // 4 bytes further on, 4 bytes shorter: inside the body, off the grid.
        let (misaligned, (offset, length)) =
            with_a_buffer(&parts[3], |offset, length| (offset + 4, length - 4));
        let err = error_of(with_batch(misaligned));
        let expected = format!(
            "a buffer of {} bytes at {} in a body of {body_len}",
            length - 4,
            offset + 4
        );
        assert!(err.contains(&expected), "{err}");
        // The metadata padded by 4 bytes: the body starts off the 8-byte grid.
        let meta_len = i32::from_le_bytes(parts[3][4..8].try_into().unwrap()) as usize;
        let mut shifted = parts[3][..8 + meta_len].to_vec();
        shifted.extend_from_slice(&[0; 4]);
        shifted.extend_from_slice(&parts[3][8 + meta_len..]);
        shifted[4..8].copy_from_slice(&(meta_len as i32 + 4).to_le_bytes());
        let err = error_of(with_batch(shifted));
        assert!(err.contains("a body at byte"), "{err}");
    }

    #[test]
    fn framing_faults_are_named() {
        let stream = written(&stages());
        let cases: [(Vec<u8>, &str); 6] = [
            (stream[..stream.len() - 8].to_vec(), "no end marker"),
            (stream[..stream.len() - 20].to_vec(), "message body of"),
            (
                [0xff, 0xff, 0xff, 0xff, 0xf0, 0xff, 0xff, 0xff].to_vec(),
                "negative metadata length",
            ),
            (
                [stream.as_slice(), &[0; 3]].concat(),
                "3 bytes after the end marker",
            ),
            // Framing from before Arrow 0.15: no continuation marker.
            (stream[4..].to_vec(), "no continuation marker at byte 0"),
            (Vec::new(), "runs past the end"),
        ];
        for (bytes, expected) in cases {
            let err = error_of(bytes);
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }
}
