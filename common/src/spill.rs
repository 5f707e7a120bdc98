//! Spill files: a rank's payload on disk, `rank-NNNNN.r<run>.p<process>.rsp`
//! in the session directory ([`SpillName`]). Written with [`crate::file::write_atomic`], read back as
//! untrusted input: regular files only, never past the payload size limit.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use crate::gather::{Candidate, Rejection};
use crate::payload::{self, Payload, PayloadError, MAX_PAYLOAD_BYTES, PREAMBLE_BYTES};

/// Extension of spill files.
pub const EXTENSION: &str = "rsp";

/// Who wrote a spill file: the name of `rank`'s file in one run, by one
/// process. `rank-00003.r1a2b3c4d.p5e6f7a8b.rsp`: the rank, a tag of the run
/// (so that rank 0 finds its own run's files without reading any) and a tag
/// of the process (so that no two processes ever write the same file: two
/// runs sharing a session id, or two processes claiming one rank, leave
/// their files side by side for the gather to sort out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillName<'a> {
    /// The rank.
    pub rank: u32,
    /// The run's identity, where there is one.
    pub run_id: Option<&'a str>,
    /// A number unique to the writing process (host, pid and start time
    /// hashed, say).
    pub process: u64,
}

/// Extension of the files a rank flushes during a long session.
pub const PART_EXTENSION: &str = "part";

impl SpillName<'_> {
    /// The file name.
    pub fn file_name(&self) -> String {
        format!("{}.{EXTENSION}", self.stem())
    }

    /// The name of the rank's `seq`-th flush (periodic or asked for): the
    /// rows recorded since the one before. The final spill file replaces them all.
    pub fn part_name(&self, seq: u32) -> String {
        // Ten digits hold every u32: the names sort as the numbers do.
        format!("{}.{seq:010}.{PART_EXTENSION}", self.stem())
    }

    fn stem(&self) -> String {
        let run = self.run_id.map(run_part).unwrap_or_default();
        let process = self.process as u32 ^ (self.process >> 32) as u32;
        format!("rank-{:05}.{run}p{process:08x}", self.rank)
    }
}

/// The flush files in `dir` of the rank whose final file would be `name`,
/// in the order written.
pub fn parts(dir: &Path, name: &SpillName<'_>) -> std::io::Result<Vec<PathBuf>> {
    let stem = format!("{}.", name.stem());
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            let file = path.file_name().unwrap_or_default().to_string_lossy();
            file.starts_with(&stem) && file.ends_with(&format!(".{PART_EXTENSION}"))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// The part of a spill file name that names the run: `r1a2b3c4d.`.
fn run_part(run_id: &str) -> String {
    format!("r{:08x}.", tag(run_id.as_bytes()))
}

/// Whether `file_name` is a spill file name of `rank` (any rank when
/// `None`) in run `run_id` (any run when `None`).
pub fn is_spill_of(file_name: &str, rank: Option<u32>, run_id: Option<&str>) -> bool {
    let Some(rest) = file_name.strip_prefix("rank-") else {
        return false;
    };
    let rank_ok = rank.is_none_or(|r| rank_of(file_name) == Some(r));
    let run_ok = run_id.is_none_or(|run| rest.contains(&format!(".{}", run_part(run))));
    rank_ok && run_ok && file_name.ends_with(&format!(".{EXTENSION}"))
}

/// Whether a spill (or flush) file's name carries a run's tag
/// (`rank-00042.r1a2b3c4d.p…`), as the files of a rank that knew its run
/// do.
pub fn has_run(file_name: &str) -> bool {
    file_name
        .strip_prefix("rank-")
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(_, rest)| rest.starts_with('r'))
}

