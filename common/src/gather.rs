//! What rank 0 accepts into a report, whatever transport carried the
//! payloads: the session, run and rank checks, the [`Gathered`] result and
//! the typed [`Rejection`] of an input that failed them. Transports (and
//! `rankscope aggregate`) turn what they received into [`Candidate`]s and
//! call [`accept`].

use std::collections::{BTreeMap, BTreeSet};
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
    #[error(
        "belongs to run `{}`, not to run `{}` that the report covers ({why})",
        .found.as_deref().unwrap_or("(no run id)"),
        .expected.as_deref().unwrap_or("(no run id)")
    )]
    OtherRun {
        /// The payload's run id.
        found: Option<String>,
        /// The run gathered.
        expected: Option<String>,
        /// Why the report covers that run.
        why: String,
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
    /// The payload claims a world larger than the configured maximum.
    #[error("rank {rank} claims a world of {found} ranks, more than max_world_size {max}")]
    WorldTooLarge {
        /// The payload's rank.
        rank: u32,
        /// Its world size.
        found: u32,
        /// The configured maximum.
        max: u32,
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
    /// A TCP connection to rank 0 that was cut off.
    #[error("connection refused: {0}")]
    Connection(#[source] ConnectionRefusal),
    /// A second payload for a rank already gathered.
    #[error("claims rank {rank}, already provided by {first}")]
    DuplicateRank {
        /// The rank.
        rank: u32,
        /// Where the accepted payload came from.
        first: String,
    },
    /// Inputs refused past the [`MAX_LISTED_SKIPPED`] listed one by one.
    #[error("{0} more inputs refused (not listed one by one)")]
    Unlisted(u64),
}

/// Refused inputs a gather lists one by one; the rest are counted in one
/// [`Rejection::Unlisted`] entry, so that a directory of 20,000 junk files
/// makes a report of bounded size.
pub const MAX_LISTED_SKIPPED: usize = 256;

/// `skipped` with at most [`MAX_LISTED_SKIPPED`] entries, the rest counted.
fn capped(mut skipped: Vec<Skipped>) -> Vec<Skipped> {
    if skipped.len() > MAX_LISTED_SKIPPED {
        let more = skipped.len() - MAX_LISTED_SKIPPED;
        skipped.truncate(MAX_LISTED_SKIPPED);
        skipped.push(Skipped {
            source: "more inputs".into(),
            reason: Rejection::Unlisted(more as u64),
        });
    }
    skipped
}

/// Why rank 0 cut a TCP connection off before it reached the report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionRefusal {
    /// The peer did not prove it knows the job token.
    #[error("wrong job token")]
    BadToken,
    /// The peer sent something that is not the protocol.
    #[error("not the rankscope protocol ({0})")]
    Malformed(&'static str),
    /// The peer announced a frame past the limit.
    #[error("a frame of {bytes} bytes announced, more than the {limit}-byte limit")]
    FrameTooLarge {
        /// Bytes announced.
        bytes: u64,
        /// The limit (`max_frame_bytes`).
        limit: u64,
    },
    /// The peer stopped sending (or never started) before the deadline.
    #[error("the peer went silent")]
    Stalled,
    /// The peer sent a frame slower than the least pace rank 0 takes.
    #[error("the peer sent its frame slower than {bytes_per_s} bytes/s after a grace")]
    TooSlow {
        /// The least pace.
        bytes_per_s: u64,
    },
    /// The peer closed or reset the connection midway.
    #[error("the peer closed the connection")]
    Closed,
    /// The peer claimed a rank outside the world.
    #[error("rank {rank} is outside the world of {world_size}")]
    OutsideWorld {
        /// The rank claimed.
        rank: u32,
        /// The world size.
        world_size: u32,
    },
    /// The peer claimed a rank of the world that does not send this
    /// listener what it came for (in a two-level gather a rank's payload
    /// goes to its node's leader, and only leaders send rank 0 digests).
    #[error("rank {rank} does not send its {what} here")]
    NotHere {
        /// The rank claimed.
        rank: u32,
        /// What it came to send: `payload`, `node digest`, `clock`.
        what: &'static str,
    },
    /// The peer claimed a rank whose payload already arrived: a conflict
    /// between two peers, of which the first is kept.
    #[error("a conflict: rank {rank}'s payload already arrived from {first}; the first is kept")]
    DuplicateRank {
        /// The rank claimed twice.
        rank: u32,
        /// Where the payload kept came from.
        first: String,
    },
    /// The peer's payload is not this rank's of this session and run.
    #[error("a payload refused: {0}")]
    WrongPayload(&'static str),
    /// The peer's node digest is not one rank 0 can read as its node's
    /// (it does not decode, or holds other ranks): the node is still
    /// awaited from its real leader.
    #[error("a node digest refused: {0}")]
    WrongDigest(String),
    /// The payload came after rank 0 stopped gathering.
    #[error("the payload came after the gather's deadline")]
    Late,
    /// Connections refused past the number listed one by one.
    #[error("{0} more connections refused (not listed one by one)")]
    Unlisted(u64),
    /// Every place of the rank it proved was taken (a rank's rendezvous,
    /// payload, mirror and window payload at once): it may try again.
    #[error("too many connections at once for its rank")]
    TooMany,
    /// Rank 0 had no file descriptor to spare to keep track of it.
    #[error("rank 0 had no file descriptor to spare for it")]
    NoResources,
    /// Cut off before its greeting arrived, to make room for newer
    /// connections (the listener had as many waiting for theirs as it keeps).
    #[error("cut off before its greeting arrived: too many connections were waiting")]
    Evicted,
    /// A window request whose nonce an earlier one had: a replay.
    #[error("a window request replayed (its nonce was used before)")]
    Replayed,
    /// More window controllers at once than rank 0 serves.
    #[error("too many window controllers at once")]
    Busy,
}

/// An input rank 0 (or `rankscope aggregate`) refused, and why.
#[derive(Debug)]
pub struct Skipped {
    /// The file (or peer) it came from.
    pub source: String,
    /// What is wrong with it.
    pub reason: Rejection,
}

/// What [`accept`] judges an input by: its payload header. A [`Payload`]
/// has one; so has any digest of a payload that keeps its header, which lets
/// `rankscope aggregate` reduce each rank as it is decoded instead of holding
/// every decoded payload at once.
pub trait Headed {
    /// The payload's header.
    fn header(&self) -> &PayloadHeader;
}

impl Headed for Payload {
    fn header(&self) -> &PayloadHeader {
        &self.header
    }
}

/// One input to [`accept`]: where it came from and what decoding it gave —
/// a [`Payload`], or what the reader made of one.
#[derive(Debug)]
pub struct Candidate<T = Payload> {
    /// The file (or peer) it came from.
    pub source: String,
    /// The payload, or why there is none.
    pub payload: Result<T, Rejection>,
}

/// Everything rank 0 gathered for one report.
#[derive(Debug)]
pub struct Gathered<T = Payload> {
    /// Ranks in the job.
    pub world_size: u32,
    /// One payload (or digest of one) per reporting rank, by rank.
    pub payloads: Vec<T>,
    /// Ranks below `world_size` with no payload.
    pub missing: Vec<u32>,
    /// Inputs refused.
    pub skipped: Vec<Skipped>,
    /// Where each payload came from (a file, a peer), as `payloads` are
    /// ordered.
    pub sources: Vec<String>,
    /// The payloads were judged this run's by their files' age alone (the
    /// directory transport without a run identity): `sources` names them.
    pub judged_by_age: bool,
    /// In a two-level gather, the digests the other nodes' leaders sent,
    /// as they arrived (the report's analysis decodes and checks them);
    /// their ranks are not in `payloads`, and not in `missing` either:
    /// which of them are missing is known once the digests are read.
    pub nodes: Vec<NodeSent>,
    /// 2 where the transport gathered through node leaders (whether or
    /// not any leader's digest came), else 1.
    pub gather_levels: u8,
}

impl<T> Gathered<T> {
    /// Takes the digests other nodes' leaders sent into a two-level
    /// gather: the ranks they answer for are no longer missing.
    pub fn add_nodes(&mut self, mut nodes: Vec<NodeSent>) {
        nodes.sort_by_key(|node| node.ranks.start);
        let answered = |rank: &u32| {
            let at = nodes.partition_point(|node| node.ranks.end <= *rank);
            nodes.get(at).is_some_and(|node| node.ranks.contains(rank))
        };
        self.missing.retain(|rank| !answered(rank));
        self.nodes = nodes;
        self.gather_levels = 2;
    }
}

/// A node digest a node leader sent rank 0 in a two-level gather, as it
/// arrived: encoded, not yet checked.
#[derive(Debug, Clone)]
pub struct NodeSent {
    /// Where it came from.
    pub source: String,
    /// The leader, as it authenticated.
    pub leader: u32,
    /// The ranks the leader answers for (its node's): a digest that holds
    /// any other is refused.
    pub ranks: std::ops::Range<u32>,
    /// The digest.
    pub bytes: Vec<u8>,
}

impl<T> Default for Gathered<T> {
    fn default() -> Self {
        Gathered {
            world_size: 0,
            payloads: Vec::new(),
            missing: Vec::new(),
            skipped: Vec::new(),
            sources: Vec::new(),
            judged_by_age: false,
            nodes: Vec::new(),
            gather_levels: 1,
        }
    }
}

/// Which run of a session a report covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RunFilter {
    /// Whatever run a payload says it belongs to.
    #[default]
    Any,
    /// Only payloads of this run; `None`: payloads that carry no run id.
    Only(Option<String>),
}

impl RunFilter {
    /// Whether a payload with `header` belongs to the run.
    pub fn admits(&self, header: &PayloadHeader) -> bool {
        match self {
            RunFilter::Any => true,
            RunFilter::Only(run) => &header.session.run_id == run,
        }
    }
}

/// What the payloads of one report must agree on. Without a session id, the
/// report covers one run of what the inputs hold: the run `run` names, else
/// the one with the most ranks, then the newest start; payloads of every
/// other run are refused, naming their run and why that one was chosen. Without a world size, the inputs' is taken.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// The session id.
    pub session_id: Option<String>,
    /// The run of that session.
    pub run: RunFilter,
    /// The world size.
    pub world_size: Option<u32>,
    /// The largest world size a payload may claim.
    pub max_world_size: Option<u32>,
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

/// Each distinct notice in `headers`, with the ranks that gave it, in the
/// order first seen.
pub fn notices<'a>(
    headers: impl IntoIterator<Item = &'a PayloadHeader>,
) -> Vec<(String, Vec<u32>)> {
    let mut out: Vec<(String, Vec<u32>)> = Vec::new();
    for header in headers {
        for notice in &header.notices {
            let rank = header.rank.rank;
            match out.iter_mut().find(|(text, _)| text == notice) {
                Some((_, ranks)) => ranks.push(rank),
                None => out.push((notice.clone(), vec![rank])),
            }
        }
    }
    out
}

/// Checks every candidate against `expect` and keeps one payload per rank:
/// the first one, in the order given. The others are skipped with the reason;
/// ranks with no payload are missing.
pub fn accept<T: Headed>(candidates: Vec<Candidate<T>>, expect: &Expect) -> Gathered<T> {
    let mut skipped = Vec::new();
    let decoded = decoded_within(candidates, expect.max_world_size, &mut skipped);
    let (session_id, run, why) = match &expect.session_id {
        Some(id) => (id.clone(), expect.run.clone(), "this process's run".into()),
        None => chosen_run(&decoded, &expect.run, now_unix_ns()),
    };
    // The world size of the run reported on, not of any other.
    let world_size = expect
        .world_size
        .unwrap_or_else(|| run_world_size(&decoded, &session_id, &run));
    let by_rank = first_per_rank(decoded, &mut skipped, |header| {
        check(header, &session_id, &run, &why, world_size, expect)
    });
    let missing = (0..world_size)
        .filter(|r| !by_rank.contains_key(r))
        .collect();
    let (sources, payloads) = by_rank.into_values().unzip();
    Gathered {
        world_size,
        missing,
        payloads,
        skipped: capped(skipped),
        sources,
        judged_by_age: false,
        nodes: Vec::new(),
        gather_levels: 1,
    }
}

/// The candidates that decoded to a payload of a world no larger than
/// `max_world_size`, with their sources; the others are added to `skipped`.
fn decoded_within<T: Headed>(
    candidates: Vec<Candidate<T>>,
    max_world_size: Option<u32>,
    skipped: &mut Vec<Skipped>,
) -> Vec<(String, T)> {
    let mut decoded = Vec::new();
    for candidate in candidates {
        match candidate.payload {
            Ok(payload) => match too_large(payload.header(), max_world_size) {
                Some(reason) => skipped.push(Skipped {
                    source: candidate.source,
                    reason,
                }),
                None => decoded.push((candidate.source, payload)),
            },
            Err(reason) => skipped.push(Skipped {
                source: candidate.source,
                reason,
            }),
        }
    }
    decoded
}

/// The largest world size the payloads of session `session_id`, run `run`,
/// claim; 0 without any.
fn run_world_size<T: Headed>(decoded: &[(String, T)], session_id: &str, run: &RunFilter) -> u32 {
    decoded
        .iter()
        .map(|(_, p)| p.header())
        .filter(|h| h.session.id == session_id && run.admits(h))
        .map(|h| h.rank.world_size)
        .max()
        .unwrap_or(0)
}

/// The first payload of each rank, in the order given, that `refusal`
/// does not refuse; the others are added to `skipped`, a later one of a
/// rank as a duplicate.
fn first_per_rank<T: Headed>(
    decoded: Vec<(String, T)>,
    skipped: &mut Vec<Skipped>,
    refusal: impl Fn(&PayloadHeader) -> Option<Rejection>,
) -> BTreeMap<u32, (String, T)> {
    let mut by_rank: BTreeMap<u32, (String, T)> = BTreeMap::new();
    for (source, payload) in decoded {
        let header = payload.header();
        let refusal = refusal(header).or_else(|| {
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
    by_rank
}

/// The refusal of a payload claiming a world past `max`.
fn too_large(header: &PayloadHeader, max: Option<u32>) -> Option<Rejection> {
    let max = max?;
    (header.rank.world_size > max).then_some(Rejection::WorldTooLarge {
        rank: header.rank.rank,
        found: header.rank.world_size,
        max,
    })
}

/// Why `header` does not belong to the report, if it does not.
fn check(
    header: &PayloadHeader,
    session_id: &str,
    run: &RunFilter,
    why: &str,
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
    if let RunFilter::Only(expected) = run {
        if !run.admits(header) {
            return Some(Rejection::OtherRun {
                found: header.session.run_id.clone(),
                expected: expected.clone(),
                why: why.to_string(),
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

/// How far in the future a run's start may lie and still be chosen
/// without being named (the ranks' clocks disagree a little).
const FUTURE_TOLERANCE_NS: i64 = 300_000_000_000;

/// The Unix time now, nanoseconds.
fn now_unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// The session and run a report of `decoded` covers, and why: the run
/// `wanted` names (in whichever session has it); else the run with the
/// most ranks, then the newest start among those — a run whose ranks all
/// claim to start more than 5 minutes after `now_ns` is chosen only when
/// no other is left (one forged file cannot outvote the real ranks, nor
/// outdate them with a start in the future).
fn chosen_run<T: Headed>(
    decoded: &[(String, T)],
    wanted: &RunFilter,
    now_ns: i64,
) -> (String, RunFilter, String) {
    /// Per run: its ranks, and its latest start no later than the tolerance
    /// (`None`: every start is in the future).
    type Runs<'a> = BTreeMap<(&'a str, &'a Option<String>), (BTreeSet<u32>, Option<i64>)>;
    let mut runs: Runs<'_> = BTreeMap::new();
    for (_, payload) in decoded {
        let header = payload.header();
        let session = &header.session;
        let start = header.clock.start_unix_ns;
        let (ranks, latest) = runs.entry((&session.id, &session.run_id)).or_default();
        // A rank outside the world it claims counts for nothing.
        if header.rank.rank < header.rank.world_size {
            ranks.insert(header.rank.rank);
        }
        if start <= now_ns.saturating_add(FUTURE_TOLERANCE_NS) {
            *latest = (*latest).max(Some(start));
        }
    }
    let (chosen, why) = match wanted {
        RunFilter::Only(run) => (
            runs.keys().find(|(_, r)| *r == run).copied(),
            "the run asked for".to_string(),
        ),
        RunFilter::Any => {
            let best = runs.iter().max_by_key(|&(key, (ranks, latest))| {
                (latest.is_some(), ranks.len(), *latest, *key)
            });
            let why = match best {
                Some((_, (ranks, Some(_)))) => format!(
                    "of the {} runs found, it has the most ranks ({}), then the latest start",
                    runs.len(),
                    ranks.len()
                ),
                _ => "every run found starts in the future".to_string(),
            };
            (best.map(|(key, _)| *key), why)
        }
    };
    match chosen {
        Some((session, run)) => (session.to_string(), RunFilter::Only(run.clone()), why),
        // Nothing matches: every payload is refused as another run's.
        None => (String::new(), wanted.clone(), why),
    }
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
                run: RunFilter::Only(Some("r2".into())),
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

    fn started(mut candidate: Candidate, start_unix_ns: i64) -> Candidate {
        if let Ok(payload) = &mut candidate.payload {
            payload.header.clock.start_unix_ns = start_unix_ns;
        }
        candidate
    }

    #[test]
    fn without_expectations_the_run_with_the_most_ranks_wins_then_the_newest() {
        let inputs = || {
            vec![
                started(candidate("a", "job", Some("r1"), 0, 2), 100),
                started(candidate("b", "job", Some("r1"), 1, 2), 101),
                started(candidate("c", "job", Some("r2"), 0, 2), 200),
            ]
        };
        let gathered = accept(inputs(), &Expect::default());
        assert_eq!(gathered.payloads.len(), 2);
        assert_eq!(
            gathered.payloads[0].header.session.run_id.as_deref(),
            Some("r1")
        );
        assert!(gathered.missing.is_empty());
        let [skipped] = gathered.skipped.as_slice() else {
            panic!("{:?}", gathered.skipped)
        };
        assert_eq!(
            skipped.reason.to_string(),
            "belongs to run `r2`, not to run `r1` that the report covers (of the 2 runs \
             found, it has the most ranks (2), then the latest start)"
        );

        // As many ranks: the newest, whatever its world size.
        let newest = accept(
            vec![
                started(candidate("c", "job", Some("r2"), 0, 2), 200),
                started(candidate("d", "job", Some("r3"), 0, 1), 300),
            ],
            &Expect::default(),
        );
        assert_eq!(newest.world_size, 1);
        assert_eq!(newest.payloads.len(), 1);
        assert!(newest.missing.is_empty());

        let older = accept(
            inputs(),
            &Expect {
                run: RunFilter::Only(Some("r2".into())),
                ..Expect::default()
            },
        );
        assert_eq!(older.payloads.len(), 1, "`--run r2` picks that run");
        assert!(older.skipped[0]
            .reason
            .to_string()
            .contains("(the run asked for)"));
    }

    /// One forged file, whether it claims a start in the far future or
    /// now, does not take the report from the four real ranks.
    #[test]
    fn one_forged_file_cannot_choose_the_run() {
        let now = now_unix_ns();
        let real = || {
            (0..4).map(|r| {
                started(
                    candidate("real", "job", Some("real"), r, 4),
                    now - 60_000_000_000,
                )
            })
        };
        for forged_start in [9_000_000_000_000_000_000, now + 1_000_000_000] {
            let mut inputs: Vec<Candidate> = real().collect();
            inputs.push(started(
                candidate("forged", "job", Some("forged"), 1, 4),
                forged_start,
            ));
            let gathered = accept(inputs, &Expect::default());
            assert_eq!(gathered.payloads.len(), 4, "the real ranks are reported");
            assert_eq!(gathered.skipped.len(), 1);
            assert!(gathered.skipped[0].source == "forged");
        }
        // Ranks outside the world their files claim count for nothing.
        let mut inputs: Vec<Candidate> = real().collect();
        inputs.extend(
            (10..16).map(|r| started(candidate("outside", "job", Some("forged"), r, 4), now)),
        );
        let gathered = accept(inputs, &Expect::default());
        assert_eq!(gathered.payloads.len(), 4, "the real ranks are reported");
        // Two ranks starting in the far future lose to one starting now.
        let future = 9_000_000_000_000_000_000;
        let gathered = accept(
            vec![
                started(candidate("f0", "job", Some("future"), 0, 2), future),
                started(candidate("f1", "job", Some("future"), 1, 2), future),
                started(candidate("now", "job", Some("now"), 0, 2), now),
            ],
            &Expect::default(),
        );
        assert_eq!(
            gathered.payloads[0].header.session.run_id.as_deref(),
            Some("now")
        );
    }

    /// 20,000 junk inputs are listed up to the cap and counted beyond it.
    #[test]
    fn refused_inputs_are_listed_up_to_a_cap_and_counted() {
        let mut inputs: Vec<Candidate> = (0..20_000)
            .map(|i| Candidate {
                source: format!("junk-{i}"),
                payload: Err(Rejection::NotAFile),
            })
            .collect();
        inputs.push(candidate("good", "s", Some("r"), 0, 1));
        let gathered = accept(inputs, &Expect::default());
        assert_eq!(gathered.payloads.len(), 1);
        assert_eq!(gathered.skipped.len(), MAX_LISTED_SKIPPED + 1);
        let last = gathered.skipped.last().unwrap();
        assert!(
            matches!(last.reason, Rejection::Unlisted(n) if n == 20_000 - MAX_LISTED_SKIPPED as u64)
        );
        assert_eq!(
            last.reason.to_string(),
            "19744 more inputs refused (not listed one by one)"
        );
    }
}
