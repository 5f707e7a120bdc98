//! `raw/`: every row every rank recorded, one Arrow IPC file per table
//! (`raw/stages.arrow`, `raw/gpu_samples.arrow`, ...) with a `rank` column
//! first; dictionary-encoded names are written as plain strings, so that
//! pyarrow, polars and DuckDB read the files as they are. Rows are appended
//! a rank at a time, as payloads come.

use std::collections::btree_map::{BTreeMap, Entry};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array};
use arrow_ipc::writer::FileWriter;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use rankscope_common::file::AtomicFile;
use rankscope_common::{Payload, Table};

use crate::model::TimeAccount;

use super::WriteError;

/// The folder of the raw files inside the session directory.
pub const RAW_DIR: &str = "raw";

/// One open file per table that has rows.
pub struct RawWriter {
    dir: PathBuf,
    files: BTreeMap<Table, (PathBuf, FileWriter<BufWriter<AtomicFile>>)>,
}

/// `source` as the write error of `path`.
fn failed(path: &Path, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> WriteError {
    WriteError {
        path: path.to_path_buf(),
        source: std::io::Error::other(source),
    }
}

/// Removes the raw files in `dir` of the tables `which` picks.
pub fn remove_raw_files(dir: &Path, which: impl Fn(Table) -> bool) -> Result<(), WriteError> {
    for &table in Table::ALL.iter().filter(|&&t| which(t)) {
        let path = dir.join(file_name(table));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(WriteError { path, source: e });
            }
            _ => {}
        }
    }
    Ok(())
}

/// The name of `table`'s raw file.
fn file_name(table: Table) -> String {
    format!("{}.arrow", table.name())
}

/// The schema of `table`'s raw file: `rank`, then the table's columns with
/// dictionaries as plain strings.
fn raw_schema(table: Table) -> SchemaRef {
    let mut fields = vec![Arc::new(Field::new("rank", DataType::UInt32, false))];
    fields.extend(
        table
            .schema()
            .fields()
            .iter()
            .map(|field| match field.data_type() {
                DataType::Dictionary(_, values) => Arc::new(Field::new(
                    field.name(),
                    values.as_ref().clone(),
                    field.is_nullable(),
                )),
                _ => field.clone(),
            }),
    );
    Arc::new(Schema::new(fields))
}

/// `batch` of `rank` in its raw file's schema.
fn raw_batch(rank: u32, batch: &RecordBatch, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
    let mut columns: Vec<ArrayRef> =
        vec![Arc::new(UInt32Array::from(vec![rank; batch.num_rows()]))];
    for column in batch.columns() {
        columns.push(match column.as_any_dictionary_opt() {
            Some(dictionary) => {
                arrow_select::take::take(dictionary.values(), dictionary.keys(), None)?
            }
            None => column.clone(),
        });
    }
    RecordBatch::try_new(schema, columns)
}

/// One rank's tables in the raw files' schemas, made on any thread and
/// written by [`RawWriter::add`]; and what had to be left out.
pub struct RankBatches {
    batches: Vec<(Table, RecordBatch)>,
    /// The tables left out, named: a table whose schema is not the current
    /// one (a payload of another version) cannot share its file.
    pub left_out: Vec<String>,
}

/// The tables of `payload` in the raw files' schemas.
pub fn rank_batches(payload: &Payload) -> RankBatches {
    let rank = payload.header.rank.rank;
    let mut out = RankBatches {
        batches: Vec::new(),
        left_out: Vec::new(),
    };
    for (&table, batch) in &payload.tables {
        let why = if batch.schema() != table.schema() {
            "is of another schema".to_string()
        } else {
            match raw_batch(rank, batch, raw_schema(table)) {
                Ok(raw) => {
                    out.batches.push((table, raw));
                    continue;
                }
                Err(e) => format!("could not be converted ({e})"),
            }
        };
        out.left_out.push(format!(
            "the {} table {why}: not in {RAW_DIR}/",
            table.name()
        ));
    }
    out
}

