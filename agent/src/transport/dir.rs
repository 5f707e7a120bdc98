//! The shared-directory transport: every rank's spill file is its send; rank
//! 0 waits until every rank's file is there (or the deadline passes), then
//! reads them all. It has no rendezvous: the run's identity is the one the
//! launcher gives, and clock offsets are not measured.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rankscope_common::gather::{self, Candidate, Expect, Rejection, RunFilter};
use rankscope_common::payload::{self, ClockSync, TransportName};
use rankscope_common::{spill, Gathered};

use super::{Rendezvous, SessionInfo, Transport, TransportError};
use crate::notice::notice;

/// How often rank 0 looks for the other ranks' files.
const POLL: Duration = Duration::from_millis(50);
/// Wall clocks of the ranks may disagree by this much.
const CLOCK_SKEW_NS: i64 = 5_000_000_000;

/// Gathers through spill files in the session directory.
#[derive(Debug, Default)]
pub struct DirTransport;

impl Transport for DirTransport {
    fn name(&self) -> TransportName {
        TransportName::Dir
    }

    fn open(
        &mut self,
        session: &SessionInfo<'_>,
        _deadline: Instant,
    ) -> Result<Rendezvous, TransportError> {
        if session.run_id.is_none() && session.world_size > 1 && session.rank == 0 {
            notice!(
                "no run identity: a run started within seconds of an earlier one under the \
                 same session id could be mixed into its report; set RANKSCOPE_RUN_ID to a \
                 fresh value per launch (or torchrun's --rdzv-id)"
            );
        }
        Ok(Rendezvous {
            run_id: session.run_id.map(str::to_string),
            clock_sync: ClockSync::None,
            offset: None,
            endpoint: None,
        })
    }

    fn gather(
        &mut self,
        payload: &[u8],
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Option<Gathered>, TransportError> {
        // Every rank has already spilled its payload: that is the send.
        if session.rank != 0 {
            return Ok(None);
        }
        let io = |source| TransportError::Io {
            path: session.session_dir.to_path_buf(),
            source,
        };
        // A file older than this run (less the clocks' disagreement) is
        // left from an earlier one.
        let fresh_after_ns = session.started_unix_ns - CLOCK_SKEW_NS;
        let (dir, run) = (session.session_dir, session.run_id);
        // The run's tag in the file names is what tells runs apart; only
        // without one does the files' age have to.
        let fresh_after = match run {
            Some(_) => UNIX_EPOCH,
            None => UNIX_EPOCH + Duration::from_nanos(fresh_after_ns.max(0) as u64),
        };
        wait_for_files(dir, session.world_size, run, fresh_after, deadline).map_err(io)?;

        // Rank 0's own payload first: it wins over any other claiming rank 0.
        let own = session.spill_file.map(Path::to_path_buf);
        let mut candidates = vec![Candidate {
            source: own
                .as_ref()
                .map_or_else(|| "rank 0".to_string(), |p| p.display().to_string()),
            payload: payload::decode(payload).map_err(Rejection::Payload),
        }];
        let found = spill::find(dir, None, run, fresh_after).map_err(io)?;
        let others = found
            .files
            .into_iter()
            .filter(|path| Some(path) != own.as_ref())
            .chain(found.special);
        let mut others = spill::read_files(others);
        if run.is_none() {
            // Without a run identity, two jobs sharing a session id leave a
            // file of each rank each: the one that started nearest rank 0
            // goes first and is kept, the other refused as a duplicate.
            others.sort_by_key(|candidate| {
                candidate.payload.as_ref().map_or(u64::MAX, |payload| {
                    payload
                        .header
                        .clock
                        .start_unix_ns
                        .abs_diff(session.started_unix_ns)
                })
            });
        }
        candidates.extend(others);
        let expect = Expect {
            session_id: Some(session.session_id.to_string()),
            run: match run {
                Some(run) => RunFilter::Only(Some(run.to_string())),
                None => RunFilter::Any,
            },
            world_size: Some(session.world_size),
            max_world_size: None,
            // Within one identified run, a file is this run's whatever its
            // clock says; without an identity, an old one is another run's.
            ended_after_unix_ns: run.is_none().then_some(fresh_after_ns),
        };
        let mut gathered = gather::accept(candidates, &expect);
        // A job of one rank has a fresh session id of its own: nothing to
        // tell apart.
        gathered.judged_by_age = run.is_none() && session.world_size > 1;
        Ok(Some(gathered))
    }
}

/// Waits until a spill file of every rank of `world_size` in run `run_id`
/// is in `dir`, written after `fresh_after`, or `deadline` passes.
fn wait_for_files(
    dir: &Path,
    world_size: u32,
    run_id: Option<&str>,
    fresh_after: SystemTime,
    deadline: Instant,
) -> std::io::Result<()> {
    loop {
        let present: BTreeSet<u32> = spill::find(dir, None, run_id, fresh_after)?
            .files
            .iter()
            .filter_map(|path| spill::rank_of(&path.file_name()?.to_string_lossy()))
            .filter(|&rank| rank < world_size)
            .collect();
        let now = Instant::now();
        if present.len() as u32 >= world_size || now >= deadline {
            return Ok(());
        }
        std::thread::sleep(POLL.min(deadline - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::payload::Compression;
    use rankscope_common::spill::SpillName;
    use rankscope_common::{Payload, PayloadHeader};

    /// Rank `rank`'s payload of session `s`, started at `start_unix_ns`.
    fn payload(rank: u32, start_unix_ns: i64) -> Vec<u8> {
        let mut header = PayloadHeader::new("s", "t", rank, 2);
        header.clock.start_unix_ns = start_unix_ns;
        let payload = Payload {
            header,
            tables: Default::default(),
        };
        payload::encode(&payload, Compression::Zstd).unwrap()
    }

    /// Two jobs without a run identity share a session id and a
    /// directory: each left a file of rank 1. Rank 0 keeps the one whose
    /// session started nearest its own, whichever name sorts first, and
    /// refuses the other as a duplicate.
    #[test]
    fn without_a_run_id_the_rank_file_that_started_nearest_rank_0_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64;
        // The other job's file sorts first by name (its process number).
        for (process, start) in [(1, started - 3_000_000_000), (2, started + 200_000_000)] {
            let name = SpillName {
                rank: 1,
                run_id: None,
                process,
            };
            spill::write(dir.path(), &name, &payload(1, start)).unwrap();
        }
        let session = SessionInfo {
            rank: 0,
            world_size: 2,
            session_id: "s",
            run_id: None,
            launch_run_id: None,
            session_dir: dir.path(),
            spill_file: None,
            started_unix_ns: started,
            index: 0,
            control: None,
        };
        let gathered = DirTransport
            .gather(&payload(0, started), &session, Instant::now())
            .unwrap()
            .unwrap();
        let rank_1 = &gathered.payloads[1].header;
        assert_eq!(rank_1.clock.start_unix_ns, started + 200_000_000);
        assert!(
            gathered
                .skipped
                .iter()
                .any(|s| matches!(s.reason, Rejection::DuplicateRank { rank: 1, .. })),
            "{:?}",
            gathered.skipped
        );
    }
}
