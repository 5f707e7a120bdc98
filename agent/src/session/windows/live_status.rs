//! A rank's live status ([`LiveStatus`]): its pace of steps measured over
//! each second, its open stages and its GPUs' latest readings, shared in
//! the session directory's control folder each second while anyone reads
//! it — rank 0, where windows open on imbalance, or `rankscope top`, while
//! it keeps `control/watch` fresh. Nobody reading, nothing is written.

use std::path::Path;
use std::time::{Duration, Instant};

use rankscope_common::window::{self, LiveStatus};

use super::Hub;
use crate::control::Inbox;
use crate::notice::notice;

/// How long each pace is measured over, and how often a status is shared.
const MEASURE: Duration = Duration::from_secs(1);
/// How long `rankscope top`'s last word that it watches holds.
pub(super) const WATCHED_FOR: Duration = Duration::from_secs(5);

/// One rank's pace of steps, measured, and its status shared when asked.
pub(super) struct StatusSharing {
    /// Whether windows open on imbalance: rank 0 reads every status.
    always: bool,
    /// The rank's host (or node) name.
    host: String,
    /// Since when the pace is measured, and the step count then.
    since: (Instant, u64),
    /// When the step count last changed, and to what.
    last_step: (Instant, u64),
    /// The last pace measured, seconds per step.
    step_s: Option<f64>,
    /// Whether a status could not be written (said once).
    unwritable: bool,
}

impl StatusSharing {
    /// Sharing each second (`always`: windows open on imbalance), else
    /// only while `rankscope top` watches, of a rank on `host`.
    pub(super) fn new(always: bool, host: String) -> Self {
        let now = Instant::now();
        StatusSharing {
            always,
            host,
            since: (now, 0),
            last_step: (now, 0),
            step_s: None,
            unwritable: false,
        }
    }

    /// Notes the step count `steps`; once a second, measures the pace and
    /// shares this rank's status where it is read (`told`: rank 0 said
    /// over the mirror that `rankscope top` watches): in `dir`, or to
    /// `inbox` for the mirror where rank 0 does not see `dir`; returns
    /// whether it did.
    pub(super) fn share(
        &mut self,
        hub: &Hub,
        (dir, inbox, told): (&Path, &Inbox, bool),
        run: Option<&str>,
        steps: u64,
    ) -> bool {
        let now = Instant::now();
        if steps != self.last_step.1 {
            self.last_step = (now, steps);
        }
        let (since, then) = self.since;
        let elapsed = now.duration_since(since);
        if elapsed < MEASURE {
            return false;
        }
        self.since = (now, steps);
        self.step_s = match steps.saturating_sub(then) {
            _ if steps == 0 => None,
            // A rank that stopped stepping lags by the time since it did.
            0 => Some(now.duration_since(self.last_step.0).as_secs_f64()),
            stepped => Some(elapsed.as_secs_f64() / stepped as f64),
        };
        if !self.always && !told && !window::watched(dir, WATCHED_FOR) {
            return false;
        }
        let (gpus, simulated) = hub.telemetry.latest_gpus();
        let status = LiveStatus {
            run: run.map(str::to_string),
            world_size: hub.env.world_size,
            host: self.host.clone(),
            elapsed_s: hub.recording().recorder().now_ns() as f64 / 1e9,
            steps,
            step_s: self.step_s,
            stages: hub.recording().recorder().open_stage_names(),
            gpus,
            simulated,
        };
        if inbox.apart() {
            inbox.share_status(status);
            return true;
        }
        if let Err(e) = window::write_status(dir, hub.env.rank, status) {
            if !std::mem::replace(&mut self.unwritable, true) {
                notice!("this rank's live status cannot be shared: {e}");
            }
            return false;
        }
        true
    }
}
