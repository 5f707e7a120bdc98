//! The shared-directory transport: every rank's spill file is its send; rank
//! 0 waits until every rank's file is there (or the deadline passes), then
//! reads them all. [`collect`] is also the offline path of `rankscope aggregate`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rankscope_common::payload::{self, MAX_PAYLOAD_BYTES};
use rankscope_common::Payload;

use super::{GatherContext, Gathered, Skipped, Transport, TransportError};
use crate::spill;

/// How often rank 0 looks for the other ranks' files.
const POLL: Duration = Duration::from_millis(50);
/// Wall clocks of the ranks may disagree by this much.
const CLOCK_SKEW_NS: i64 = 5_000_000_000;

/// Gathers through spill files in the session directory.
pub struct DirTransport;

impl Transport for DirTransport {
    fn gather(
        &mut self,
        _payload: &[u8],
        context: &GatherContext<'_>,
    ) -> Result<Option<Gathered>, TransportError> {
        // Every rank has already spilled its payload: that is the send.
        if context.rank != 0 {
            return Ok(None);
        }
        let fresh_after = UNIX_EPOCH
            + Duration::from_nanos((context.started_unix_ns - CLOCK_SKEW_NS).max(0) as u64);
        wait_for_files(
            context.session_dir,
            context.world_size,
            fresh_after,
            context.deadline,
        );
        let expect = Expect {
            session_id: Some(context.session_id),
            world_size: Some(context.world_size),
            ended_after_unix_ns: Some(context.started_unix_ns - CLOCK_SKEW_NS),
        };
        collect(context.session_dir, &expect).map(Some)
    }
}

/// Waits until `rank-00000.rsp` .. for every rank of `world_size` exist in
/// `dir`, written after `fresh_after` (an older file is left from an earlier
/// run), or `deadline` passes; returns whether all arrived.
pub fn wait_for_files(
    dir: &Path,
    world_size: u32,
    fresh_after: SystemTime,
    deadline: Instant,
) -> bool {
    let arrived = |rank: u32| {
        std::fs::metadata(dir.join(spill::file_name(rank)))
            .and_then(|m| m.modified())
            .is_ok_and(|written| written >= fresh_after)
    };
    let mut waiting: Vec<u32> = (0..world_size).collect();
    loop {
        waiting.retain(|&rank| !arrived(rank));
        if waiting.is_empty() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(POLL.min(deadline - now));
    }
}

/// What the payloads of one session must agree on; `None` takes it from the
/// files themselves.
#[derive(Debug, Clone, Default)]
pub struct Expect<'a> {
    /// The session id.
    pub session_id: Option<&'a str>,
    /// The world size.
    pub world_size: Option<u32>,
    /// A payload whose session ended before this (Unix nanoseconds) is left
    /// over from an earlier run that used the same session id.
    pub ended_after_unix_ns: Option<i64>,
}

/// Reads every spill file in `dir`. A file that cannot be used is skipped
/// with the reason; the rest are kept. Ranks with no usable file are missing.
pub fn collect(dir: &Path, expect: &Expect<'_>) -> Result<Gathered, TransportError> {
    let mut skipped = Vec::new();
    let mut decoded: Vec<(PathBuf, Payload)> = Vec::new();
    for path in spill_files(dir)? {
        match read(&path) {
            Ok(payload) => decoded.push((path, payload)),
            Err(reason) => skipped.push(Skipped {
                source: path.display().to_string(),
                reason,
            }),
        }
    }

    let session_id = match expect.session_id {
        Some(id) => Some(id.to_string()),
        None => most_common(decoded.iter().map(|(_, p)| p.header.session.id.clone())),
    };
    let world_size = expect.world_size.unwrap_or_else(|| {
        decoded
            .iter()
            .filter(|(_, p)| Some(&p.header.session.id) == session_id.as_ref())
            .map(|(_, p)| p.header.rank.world_size)
            .max()
            .unwrap_or(0)
    });

    // A file named for the rank it holds wins over a copy under another name.
    decoded.sort_by_key(|(path, p)| {
        let named_for_rank =
            path.file_name() == Some(spill::file_name(p.header.rank.rank).as_ref());
        (!named_for_rank, path.clone())
    });
    let mut by_rank: BTreeMap<u32, (PathBuf, Payload)> = BTreeMap::new();
    for (path, payload) in decoded {
        let header = &payload.header;
        let rank = header.rank.rank;
        let refuse = if Some(&header.session.id) != session_id.as_ref() {
            Some(format!(
                "belongs to session `{}`, not `{}`",
                header.session.id,
                session_id.as_deref().unwrap_or("")
            ))
        } else if header.rank.world_size != world_size {
            Some(format!(
                "rank {rank} says the world size is {}, not {world_size}",
                header.rank.world_size
            ))
        } else if rank >= world_size {
            Some(format!("rank {rank} is outside the world of {world_size}"))
        } else if expect
            .ended_after_unix_ns
            .is_some_and(|after| session_end_unix_ns(header) < after)
        {
            Some(
                "ended before this session began: a file left over from an earlier run \
                 with the same session id"
                    .to_string(),
            )
        } else {
            by_rank.get(&rank).map(|(first, _)| {
                format!(
                    "claims rank {rank}, already provided by {}",
                    first.display()
                )
            })
        };
        match refuse {
            Some(reason) => skipped.push(Skipped {
                source: path.display().to_string(),
                reason,
            }),
            None => {
                by_rank.insert(rank, (path, payload));
            }
        }
    }

    Ok(Gathered {
        world_size,
        missing: (0..world_size)
            .filter(|r| !by_rank.contains_key(r))
            .collect(),
        payloads: by_rank.into_values().map(|(_, payload)| payload).collect(),
        skipped,
    })
}

fn session_end_unix_ns(header: &rankscope_common::PayloadHeader) -> i64 {
    let duration = i64::try_from(header.clock.duration_ns).unwrap_or(i64::MAX);
    header.clock.start_unix_ns.saturating_add(duration)
}

/// The spill files in `dir`, by name; temporary files are left out.
fn spill_files(dir: &Path) -> Result<Vec<PathBuf>, TransportError> {
    let io = |source| TransportError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if !hidden && path.extension().is_some_and(|e| e == spill::EXTENSION) && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn read(path: &Path) -> Result<Payload, String> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if size > MAX_PAYLOAD_BYTES {
        return Err(format!("{size} bytes is larger than any payload"));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    payload::decode(&bytes).map_err(|e| e.to_string())
}

fn most_common(ids: impl Iterator<Item = String>) -> Option<String> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for id in ids {
        *counts.entry(id).or_default() += 1;
    }
    // Ties go to the first id in order, so the choice is stable.
    counts
        .into_iter()
        .fold(None, |best: Option<(String, usize)>, (id, n)| match best {
            Some((_, m)) if m >= n => best,
            _ => Some((id, n)),
        })
        .map(|(id, _)| id)
}
