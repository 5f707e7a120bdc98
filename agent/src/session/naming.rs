//! What a session is called and where its files go: its name, id and
//! tags capped to fit a payload header, the tag of this process's files,
//! and the session directory, safe from hostile names.

use std::path::PathBuf;

use rankscope_common::env::RankEnv;
use rankscope_common::Config;
use sha2::{Digest, Sha256};

use super::SessionError;
use crate::notice::notice;

/// The longest session name, session id and tag key kept, bytes.
pub(super) const MAX_NAME_BYTES: usize = 256;
/// The longest tag value kept, bytes.
const MAX_TAG_VALUE_BYTES: usize = 1024;
/// The most tags kept.
const MAX_TAGS: usize = 64;

/// `text` cut to at most `max` bytes (at a character boundary), saying so
/// when it was longer: what describes a session must fit its payload header.
pub(super) fn capped(what: &str, text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let end = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    notice!("{what} of {} bytes cut to its first {end}", text.len());
    text[..end].to_string()
}

/// The session's tags, capped in number and length.
pub(super) fn capped_tags(tags: &[(&str, &str)]) -> Vec<(String, String)> {
    if tags.len() > MAX_TAGS {
        notice!(
            "{} session tags given; the first {MAX_TAGS} are kept",
            tags.len()
        );
    }
    tags.iter()
        .take(MAX_TAGS)
        .map(|(k, v)| {
            (
                capped("tag key", k, MAX_NAME_BYTES),
                capped("tag value", v, MAX_TAG_VALUE_BYTES),
            )
        })
        .collect()
}

/// A number for this process's files: its host, pid and session start.
pub(super) fn process_tag(start_unix_ns: i64) -> u64 {
    let host = gethostname::gethostname();
    let digest = Sha256::new()
        .chain_update(host.as_encoded_bytes())
        .chain_update(std::process::id().to_le_bytes())
        .chain_update(start_unix_ns.to_le_bytes())
        .finalize();
    u64::from_le_bytes(
        digest[..8]
            .try_into()
            .expect("a SHA-256 digest has 32 bytes"),
    )
}

/// The id every rank of the job shares: configuration, else the launcher's
/// job id, else (for a world of one only) a fresh one.
pub(super) fn session_id(config: &Config, env: &RankEnv) -> Result<String, SessionError> {
    if let Some(id) = config.session_id.clone().or_else(|| env.job_id.clone()) {
        return Ok(id);
    }
    if env.world_size == 1 {
        return Ok(rankscope_common::env::fresh_job_id());
    }
    Err(SessionError::NoSessionId {
        launcher: env.launcher,
        world_size: env.world_size,
    })
}

/// `text` with everything but ASCII letters, digits, `.`, `_` and `-`
/// replaced, so that a hostile session name cannot leave the output directory.
fn path_safe(text: &str) -> String {
    let safe: String = text
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match safe.trim_start_matches('.') {
        "" => "session".to_string(),
        rest => rest.to_string(),
    }
}

/// The session directory a rank with `config` uses for `name` and `id`.
/// An id that `path_safe` had to change gets a tag of the whole id (the
/// first 4 bytes of its SHA-256, a hash whose definition never changes: ranks
/// built by different toolchains agree on the directory), so that two ids
/// (`exp:7`, `exp/7`) never share a directory.
pub(super) fn session_dir(config: &Config, name: &str, id: &str) -> PathBuf {
    let safe_id = path_safe(id);
    let dir = if safe_id == id {
        format!("{}-{safe_id}", path_safe(name))
    } else {
        let digest = Sha256::digest(id.as_bytes());
        let tag: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}-{safe_id}-{tag}", path_safe(name))
    };
    config.output_dir.join(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn hostile_names_stay_inside_the_output_directory() {
        assert_eq!(path_safe("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(path_safe(".."), "session");
        assert_eq!(path_safe("t2v <script>"), "t2v__script_");
        assert_eq!(path_safe(&"x".repeat(500)).len(), 64);
        let dir = session_dir(&Config::default(), "/abs", "1");
        assert!(dir.starts_with("profiling_reports"), "{}", dir.display());
        assert!(Path::new(&path_safe("a/b")).components().count() == 1);
        let config = Config::default();
        assert_ne!(
            session_dir(&config, "t", "exp:7"),
            session_dir(&config, "t", "exp/7"),
            "ids that read alike once made safe keep their own directories"
        );
        assert!(session_dir(&config, "t", "job-7").ends_with("t-job-7"));
        // Pinned: sha256(b"exp:7") begins 268282b4 (Python's hashlib agrees).
        assert!(session_dir(&config, "t", "exp:7").ends_with("t-exp_7-268282b4"));
    }
}
