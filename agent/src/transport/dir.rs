//! The shared-directory transport: every rank's spill file is its send; rank
//! 0 waits until every rank's file is there (or the deadline passes), then
//! reads them all. It has no rendezvous: the run's identity is the one the
//! launcher gives, and clock offsets are not measured.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rankscope_common::gather::{self, Expect};
use rankscope_common::payload::{ClockSync, TransportName};
use rankscope_common::{spill, Gathered};

use super::{Rendezvous, SessionInfo, Transport, TransportError};

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

    fn open(&mut self, session: &SessionInfo<'_>) -> Result<Rendezvous, TransportError> {
        Ok(Rendezvous {
            run_id: session.run_id.map(str::to_string),
            clock_sync: ClockSync::None,
            offset: None,
        })
    }

    fn gather(
        &mut self,
        _payload: &[u8],
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Option<Gathered>, TransportError> {
        // Every rank has already spilled its payload: that is the send.
        if session.rank != 0 {
            return Ok(None);
        }
        let fresh_after_ns = session.started_unix_ns - CLOCK_SKEW_NS;
        let fresh_after = UNIX_EPOCH + Duration::from_nanos(fresh_after_ns.max(0) as u64);
        wait_for_files(
            session.session_dir,
            session.world_size,
            fresh_after,
            deadline,
        );
        let candidates =
            spill::read_dir(session.session_dir).map_err(|source| TransportError::Io {
                path: session.session_dir.to_path_buf(),
                source,
            })?;
        let expect = Expect {
            session_id: Some(session.session_id.to_string()),
            run_id: session.run_id.map(str::to_string),
            world_size: Some(session.world_size),
            ended_after_unix_ns: Some(fresh_after_ns),
        };
        Ok(Some(gather::accept(candidates, &expect)))
    }
}

/// Waits until `rank-00000.rsp` .. for every rank of `world_size` exist in
/// `dir`, written after `fresh_after` (an older file is left from an earlier
/// run), or `deadline` passes; returns whether all arrived.
fn wait_for_files(dir: &Path, world_size: u32, fresh_after: SystemTime, deadline: Instant) -> bool {
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