/// A short, stable tag of `bytes` (FNV-1a, 32 bits): names, not security.
fn tag(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |hash: u32, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// Writes `bytes` as the spill file `name` in `dir`; returns its path.
pub fn write(dir: &Path, name: &SpillName<'_>, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let path = dir.join(name.file_name());
    crate::file::write_atomic(&path, bytes)?;
    Ok(path)
}

/// The rank a spill file name is of: `rank-00003.….rsp` → 3.
pub fn rank_of(file_name: &str) -> Option<u32> {
    let rest = file_name.strip_prefix("rank-")?;
    rest[..rest.find('.')?].parse().ok()
}

/// What [`find`] found.
#[derive(Debug, Default)]
pub struct Found {
    /// Regular files modified at or after the time asked, by name.
    pub files: Vec<PathBuf>,
    /// Entries with a spill file's name that are not regular files (links,
    /// FIFOs, devices): to be named as refused, never read.
    pub special: Vec<PathBuf>,
}

/// The spill files in `dir` of `rank` (any when `None`) in run `run_id`
/// (any when `None`), modified at or after `since`.
pub fn find(
    dir: &Path,
    rank: Option<u32>,
    run_id: Option<&str>,
    since: SystemTime,
) -> std::io::Result<Found> {
    let mut found = Found::default();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !is_spill_of(&entry.file_name().to_string_lossy(), rank, run_id) {
            continue;
        }
        // The entry's own metadata: a link is not taken for a file.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.file_type().is_file() {
            found.special.push(entry.path());
        } else if meta.modified().is_ok_and(|modified| modified >= since) {
            found.files.push(entry.path());
        }
    }
    found.files.sort();
    found.special.sort();
    Ok(found)
}

/// Reads and decodes the payload in `path`, within the process's budget
/// of payload bytes held at once ([`READ_BUDGET_BYTES`]).
pub fn read_payload(path: &Path) -> Result<Payload, Rejection> {
    let size = std::fs::symlink_metadata(path).map_or(0, |m| m.len());
    let _held = ReadBudget::acquire(size);
    let bytes = read_bytes(path)?;
    payload::decode(&bytes).map_err(Rejection::Payload)
}

/// Payload bytes that the readers of one process hold at once, across
/// threads: a reader waits until its file fits (a file larger than the
/// whole budget is read when nothing else is held).
pub const READ_BUDGET_BYTES: u64 = 1 << 30;

/// The bytes held now against [`READ_BUDGET_BYTES`]; given back on drop.
struct ReadBudget(u64);

static HELD: std::sync::Mutex<u64> = std::sync::Mutex::new(0);
static GIVEN_BACK: std::sync::Condvar = std::sync::Condvar::new();

impl ReadBudget {
    fn acquire(bytes: u64) -> Self {
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        while *held > 0 && *held + bytes > READ_BUDGET_BYTES {
            held = GIVEN_BACK.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        *held += bytes;
        ReadBudget(bytes)
    }
}

impl Drop for ReadBudget {
    fn drop(&mut self) {
        *HELD.lock().unwrap_or_else(|e| e.into_inner()) -= self.0;
        GIVEN_BACK.notify_all();
    }
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
    let mut file = open_regular(path)?;
    let opened = file.metadata().map_err(Rejection::Io)?;
    if !opened.is_file() {
        return Err(Rejection::NotAFile);
    }
    if opened.len() > MAX_PAYLOAD_BYTES {
        return Err(Rejection::TooLarge {
            bytes: opened.len(),
        });
    }
    // The preamble first: a file whose size is not the length it announces
    // (or that is no payload) is refused before the rest is read.
    let mut bytes = vec![0u8; PREAMBLE_BYTES.min(opened.len() as usize)];
    file.read_exact(&mut bytes).map_err(Rejection::Io)?;
    match payload::announced_length(&bytes, MAX_PAYLOAD_BYTES) {
        Ok(total) if total != opened.len() => {
            return Err(Rejection::Payload(if total > opened.len() {
                PayloadError::Truncated {
                    expected: total,
                    found: opened.len(),
                }
            } else {
                PayloadError::TrailingBytes(opened.len() - total)
            }))
        }
        Ok(_) => {}
        Err(e) => return Err(Rejection::Payload(e)),
    }
    // Its layout, then its checksum over the whole file read in small
    // pieces: a file that is no payload (a sparse file of gigabytes behind
    // a valid preamble) is refused before its size is allocated.
    payload::check_layout(&mut file, &bytes, opened.len()).map_err(Rejection::Payload)?;
    file.seek(std::io::SeekFrom::Start(bytes.len() as u64))
        .map_err(Rejection::Io)?;
    check_checksum(&mut file, &bytes, opened.len())?;
    file.seek(std::io::SeekFrom::Start(0))
        .map_err(Rejection::Io)?;
    let mut file = file.take(opened.len() + 1);
    bytes.clear();
    // The length and checksum were checked: read in one go.
    let size = usize::try_from(opened.len()).unwrap_or(0);
    bytes.reserve_exact(size.saturating_sub(bytes.len()));
    file.read_to_end(&mut bytes).map_err(Rejection::Io)?;
    if bytes.len() as u64 != opened.len() {
        return Err(Rejection::Io(std::io::Error::other(
            "the file changed while it was read",
        )));
    }
    Ok(bytes)
}

/// Reads the rest of a payload file of `total` bytes, whose preamble is
/// `preamble`, in pieces, and checks its checksum (the last 4 bytes, over
/// all before them).
fn check_checksum(file: &mut impl Read, preamble: &[u8], total: u64) -> Result<(), Rejection> {
    let body_len = total.saturating_sub(4);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(preamble);
    let mut read = preamble.len() as u64;
    let mut stored = [0u8; 4];
    let mut buffer = vec![0u8; 256 << 10];
    while read < total {
        let n = file.read(&mut buffer).map_err(Rejection::Io)?;
        if n == 0 {
            return Err(Rejection::Io(std::io::Error::other(
                "the file changed while it was read",
            )));
        }
        let chunk = &buffer[..n];
        // The stored checksum's bytes in this piece, if any.
        for at in read.max(body_len)..(read + n as u64).min(total) {
            stored[(at - body_len) as usize] = chunk[(at - read) as usize];
        }
        let body_end = usize::try_from(body_len.saturating_sub(read)).map_or(n, |left| left.min(n));
        hasher.update(&chunk[..body_end]);
        read += n as u64;
    }
    if hasher.finalize() != u32::from_le_bytes(stored) {
        return Err(Rejection::Payload(PayloadError::ChecksumMismatch));
    }
    Ok(())
}

/// Opens `path` for reading without following a link or blocking on a FIFO
/// (the entry could have been swapped since it was looked at).
fn open_regular(path: &Path) -> Result<File, Rejection> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    options.open(path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return Rejection::NotAFile;
        }
        Rejection::Io(e)
    })
}

