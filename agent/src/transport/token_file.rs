//! The job token rank 0 makes for a one-machine job that was given none:
//! 32 random bytes, left with rank 0's endpoint in an owner-only file of
//! the session directory, which the other ranks (the same user on the same
//! machine) read. Someone who knows only the launcher's variables cannot
//! derive it, as they can the token derived from them.
//!
//! The file is named after rank 0's endpoint (two jobs sharing an output
//! folder keep theirs apart) and says which launch it is for (the
//! launcher's run identity, restart count included); a file left by an
//! earlier launch under the same identity is told from this launch's by
//! its age: it must be newer than the reading process (all the ranks of a
//! launch start together; rank 0 writes the file after it started). It is
//! read only as a regular file of this user's, readable by no other, and
//! never blocks (a FIFO planted in its place is refused).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

/// The file's name in the session directory, before a tag of the endpoint.
/// Three lines: rank 0's endpoint, the launch's run identity, the token in
/// hex.
const FILE_PREFIX: &str = ".rankscope-tcp-";
/// How long before this process started a file may have been written and
/// still be this launch's: the start time's resolution, and ranks started
/// a moment apart.
const START_SLACK: Duration = Duration::from_secs(1);
/// The largest file read.
const MAX_BYTES: u64 = 4096;
/// How often a rank looks for the file.
const POLL: Duration = Duration::from_millis(20);

/// The token file of `session_dir` for rank 0 at `endpoint`.
pub(crate) fn path(session_dir: &Path, endpoint: &str) -> PathBuf {
    let digest = Sha256::digest(endpoint.as_bytes());
    let tag: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    session_dir.join(format!("{FILE_PREFIX}{tag}"))
}

/// A fresh token: 32 random bytes in hex.
pub(crate) fn fresh() -> std::io::Result<Vec<u8>> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .into_bytes())
}

/// Rank 0: leaves `token` for the launch `run` with `endpoint` in
/// `session_dir`, readable by this user alone.
pub(crate) fn write(
    session_dir: &Path,
    endpoint: &str,
    run: &str,
    token: &[u8],
) -> std::io::Result<()> {
    let token = std::str::from_utf8(token).map_err(std::io::Error::other)?;
    let text = format!("{endpoint}\n{run}\n{token}\n");
    // Written through a temporary file the tempfile crate creates with
    // mode 0600, then renamed: owner-only from its first byte.
    rankscope_common::file::write_atomic(&path(session_dir, endpoint), text.as_bytes())
}

/// The other ranks: the token rank 0 left for `endpoint` and the launch
/// `run` in `session_dir` during this launch, waiting for it until
/// `deadline`; `None` if none came.
pub(crate) fn read(
    session_dir: &Path,
    endpoint: &str,
    run: &str,
    deadline: Instant,
) -> Option<Vec<u8>> {
    // Where the start cannot be read, a file of the last minute.
    let fresh_after = process_started()
        .and_then(|started| started.checked_sub(START_SLACK))
        .unwrap_or_else(|| SystemTime::now() - Duration::from_secs(60));
    let path = path(session_dir, endpoint);
    loop {
        if let Some(token) = read_once(&path, endpoint, run, fresh_after) {
            return Some(token);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::sleep(POLL.min(deadline - now));
    }
}

fn read_once(path: &Path, endpoint: &str, run: &str, fresh_after: SystemTime) -> Option<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    let file = rankscope_common::file::open_regular(path, false).ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me || meta.mode() & 0o077 != 0 || meta.modified().ok()? < fresh_after {
        return None;
    }
    let text = rankscope_common::file::read_capped(file, MAX_BYTES).ok()?;
    let text = String::from_utf8(text).ok()?;
    let mut lines = text.lines();
    let (found, launch, token) = (lines.next()?, lines.next()?, lines.next()?);
    (found == endpoint && launch == run && !token.is_empty()).then(|| token.as_bytes().to_vec())
}

/// When this process started, on the wall clock (Linux: from /proc, to
/// the clock tick); `None` where that cannot be read.
fn process_started() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces); the
    // start time, in clock ticks after boot, is the 22nd field of all.
    let after_name = stat.rsplit_once(')')?.1;
    let ticks: u64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime ")?.trim().parse().ok())?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = u64::try_from(per_second).ok().filter(|&t| t > 0)?;
    let since_boot = Duration::from_secs(ticks / per_second)
        + Duration::from_nanos((ticks % per_second) * 1_000_000_000 / per_second);
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(boot) + since_boot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_started_before_now_and_after_boot() {
        let started = process_started().expect("Linux gives it");
        assert!(started <= SystemTime::now());
        assert!(started > SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000));
    }

    #[test]
    fn a_token_left_by_rank_0_is_read_owner_only_and_an_old_one_is_not() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (endpoint, run) = ("127.0.0.1:5", "job.0");
        let token = fresh().unwrap();
        assert_eq!(token.len(), 64);
        write(dir.path(), endpoint, run, &token).unwrap();
        let file = path(dir.path(), endpoint);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let soon = Instant::now() + Duration::from_millis(100);
        assert_eq!(read(dir.path(), endpoint, run, soon), Some(token.clone()));
        assert_eq!(
            read(dir.path(), "127.0.0.1:6", run, soon),
            None,
            "another job"
        );
        assert_eq!(
            read(dir.path(), endpoint, "job.1", soon),
            None,
            "a restart's"
        );
        // Readable by others: not trusted.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read(dir.path(), endpoint, run, soon), None);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A file from before this process started is an earlier launch's.
        let old = SystemTime::now() - Duration::from_secs(3_600);
        let handle = std::fs::File::options().write(true).open(&file).unwrap();
        handle.set_modified(old).unwrap();
        assert_eq!(read(dir.path(), endpoint, run, soon), None);
        // A FIFO in its place is refused at once, never waited on.
        std::fs::remove_file(&file).unwrap();
        let fifo = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(read(dir.path(), endpoint, run, soon), None);
    }
}
