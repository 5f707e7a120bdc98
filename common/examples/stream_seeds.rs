//! Writes seeds for the `stream` fuzz target into DIR (`scripts/fuzz.sh`):
//! for each table, the table's index byte followed by the Arrow IPC stream
//! of a batch of its schema, written as the payload writes a table's
//! stream: an empty batch of every table, and one of stage rows (with
//! dictionaries, nulls and text).
//!
//! `cargo run -p rankscope-common --example stream_seeds -- DIR`

use std::path::PathBuf;

use arrow_array::RecordBatch;
use arrow_ipc::writer::StreamWriter;
use rankscope_common::table::{StageRow, StagesBuilder, Table};

fn stream(batch: &RecordBatch) -> Result<Vec<u8>, arrow_schema::ArrowError> {
    let mut writer = StreamWriter::try_new(Vec::new(), &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    writer.into_inner()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: stream_seeds DIR")?);
    std::fs::create_dir_all(&dir)?;
    let mut seeds: Vec<(usize, RecordBatch)> = Table::ALL
        .iter()
        .enumerate()
        .map(|(at, &table)| (at, RecordBatch::new_empty(table.schema())))
        .collect();
    let mut stages = StagesBuilder::default();
    for i in 0..4u64 {
        stages.append(&StageRow {
            name: ["decode", "step"][i as usize % 2].into(),
            thread: 0,
            thread_name: "main".into(),
            stage_id: i + 1,
            parent_id: (i > 0).then_some(1),
            depth: u32::from(i > 0),
            start_ns: i * 10,
            end_ns: i * 10 + 5,
            call_index: i as u32 / 2,
            metadata: (i == 2).then(|| r#"{"batch": 8}"#.to_string()),
        });
    }
    seeds.push((Table::Stages as usize, stages.finish()?));
    for (n, (at, batch)) in seeds.iter().enumerate() {
        let mut bytes = vec![*at as u8];
        bytes.extend(stream(batch)?);
        std::fs::write(dir.join(format!("seed-{n}")), bytes)?;
    }
    Ok(())
}
