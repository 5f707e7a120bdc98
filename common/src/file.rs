//! Files written so that a reader never sees half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Opens `path` for reading as a regular file: never blocking on a FIFO or
/// a device (the open does not wait; anything but a regular file is then
/// refused) and, without `follow_links`, never through a symbolic link.
pub fn open_regular(path: &Path, follow_links: bool) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let no_follow = if follow_links { 0 } else { libc::O_NOFOLLOW };
        options.custom_flags(libc::O_NONBLOCK | no_follow);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// `file`'s bytes, at most `max`: a longer file is an error naming the limit.
pub fn read_capped(file: std::fs::File, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    match bytes.len() as u64 > max {
        true => Err(std::io::Error::other(format!("larger than {max} bytes"))),
        false => Ok(bytes),
    }
}

/// Writes `bytes` to `path` so that a reader sees the old file or the whole
/// new one, never half of it (see [`AtomicFile`]). On failure nothing is
/// left behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = AtomicFile::create(path)?;
    file.write_all(bytes)?;
    file.commit()
}

/// A file written a piece at a time that appears under its path whole or
/// not at all: a temporary file of a fresh name in the same directory
/// (created exclusively, so a planted symbolic link is never followed),
/// synced and renamed by [`AtomicFile::commit`]; dropped before that, it is
/// removed.
pub struct AtomicFile {
    file: tempfile::NamedTempFile,
    path: PathBuf,
}

impl AtomicFile {
    /// Starts the file that will be `path`.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let file = tempfile::Builder::new()
            .prefix(".rankscope-")
            .suffix(".tmp")
            .tempfile_in(dir)?;
        Ok(AtomicFile {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Syncs the file and puts it in place.
    pub fn commit(self) -> std::io::Result<()> {
        self.file.as_file().sync_all()?;
        self.file.persist(&self.path).map_err(|e| e.error)?;
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.file.write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Makes the folder `dir` (and those above it); a link or a file planted
/// in its place, which would send the files elsewhere, is an error.
pub fn create_real_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    match std::fs::symlink_metadata(dir)?.file_type().is_dir() {
        true => Ok(()),
        false => Err(std::io::Error::other("a link or file stands in its place")),
    }
}

/// Whether the file at `path` was last written at or after `since` (on
/// its file system's clock); `false` where there is none.
pub fn modified_since(path: &Path, since: std::time::SystemTime) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|at| at >= since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_atomic_write_replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}
