//! Columns stored as differences (format version 3). Timestamps and stage
//! ids grow a little from one row to the next; their differences take a
//! byte or two where the values take eight, and compress the better for
//! it: a GPU reading went from 10.96 to 8.05 bytes on the wire this way
//! (BENCHMARKS.md, "Bytes on the wire"). Each such column holds its first
//! value, then each row's difference from the row before, in wrapping
//! arithmetic, so any `u64` sequence comes back exactly.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, UInt64Array};

/// The columns stored as differences, in any table that has them: each a
/// `UInt64` column without nulls.
const DIFFERENCED: &[&str] = &["ts_ns", "start_ns", "end_ns", "stage_id"];

/// `batch` with its [`DIFFERENCED`] columns as differences, for the wire.
pub(super) fn encode(batch: &RecordBatch) -> RecordBatch {
    map_columns(batch, |values| {
        let mut previous = 0u64;
        values
            .iter()
            .map(|&value| {
                let difference = value.wrapping_sub(previous);
                previous = value;
                difference
            })
            .collect()
    })
}

/// `batch`, read from the wire, with its [`DIFFERENCED`] columns summed back
/// into values.
pub(super) fn decode(batch: &RecordBatch) -> RecordBatch {
    map_columns(batch, |differences| {
        let mut value = 0u64;
        differences
            .iter()
            .map(|&difference| {
                value = value.wrapping_add(difference);
                value
            })
            .collect()
    })
}

fn map_columns(batch: &RecordBatch, map: impl Fn(&[u64]) -> Vec<u64>) -> RecordBatch {
    let schema = batch.schema();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(
            |(field, column)| match column.as_primitive_opt::<UInt64Type>() {
                Some(values)
                    if values.null_count() == 0 && DIFFERENCED.contains(&field.name().as_str()) =>
                {
                    Arc::new(UInt64Array::from(map(values.values()))) as ArrayRef
                }
                _ => Arc::clone(column),
            },
        )
        .collect();
    // The row count given: a batch may have rows and no columns.
    let rows = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema, columns, &rows)
        .expect("the batch's own schema, columns of its lengths and nulls")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{StringArray, UInt32Array};
    use arrow_schema::{DataType, Field, Schema};

    #[test]
    fn differenced_columns_round_trip_whatever_their_values() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("ts_ns", DataType::UInt64, false),
            Field::new("memory_used_bytes", DataType::UInt64, false),
            Field::new("gpu", DataType::UInt32, false),
            Field::new("name", DataType::Utf8, false),
        ]));
        let ts = [u64::MAX, 0, 7, 7, 3, 1 << 63];
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt64Array::from(ts.to_vec())),
                Arc::new(UInt64Array::from(ts.to_vec())),
                Arc::new(UInt32Array::from(vec![1, 2, 3, 4, 5, 6])),
                Arc::new(StringArray::from(vec!["a"; 6])),
            ],
        )
        .unwrap();
        let wire = encode(&batch);
        let differences = wire.column(0).as_primitive::<UInt64Type>().values();
        assert_eq!(
            differences[..],
            [u64::MAX, 1, 7, 0, u64::MAX - 3, (1 << 63) - 3],
            "the first value, then wrapping differences"
        );
        assert_eq!(wire.column(1), batch.column(1), "a column not in the list");
        assert_eq!(decode(&wire), batch);
        // A slice (an offset into its buffers) too.
        let slice = batch.slice(2, 3);
        assert_eq!(decode(&encode(&slice)), slice);
        // Rows and no columns.
        let bare = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(3)),
        )
        .unwrap();
        assert_eq!(encode(&bare).num_rows(), 3);
    }
}
