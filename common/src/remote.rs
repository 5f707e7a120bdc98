//! Window control over the network: what `rankscope trigger ENDPOINT` and
//! `rankscope top ENDPOINT` send to rank 0's TCP listener and what it
//! answers, and what rank 0 sends the ranks that do not see its session
//! directory ([`Mirrored`]): the same window requests, plans and statuses
//! as the control files of [`crate::window`]. Each crosses an
//! authenticated connection (the job's token) as JSON.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::window::{LiveStatus, Plan, Request};

/// The longest rank 0 keeps a connection open for a window's report
/// (`rankscope trigger --wait`).
pub const MAX_REPORT_WAIT_MS: u64 = 3_600_000;

/// The longest rank 0 waits for its windows thread's plan.
pub const MAX_PLAN_WAIT_MS: u64 = 600_000;

/// A window asked for over the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteTrigger {
    /// The request, as `rankscope trigger --dir` writes it.
    pub request: Request,
    /// How long rank 0 waits for the plan (1 s to [`MAX_PLAN_WAIT_MS`]).
    pub plan_wait_ms: u64,
    /// How long rank 0 waits for the window's report before it answers
    /// (at most [`MAX_REPORT_WAIT_MS`]); 0: it answers with the plan alone.
    pub report_wait_ms: u64,
}

/// Rank 0's answers to a [`RemoteTrigger`]: the plan or a refusal, then,
/// where it waits for the report, whether the report was written; while
/// it waits, every few seconds, that it still does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum TriggerAnswer {
    /// The window planned, and where its report goes (on rank 0's
    /// machine).
    Planned {
        /// The plan every rank follows.
        plan: Plan,
        /// The window's report folder.
        report_dir: PathBuf,
    },
    /// The window planned or open ended early (`--cancel`), as its plan
    /// now says (0 steps: it never opens).
    Cancelled {
        /// The plan as rewritten.
        plan: Plan,
        /// The window's report folder (where it has steps).
        report_dir: PathBuf,
    },
    /// The window's report is written.
    Written {
        /// Its folder.
        report_dir: PathBuf,
    },
    /// No window, or no report within the wait: why.
    Refused {
        /// What rank 0 says.
        reason: String,
    },
    /// Rank 0 still waits (for the plan or the report).
    Waiting,
}

/// Every rank's status as rank 0 reads it, for `rankscope top ENDPOINT`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusSnapshot {
    /// The session directory (on rank 0's machine).
    pub session_dir: PathBuf,
    /// Ranks in the job.
    pub world_size: u32,
    /// The ranks of rank 0's run that shared a status lately, by rank.
    pub statuses: Vec<(u32, LiveStatus)>,
}

/// A rank's live status on its mirror's connection: its own, or, from a
/// node leader, one of its node's ranks' that the leader relays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankStatus {
    /// The rank whose status it is.
    pub rank: u32,
    /// The status.
    pub status: LiveStatus,
}

/// What rank 0 sends a rank that does not see its session directory, on
/// the connection over which that rank mirrors the window control files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mirrored", rename_all = "snake_case")]
pub enum Mirrored {
    /// A window plan rank 0 wrote: the rank writes it into its own
    /// control folder.
    Plan {
        /// The plan.
        plan: Plan,
    },
    /// `rankscope top` watches: the rank shares its status.
    Watch,
}
