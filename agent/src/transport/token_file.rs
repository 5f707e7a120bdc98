//! The job token rank 0 makes for a one-machine job that was given none:
//! 32 random bytes, left with rank 0's endpoint in an owner-only file of
//! the session directory, which the other ranks (the same user on the same
//! machine) read. Someone who knows only the launcher's variables cannot
//! derive it, as they can the token derived from them.
//!
//! A file left by an earlier launch of the same session is told from this
//! launch's by its age: it must be newer than the reading process (all the
//! ranks of a launch start together; rank 0 writes the file after it
//! started).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// The file's name in the session directory. Two lines: rank 0's
/// endpoint, then the token in hex.
const FILE_NAME: &str = ".rankscope-tcp";
/// How long before this process started a file may have been written and
/// still be this launch's: the start time's resolution, and ranks started
/// a moment apart.
const START_SLACK: Duration = Duration::from_secs(1);
/// The largest file read.
const MAX_BYTES: u64 = 4096;
/// How often a rank looks for the file.
const POLL: Duration = Duration::from_millis(20);

/// The token file of `session_dir`.
pub(crate) fn path(session_dir: &Path) -> PathBuf {
    session_dir.join(FILE_NAME)
}

/// Rank 0: makes a fresh token and leaves it with `endpoint` in
/// `session_dir`, readable by this user alone; returns it.
pub(crate) fn write(session_dir: &Path, endpoint: &str) -> std::io::Result<Vec<u8>> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let text = format!("{endpoint}\n{token}\n");
    // Written through a temporary file the tempfile crate creates with
    // mode 0600, then renamed: owner-only from its first byte.
    rankscope_common::file::write_atomic(&path(session_dir), text.as_bytes())?;
    Ok(token.into_bytes())
}

/// The other ranks: the token rank 0 left for `endpoint` in `session_dir`
/// during this launch, waiting for it until `deadline`; `None` if none came.
pub(crate) fn read(session_dir: &Path, endpoint: &str, deadline: Instant) -> Option<Vec<u8>> {
    let fresh_after = process_started()
        .and_then(|started| started.checked_sub(START_SLACK))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    loop {
        if let Some(token) = read_once(&path(session_dir), endpoint, fresh_after) {
            return Some(token);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::sleep(POLL.min(deadline - now));
    }
}

fn read_once(path: &Path, endpoint: &str, fresh_after: SystemTime) -> Option<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.modified().ok()? < fresh_after {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_BYTES).read_to_string(&mut text).ok()?;
    let mut lines = text.lines();
    let (found, token) = (lines.next()?, lines.next()?);
    (found == endpoint && !token.is_empty()).then(|| token.as_bytes().to_vec())
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
        let token = write(dir.path(), "127.0.0.1:5").unwrap();
        assert_eq!(token.len(), 64);
        let mode = std::fs::metadata(path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let soon = Instant::now() + Duration::from_millis(100);
        assert_eq!(read(dir.path(), "127.0.0.1:5", soon), Some(token));
        assert_eq!(
            read(dir.path(), "127.0.0.1:6", soon),
            None,
            "another endpoint"
        );
        // A file from before this process started is an earlier launch's.
        let old = SystemTime::now() - Duration::from_secs(3_600);
        let file = std::fs::File::options()
            .write(true)
            .open(path(dir.path()))
            .unwrap();
        file.set_modified(old).unwrap();
        assert_eq!(read(dir.path(), "127.0.0.1:5", soon), None);
    }
}
