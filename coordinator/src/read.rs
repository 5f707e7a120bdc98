//! Reading a `report.json` back, for `rankscope compare` and `rankscope
//! report`: bounded, version-checked, never blocking on a special file.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::model::{Report, SCHEMA_VERSION};

/// The largest report file read, bytes.
const MAX_REPORT_BYTES: u64 = 1 << 30;

/// A report that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be read.
    #[error("cannot read report {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a regular file (a directory holding no report.json, a FIFO, a
    /// device): reading it could block or never end.
    #[error("{path} is not a regular file")]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// The file is larger than any report rankscope writes.
    #[error("{path} is over {MAX_REPORT_BYTES} bytes: larger than any report")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bytes read before giving up.
        bytes: u64,
    },
    /// The file is not a rankscope report.
    #[error("{path} is not a rankscope report.json")]
    NotAReport {
        /// The file.
        path: PathBuf,
        /// What did not parse.
        source: serde_json::Error,
    },
    /// The report has another schema version.
    #[error(
        "{path} has report schema version {found}; this rankscope reads version {SCHEMA_VERSION}"
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The version it has.
        found: u64,
    },
}

/// Reads `report.json`, or the `report.json` inside a session directory.
pub fn read_report(path: &Path) -> Result<Report, ReadError> {
    let file = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    };
    let read = |source| ReadError::Read {
        path: file.clone(),
        source,
    };
    if !std::fs::metadata(&file).map_err(read)?.is_file() {
        return Err(ReadError::NotAFile { path: file });
    }
    let mut text = Vec::new();
    std::fs::File::open(&file)
        .and_then(|f| f.take(MAX_REPORT_BYTES + 1).read_to_end(&mut text))
        .map_err(read)?;
    if text.len() as u64 > MAX_REPORT_BYTES {
        let bytes = text.len() as u64;
        return Err(ReadError::TooLarge { path: file, bytes });
    }
    let value: serde_json::Value =
        serde_json::from_slice(&text).map_err(|source| ReadError::NotAReport {
            path: file.clone(),
            source,
        })?;
    // A missing version fails below, as a report with a missing field.
    if let Some(found) = value.get("schema_version").and_then(|v| v.as_u64()) {
        if found != u64::from(SCHEMA_VERSION) {
            return Err(ReadError::Version { path: file, found });
        }
    }
    serde_json::from_value(value).map_err(|source| ReadError::NotAReport { path: file, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report.json written before the charts were binned, before
    /// straggler groups said what they share and before the session listed
    /// its nodes (no `series.columns`, `stage_slowest` or `ranks_not_drawn`;
    /// a group's `host` always a string; no `session.gather_levels` or
    /// `nodes`) still reads, as `rankscope compare` and `report` need.
    #[test]
    fn a_report_from_before_binned_charts_and_shared_groups_still_reads() {
        let report = crate::test_support::report_of_one_idle_rank();
        let mut value = serde_json::to_value(&report).unwrap();
        let series = value["series"].as_object_mut().unwrap();
        for added in ["columns", "stage_slowest", "ranks_not_drawn"] {
            assert!(series.remove(added).is_some(), "{added}");
        }
        let session = value["session"].as_object_mut().unwrap();
        for added in ["gather_levels", "nodes"] {
            assert!(session.remove(added).is_some(), "{added}");
        }
        value["straggler_groups"] = serde_json::json!([
            {"stage": "denoise", "host": "node-1", "ranks": [4, 5], "job_time_s": 1.5}
        ]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("report.json");
        std::fs::write(&file, serde_json::to_vec(&value).unwrap()).unwrap();
        let read = read_report(&file).unwrap();
        assert!(read.series.columns.is_empty());
        assert_eq!(read.straggler_groups[0].host.as_deref(), Some("node-1"));
        assert_eq!(read.straggler_groups[0].gpu_model, None);
        assert_eq!(read.session.gather_levels, 1);
        assert!(read.session.nodes.is_empty());
    }
}