/// One rank's data in a session directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A spill (or any payload) file.
    File(PathBuf),
    /// The flushes of a rank that never finished (no spill file), in the
    /// order written, named by the spill file they would have become.
    Flushes {
        /// The spill file's path without its extension.
        stem: PathBuf,
        /// The flush files.
        files: Vec<PathBuf>,
    },
}

impl Input {
    /// What reports call it: the file, or the flushes' name and count.
    pub fn source(&self) -> String {
        match self {
            Input::File(path) => path.display().to_string(),
            Input::Flushes { stem, files } => {
                format!("{} ({} flushes)", stem.display(), files.len())
            }
        }
    }

    /// The payload: the file's, or the flushes' merged into one (each
    /// flush's header says it is partial), telemetry kept to the newest
    /// `max_rows` as the rank itself would have.
    pub fn read(&self, max_rows: usize) -> Result<Payload, Rejection> {
        match self {
            Input::File(path) => read_payload(path),
            Input::Flushes { files, .. } => merge_parts(files, max_rows),
        }
    }
}

/// The inputs of `dir`: every file with the spill extension, by name, and
/// for each rank that flushed during its session but never finished (no
/// spill file) its flushes. Hidden and temporary files are left out.
pub fn inputs(dir: &Path) -> std::io::Result<Vec<Input>> {
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut parts: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name.starts_with('.') {
            continue;
        }
        if path.extension().is_some_and(|e| e == EXTENSION) {
            paths.push(path);
        } else if let Some(stem) = name
            .strip_suffix(&format!(".{PART_EXTENSION}"))
            .and_then(|rest| rest.rsplit_once('.'))
            .map(|(stem, _seq)| stem.to_string())
        {
            parts.entry(stem).or_default().push(path);
        }
    }
    paths.sort();
    let finished: Vec<String> = paths
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
        .collect();
    let mut inputs: Vec<Input> = paths.into_iter().map(Input::File).collect();
    for (stem, mut files) in parts {
        if finished.contains(&stem) {
            continue;
        }
        files.sort();
        inputs.push(Input::Flushes {
            stem: dir.join(&stem),
            files,
        });
    }
    Ok(inputs)
}

/// Every input of `dir` ([`inputs`]), decoded (or with the reason it cannot
/// be).
pub fn read_dir(dir: &Path, max_rows: usize) -> std::io::Result<Vec<Candidate>> {
    Ok(read_inputs_with(&inputs(dir)?, max_rows, |payload| payload))
}

