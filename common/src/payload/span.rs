//! A payload's rows within a span of time: what a window keeps of a flush
//! part.

use std::ops::Range;

use arrow_array::{Array, BooleanArray, UInt64Array};
use arrow_schema::ArrowError;

use super::Payload;

/// The columns that time a table's rows, nanoseconds since the session
/// started, the first a table has: a stage's end (when it is recorded, so
/// that a stage open across an edge belongs to the window it ends in, not
/// to neither), a reading's or record's time, a kernel's start.
const TIME_COLUMNS: [&str; 3] = ["end_ns", "ts_ns", "start_ns"];

impl Payload {
    /// The rows of `payload` that happened within `span` (nanoseconds since
    /// the session started, by each table's `end_ns`, `ts_ns` or `start_ns`); the rows of
    /// tables with no time (model parameters, CPU operator totals) all where
    /// `timeless`, none otherwise. What a window keeps of a flush part.
    pub fn rows_within(mut self, span: &Range<u64>, timeless: bool) -> Result<Payload, ArrowError> {
        let mut kept = std::collections::BTreeMap::new();
        for (table, batch) in std::mem::take(&mut self.tables) {
            let schema = batch.schema();
            let time = TIME_COLUMNS
                .iter()
                .find_map(|name| schema.index_of(name).ok())
                .and_then(|i| batch.column(i).as_any().downcast_ref::<UInt64Array>());
            let batch = match time {
                Some(times) => {
                    let within: BooleanArray = times
                        .iter()
                        .map(|t| Some(t.is_some_and(|t| span.contains(&t))))
                        .collect();
                    arrow_select::filter::filter_record_batch(&batch, &within)?
                }
                None if timeless => batch,
                None => continue,
            };
            if batch.num_rows() > 0 {
                kept.insert(table, batch);
            }
        }
        self.tables = kept;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::PayloadHeader;

    #[test]
    fn a_window_keeps_the_rows_of_its_span_and_timeless_rows_where_asked() {
        use crate::table::{
            DiffusionStepRow, DiffusionStepsBuilder, ModelParameterRow, ModelParametersBuilder,
            Table,
        };
        let mut steps = DiffusionStepsBuilder::default();
        for (step, ts_ns) in [(0, 5), (1, 10), (2, 19), (3, 20)] {
            steps.append(&DiffusionStepRow {
                ts_ns,
                step,
                timestep: 0.0,
                block_size: 0,
                computation_ms: 1.0,
                guidance_scale: None,
            });
        }
        let mut params = ModelParametersBuilder::default();
        params.append(&ModelParameterRow {
            name: "unet".into(),
            count: 7,
        });
        let mut payload = Payload {
            header: PayloadHeader::new("job", "t", 0, 1),
            tables: Default::default(),
        };
        payload
            .tables
            .insert(Table::DiffusionSteps, steps.finish().unwrap());
        payload
            .tables
            .insert(Table::ModelParameters, params.finish().unwrap());
        let kept = payload.clone().rows_within(&(10..20), false).unwrap();
        assert_eq!(
            kept.rows(Table::DiffusionSteps),
            2,
            "10 and 19, not 5 or 20"
        );
        assert_eq!(kept.rows(Table::ModelParameters), 0);
        let kept = payload.rows_within(&(0..5), true).unwrap();
        assert_eq!(kept.rows(Table::DiffusionSteps), 0);
        assert!(kept.table(Table::DiffusionSteps).is_none());
        assert_eq!(kept.rows(Table::ModelParameters), 1);
    }
}
