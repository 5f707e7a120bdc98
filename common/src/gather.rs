//! What rank 0 accepts into a report, whatever transport carried the
//! payloads: the session, run and rank checks, the [`Gathered`] result and
//! the typed [`Rejection`] of an input that failed them. Transports (and
//! `rankscope aggregate`) turn what they received into [`Candidate`]s and
//! call [`accept`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::payload::{Payload, PayloadError, PayloadHeader};

/// Why an input was left out of the report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The input could not be read.
    #[error("cannot be read")]
    Io(#[source] std::io::Error),
    /// A directory entry that is not a regular file (a FIFO, a device, a
    /// symbolic link): never opened, so it cannot block or flood the reader.
    #[error("not a regular file")]
    NotAFile,
    /// Larger than any payload may be.
    #[error("{bytes} bytes is larger than any payload")]
    TooLarge {
        /// Bytes found (at least).
        bytes: u64,
    },
    /// Not a usable payload: the decoder says why.
    #[error(transparent)]
    Payload(PayloadError),
    /// Another session's payload.
    #[error("belongs to session `{found}`, not `{expected}`")]
    OtherSession {
        /// The payload's session id.
        found: String,
        /// The session gathered.
        expected: String,
    },
    /// Another run of the same session (a reused session id).
    #[error("belongs to run `{}` of this session, not `{expected}`", .found.as_deref().unwrap_or("(none)"))]
    OtherRun {
        /// The payload's run id.
        found: Option<String>,
        /// The run gathered.
        expected: String,
    },
    /// The payload disagrees with the others about the world size.
    #[error("rank {rank} says the world size is {found}, not {expected}")]
    WorldSize {
        /// The payload's rank.
        rank: u32,
        /// Its world size.
        found: u32,
        /// The world size gathered.
        expected: u32,
    },
    /// The rank is not below the world size.
    #[error("rank {rank} is outside the world of {world_size}")]
    OutsideWorld {
        /// The payload's rank.
        rank: u32,
        /// The world size gathered.
        world_size: u32,
    },
    /// The payload's session ended before this one began.
    #[error(
        "ended before this session began: a file left over from an earlier run with the same \
         session id"
    )]
    Stale,
    /// A second payload for a rank already gathered.
    #[error("claims rank {rank}, already provided by {first}")]
    DuplicateRank {
        /// The rank.
        rank: u32,
        /// Where the accepted payload came from.
        first: String,
    },
}

/// An input rank 0 (or `rankscope aggregate`) refused, and why.
#[derive(Debug)]
pub struct Skipped {
    /// The file (or peer) it came from.
    pub source: String,
    /// What is wrong with it.
    pub reason: Rejection,
}

/// One input to [`accept`]: where it came from and what decoding it gave.
#[derive(Debug)]
pub struct Candidate {
    /// The file (or peer) it came from.
    pub source: String,
    /// The payload, or why there is none.
    pub payload: Result<Payload, Rejection>,
}

/// Everything rank 0 gathered for one report.
#[derive(Debug, Default)]
pub struct Gathered {
    /// Ranks in the job.
    pub world_size: u32,
    /// One payload per reporting rank, by rank.
    pub payloads: Vec<Payload>,
    /// Ranks below `world_size` with no payload.
    pub missing: Vec<u32>,
    /// Inputs refused.
    pub skipped: Vec<Skipped>,
}

/// What the payloads of one report must agree on; `None` takes the session
/// and world size from the inputs themselves (the most common session id)
/// and leaves the run and the end time unchecked.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// The session id.
    pub session_id: Option<String>,
    /// The run of that session.
    pub run_id: Option<String>,
    /// The world size.
    pub world_size: Option<u32>,
    /// A payload whose session ended before this (Unix nanoseconds) is left
    /// over from an earlier run that used the same session id.
    pub ended_after_unix_ns: Option<i64>,
}

/// The files a reporter wrote from a gather.
#[derive(Debug, Clone, Default)]
pub struct ReportFiles {
    /// Every file written.
    pub files: Vec<PathBuf>,
    /// The terminal summary table.
    pub summary: String,
}