impl RawWriter {
    /// Writes into `dir` (made if missing).
    pub fn new(dir: &Path) -> Result<Self, WriteError> {
        std::fs::create_dir_all(dir).map_err(|source| WriteError {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(RawWriter {
            dir: dir.to_path_buf(),
            files: BTreeMap::new(),
        })
    }

    /// Appends the batches [`rank_batches`] made of a rank's payload.
    pub fn add(&mut self, batches: RankBatches) -> Result<(), WriteError> {
        for (table, raw) in batches.batches {
            let (path, writer) = match self.files.entry(table) {
                Entry::Occupied(open) => open.into_mut(),
                Entry::Vacant(slot) => {
                    let path = self.dir.join(file_name(table));
                    let file = AtomicFile::create(&path).map_err(|e| failed(&path, e))?;
                    let writer = FileWriter::try_new(BufWriter::new(file), &raw_schema(table))
                        .map_err(|e| failed(&path, e))?;
                    slot.insert((path, writer))
                }
            };
            writer.write(&raw).map_err(|e| failed(path, e))?;
        }
        Ok(())
    }

    /// The folder the files go into.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Closes every file and puts it in place; returns their paths.
    /// Completes every file, then puts them all in place and removes the
    /// raw files of tables this report has none of (an earlier report's in
    /// the same folder); returns the paths. A file that fails to complete
    /// leaves every earlier file where it was.
    pub fn finish(mut self) -> Result<Vec<PathBuf>, WriteError> {
        let mut complete = Vec::new();
        for (table, (path, mut writer)) in std::mem::take(&mut self.files) {
            writer.finish().map_err(|e| failed(&path, e))?;
            let file = writer.into_inner().map_err(|e| failed(&path, e))?;
            let file = file
                .into_inner()
                .map_err(|e| failed(&path, e.into_error()))?;
            complete.push((table, path, file));
        }
        let paths: Vec<PathBuf> = complete.iter().map(|(_, path, _)| path.clone()).collect();
        let written: Vec<Table> = complete.iter().map(|(table, ..)| *table).collect();
        for (_, path, file) in complete {
            file.commit().map_err(|e| failed(&path, e))?;
        }
        remove_raw_files(&self.dir, |table| !written.contains(&table))?;
        Ok(paths)
    }
}

impl Drop for RawWriter {
    /// Removes the folder when nothing was put in it: a write that failed
    /// (each unfinished file removes itself) or a session with no rows.
    fn drop(&mut self) {
        self.files.clear();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The time account's raw file, in `raw/`.
pub const ACCOUNT_FILE: &str = "time_account.arrow";

/// Writes `raw/time_account.arrow` into `dir` (made where missing): a row
/// per rank and category (`rank`, `category`, `seconds`: null where not
/// measured), and the job's rows with a null `rank`.
pub fn write_account(account: &TimeAccount, dir: &Path) -> Result<PathBuf, WriteError> {
    let path = dir.join(ACCOUNT_FILE);
    std::fs::create_dir_all(dir).map_err(|source| WriteError {
        path: dir.to_path_buf(),
        source,
    })?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("rank", DataType::UInt32, true),
        Field::new("category", DataType::Utf8, false),
        Field::new("seconds", DataType::Float64, true),
    ]));
    let entries = account
        .ranks
        .iter()
        .map(|r| (Some(r.rank), &r.categories))
        .chain(std::iter::once((None, &account.job.categories)));
    let (mut ranks, mut categories, mut seconds) = (Vec::new(), Vec::new(), Vec::new());
    for (rank, of) in entries {
        for (category, s) in of.iter() {
            ranks.push(rank);
            categories.push(category.as_str());
            seconds.push(s);
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(ranks)),
        Arc::new(StringArray::from(categories)),
        Arc::new(Float64Array::from(seconds)),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| failed(&path, e))?;
    let file = AtomicFile::create(&path).map_err(|source| WriteError {
        path: path.clone(),
        source,
    })?;
    let mut writer =
        FileWriter::try_new(BufWriter::new(file), &schema).map_err(|e| failed(&path, e))?;
    writer.write(&batch).map_err(|e| failed(&path, e))?;
    writer.finish().map_err(|e| failed(&path, e))?;
    let out = writer.into_inner().map_err(|e| failed(&path, e))?;
    out.into_inner()
        .map_err(|e| failed(&path, e.into_error()))?
        .commit()
        .map_err(|source| WriteError {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_ipc::reader::FileReader;
    use rankscope_common::table::{StageRow, StagesBuilder};
    use rankscope_common::PayloadHeader;
    use std::fs::File;

    fn rank_with(names: &[&str], rank: u32) -> Payload {
        let mut stages = StagesBuilder::default();
        for (i, name) in names.iter().enumerate() {
            stages.append(&StageRow {
                name: (*name).into(),
                thread: 0,
                thread_name: "main".into(),
                stage_id: i as u64,
                parent_id: None,
                depth: 0,
                start_ns: i as u64,
                end_ns: i as u64 + 1,
                call_index: 0,
                metadata: None,
            });
        }
        let mut payload = Payload {
            header: PayloadHeader::new("s", "n", rank, 2),
            tables: Default::default(),
        };
        payload
            .tables
            .insert(Table::Stages, stages.finish().unwrap());
        payload
    }

    #[test]
    fn ranks_with_different_dictionaries_share_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut raw = RawWriter::new(dir.path()).unwrap();
        raw.add(rank_batches(&rank_with(&["a", "b", "a"], 0)))
            .unwrap();
        raw.add(rank_batches(&rank_with(&["c"], 1))).unwrap();
        let paths = raw.finish().unwrap();
        assert_eq!(paths, [dir.path().join("stages.arrow")]);
        let reader = FileReader::try_new(File::open(&paths[0]).unwrap(), None).unwrap();
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        let ranks: Vec<u32> = batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_primitive::<arrow_array::types::UInt32Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        let names: Vec<String> = batches
            .iter()
            .flat_map(|b| {
                let names = b.column_by_name("name").unwrap().as_string::<i32>();
                names
                    .iter()
                    .map(|n| n.unwrap().to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(ranks, [0, 0, 0, 1]);
        assert_eq!(names, ["a", "b", "a", "c"]);
    }
}
