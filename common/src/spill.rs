//! Spill files: a rank's payload on disk, `rank-NNNNN.rsp` in the session
//! directory. Written with [`crate::file::write_atomic`], read back as
//! untrusted input: regular files only, never past the payload size limit.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::gather::{Candidate, Rejection};
use crate::payload::{self, Payload, MAX_PAYLOAD_BYTES};

/// Extension of spill files.
pub const EXTENSION: &str = "rsp";

/// The spill file name of `rank`: `rank-00003.rsp`.
pub fn file_name(rank: u32) -> String {
    format!("rank-{rank:05}.{EXTENSION}")
}

/// Writes `bytes` as `rank`'s spill file in `dir`; returns its path.
pub fn write(dir: &Path, rank: u32, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let path = dir.join(file_name(rank));
    crate::file::write_atomic(&path, bytes)?;
    Ok(path)
}

/// Reads and decodes the payload in `path`.
pub fn read_payload(path: &Path) -> Result<Payload, Rejection> {
    let bytes = read_bytes(path)?;
    payload::decode(&bytes).map_err(Rejection::Payload)
}

/// Reads the bytes of the payload file `path`, refusing anything but a
/// regular file of at most [`MAX_PAYLOAD_BYTES`].
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, Rejection> {
    // The entry itself, not what a link points to: a FIFO would block the
    // open, a device or /proc file would never end.
    let entry = std::fs::symlink_metadata(path).map_err(Rejection::Io)?;
    if !entry.file_type().is_file() {
        return Err(Rejection::NotAFile);
    }
    let file = File::open(path).map_err(Rejection::Io)?;
    let opened = file.metadata().map_err(Rejection::Io)?;
    if !opened.is_file() {
        return Err(Rejection::NotAFile);
    }
    if opened.len() > MAX_PAYLOAD_BYTES {
        return Err(Rejection::TooLarge {
            bytes: opened.len(),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_PAYLOAD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(Rejection::Io)?;
    if bytes.len() as u64 > MAX_PAYLOAD_BYTES {
        return Err(Rejection::TooLarge {
            bytes: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// Every spill file in `dir`, decoded (or with the reason it cannot be).
/// Hidden and temporary files are left out. A file named for the rank it
/// holds comes before a copy of it under another name, so
/// [`crate::gather::accept`] keeps the one named for its rank.
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<Candidate>> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if !hidden && path.extension().is_some_and(|e| e == EXTENSION) {
            paths.push(path);
        }
    }
    paths.sort();
    let mut read: Vec<(bool, PathBuf, Result<Payload, Rejection>)> = paths
        .into_iter()
        .map(|path| {
            let payload = read_payload(&path);
            let named_for_rank = payload
                .as_ref()
                .is_ok_and(|p| path.file_name() == Some(file_name(p.header.rank.rank).as_ref()));
            (!named_for_rank, path, payload)
        })
        .collect();
    read.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    Ok(read
        .into_iter()
        .map(|(_, path, payload)| Candidate {
            source: path.display().to_string(),
            payload,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn special_files_are_refused_without_being_opened() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join(file_name(3));
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(read_payload(&link), Err(Rejection::NotAFile)));
        let sub = dir.path().join("rank-00004.rsp");
        std::fs::create_dir(&sub).unwrap();
        assert!(matches!(read_payload(&sub), Err(Rejection::NotAFile)));
    }
}