/// The flushes `files` of one rank as one payload: the readable ones (a
/// flush cut short by the rank's death is left out), telemetry kept to the
/// newest `max_rows` as the rank itself would have.
fn merge_parts(files: &[PathBuf], max_rows: usize) -> Result<Payload, Rejection> {
    let mut first_error = None;
    let readable = files.iter().filter_map(|file| match read_payload(file) {
        Ok(part) => Some(part),
        Err(e) => {
            first_error.get_or_insert(e);
            None
        }
    });
    let merged = Payload::concat(readable, max_rows)
        .map_err(|e| Rejection::Payload(PayloadError::Layout(format!("merging flushes: {e}"))))?;
    match (merged, first_error) {
        (Some(payload), _) => Ok(payload),
        (None, Some(e)) => Err(e),
        (None, None) => Err(Rejection::NotAFile),
    }
}

/// The payloads in `paths`, decoded (or with the reason they cannot be).
pub fn read_files(paths: impl IntoIterator<Item = PathBuf>) -> Vec<Candidate> {
    let inputs: Vec<Input> = paths.into_iter().map(Input::File).collect();
    read_inputs_with(&inputs, usize::MAX, |payload| payload)
}

/// The payloads of `inputs`, in order, each handed to `reduce` as soon as
/// it is decoded. The inputs are read on this thread and as many more as
/// there are cores and can be started (none, under a process limit: this
/// thread reads them all), so only the payloads being decoded are held at
/// once besides what `reduce` keeps of each.
pub fn read_inputs_with<T: Send>(
    inputs: &[Input],
    max_rows: usize,
    reduce: impl Fn(Payload) -> T + Sync,
) -> Vec<Candidate<T>> {
    let next = AtomicUsize::new(0);
    let read_next = || {
        let mut read = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(input) = inputs.get(i) else {
                return read;
            };
            let candidate = Candidate {
                source: input.source(),
                payload: input.read(max_rows).map(&reduce),
            };
            read.push((i, candidate));
        }
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(inputs.len());
    let mut candidates: Vec<(usize, Candidate<T>)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| {
                let reader = std::thread::Builder::new().name("rankscope-read".into());
                reader.spawn_scoped(scope, read_next).ok()
            })
            .collect();
        let mut read = read_next();
        for helper in helpers {
            read.extend(
                helper
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e)),
            );
        }
        read
    });
    candidates.sort_by_key(|&(i, _)| i);
    candidates.into_iter().map(|(_, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rank_of_a_name() {
        assert_eq!(rank_of("rank-00003.r1a2b3c4d.p00000001.rsp"), Some(3));
        assert_eq!(rank_of("rank-123456.p1.rsp"), Some(123_456));
        assert_eq!(rank_of("notes.rsp"), None);
        assert_eq!(rank_of("rank-x.rsp"), None);
        assert!(has_run("rank-00003.r1a2b3c4d.p00000001.rsp"));
        assert!(!has_run("rank-00003.p00000001.rsp"));
    }

    #[test]
    fn names_tell_runs_and_processes_apart() {
        let name = |run, process| {
            SpillName {
                rank: 3,
                run_id: run,
                process,
            }
            .file_name()
        };
        let a = name(Some("run-1"), 7);
        assert!(a.starts_with("rank-00003.r") && a.ends_with(".rsp"), "{a}");
        assert!(is_spill_of(&a, Some(3), Some("run-1")));
        assert!(is_spill_of(&a, None, None));
        assert!(!is_spill_of(&a, Some(3), Some("run-2")));
        assert!(!is_spill_of(&a, Some(30), None));
        assert_ne!(a, name(Some("run-2"), 7), "another run, another file");
        assert_ne!(a, name(Some("run-1"), 8), "another process, another file");
        assert!(is_spill_of(&name(None, 7), Some(3), None));
        assert!(!is_spill_of(&name(None, 7), Some(3), Some("run-1")));
    }

    #[cfg(unix)]
    #[test]
    fn special_files_are_refused_without_being_opened() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("rank-00003.rsp");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(read_payload(&link), Err(Rejection::NotAFile)));
        let sub = dir.path().join("rank-00004.rsp");
        std::fs::create_dir(&sub).unwrap();
        assert!(matches!(read_payload(&sub), Err(Rejection::NotAFile)));
    }
}
