//! Spill files: each rank's payload on disk, `rank-NNNNN.rsp` in the session
//! directory, written atomically (temporary file, fsync, rename), so a reader
//! never sees half a file under the final name.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::session::SessionError;

/// Extension of spill files.
pub const EXTENSION: &str = "rsp";

/// The spill file name of `rank`: `rank-00003.rsp`.
pub fn file_name(rank: u32) -> String {
    format!("rank-{rank:05}.{EXTENSION}")
}

/// Writes `bytes` as `rank`'s spill file in `dir`; returns its path.
pub fn write(dir: &Path, rank: u32, bytes: &[u8]) -> Result<PathBuf, SessionError> {
    let path = dir.join(file_name(rank));
    let temporary = dir.join(format!(".{}.{}.tmp", file_name(rank), std::process::id()));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SessionError::Io { path, source }
    };
    let mut file = File::create(&temporary).map_err(io(&temporary))?;
    file.write_all(bytes).map_err(io(&temporary))?;
    file.sync_all().map_err(io(&temporary))?;
    drop(file);
    std::fs::rename(&temporary, &path).map_err(io(&path))?;
    Ok(path)
}