/// Checks every candidate against `expect` and keeps one payload per rank:
/// the first one, in the order given. The others are skipped with the reason;
/// ranks with no payload are missing.
pub fn accept(candidates: Vec<Candidate>, expect: &Expect) -> Gathered {
    let mut skipped = Vec::new();
    let mut decoded = Vec::new();
    for candidate in candidates {
        match candidate.payload {
            Ok(payload) => decoded.push((candidate.source, payload)),
            Err(reason) => skipped.push(Skipped {
                source: candidate.source,
                reason,
            }),
        }
    }
    let session_id = match &expect.session_id {
        Some(id) => id.clone(),
        None => most_common(decoded.iter().map(|(_, p)| &p.header.session.id))
            .cloned()
            .unwrap_or_default(),
    };
    let world_size = expect.world_size.unwrap_or_else(|| {
        decoded
            .iter()
            .filter(|(_, p)| p.header.session.id == session_id)
            .map(|(_, p)| p.header.rank.world_size)
            .max()
            .unwrap_or(0)
    });

    let mut by_rank: BTreeMap<u32, (String, Payload)> = BTreeMap::new();
    for (source, payload) in decoded {
        let header = &payload.header;
        let refusal = check(header, &session_id, world_size, expect).or_else(|| {
            by_rank
                .get(&header.rank.rank)
                .map(|(first, _)| Rejection::DuplicateRank {
                    rank: header.rank.rank,
                    first: first.clone(),
                })
        });
        match refusal {
            Some(reason) => skipped.push(Skipped { source, reason }),
            None => {
                by_rank.insert(header.rank.rank, (source, payload));
            }
        }
    }
    Gathered {
        world_size,
        missing: (0..world_size)
            .filter(|r| !by_rank.contains_key(r))
            .collect(),
        payloads: by_rank.into_values().map(|(_, payload)| payload).collect(),
        skipped,
    }
}

/// Why `header` does not belong to the report, if it does not.
fn check(
    header: &PayloadHeader,
    session_id: &str,
    world_size: u32,
    expect: &Expect,
) -> Option<Rejection> {
    let rank = header.rank.rank;
    if header.session.id != session_id {
        return Some(Rejection::OtherSession {
            found: header.session.id.clone(),
            expected: session_id.to_string(),
        });
    }
    if let Some(run) = &expect.run_id {
        if header.session.run_id.as_ref() != Some(run) {
            return Some(Rejection::OtherRun {
                found: header.session.run_id.clone(),
                expected: run.clone(),
            });
        }
    }
    if header.rank.world_size != world_size {
        return Some(Rejection::WorldSize {
            rank,
            found: header.rank.world_size,
            expected: world_size,
        });
    }
    if rank >= world_size {
        return Some(Rejection::OutsideWorld { rank, world_size });
    }
    if expect
        .ended_after_unix_ns
        .is_some_and(|after| session_end_unix_ns(header) < after)
    {
        return Some(Rejection::Stale);
    }
    None
}

fn session_end_unix_ns(header: &PayloadHeader) -> i64 {
    let duration = i64::try_from(header.clock.duration_ns).unwrap_or(i64::MAX);
    header.clock.start_unix_ns.saturating_add(duration)
}

/// The most frequent item; ties go to the smallest, so the choice is stable.
fn most_common<'a, T: Ord + 'a>(items: impl Iterator<Item = &'a T>) -> Option<&'a T> {
    let mut counts: BTreeMap<&T, usize> = BTreeMap::new();
    for item in items {
        *counts.entry(item).or_default() += 1;
    }
    let best = counts.values().copied().max()?;
    counts.into_iter().find(|&(_, n)| n == best).map(|(t, _)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(
        source: &str,
        session: &str,
        run: Option<&str>,
        rank: u32,
        world: u32,
    ) -> Candidate {
        let mut header = PayloadHeader::new(session, "t", rank, world);
        header.session.run_id = run.map(str::to_string);
        Candidate {
            source: source.into(),
            payload: Ok(Payload {
                header,
                tables: Default::default(),
            }),
        }
    }

    #[test]
    fn one_payload_per_rank_of_the_session_and_run() {
        let gathered = accept(
            vec![
                candidate("a", "job", Some("r2"), 0, 3),
                candidate("b", "job", Some("r1"), 1, 3),
                candidate("c", "other", Some("r2"), 1, 3),
                candidate("d", "job", Some("r2"), 0, 3),
                candidate("e", "job", Some("r2"), 5, 3),
            ],
            &Expect {
                session_id: Some("job".into()),
                run_id: Some("r2".into()),
                ..Expect::default()
            },
        );
        assert_eq!(gathered.world_size, 3);
        let ranks: Vec<u32> = gathered
            .payloads
            .iter()
            .map(|p| p.header.rank.rank)
            .collect();
        assert_eq!(ranks, [0]);
        assert_eq!(gathered.missing, [1, 2]);
        let reasons: Vec<(&str, String)> = gathered
            .skipped
            .iter()
            .map(|s| (s.source.as_str(), s.reason.to_string()))
            .collect();
        assert!(matches!(
            gathered.skipped[0].reason,
            Rejection::OtherRun { .. }
        ));
        assert_eq!(
            reasons[1..],
            [
                ("c", "belongs to session `other`, not `job`".to_string()),
                ("d", "claims rank 0, already provided by a".to_string()),
                ("e", "rank 5 is outside the world of 3".to_string()),
            ]
        );
    }

    #[test]
    fn without_expectations_the_most_common_session_wins() {
        let gathered = accept(
            vec![
                candidate("a", "x", None, 0, 2),
                candidate("b", "y", None, 0, 2),
                candidate("c", "y", None, 1, 2),
            ],
            &Expect::default(),
        );
        assert_eq!(gathered.payloads.len(), 2);
        assert_eq!(gathered.payloads[0].header.session.id, "y");
        assert!(gathered.missing.is_empty());
    }
}
