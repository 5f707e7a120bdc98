//! Windows: spans of steps that every rank of a running session profiles at
//! once, each with its own cross-rank report in `<session dir>/window-<k>/`.
//!
//! This module holds what the ranks and `rankscope trigger` share: the
//! window a payload covers ([`WindowMeta`], in its header), and the control
//! files through which a window is asked for and planned, in the session
//! directory's `control/` folder:
//!
//! - `request-<nonce>.json` ([`Request`]): written by `rankscope trigger`
//!   (or by rank 0 itself on `SIGUSR1`); rank 0 reads and removes it;
//! - `plan-<k>.json` ([`Plan`]): rank 0's answer, the window every rank
//!   opens at step `first_step` for `steps` steps; the other ranks look for
//!   the next plan at their step boundaries' pace;
//! - `refused-<nonce>.json` ([`Refusal`]): rank 0's answer when it cannot
//!   plan the window asked for, with the reason;
//! - `status-<rank>.json` ([`LiveStatus`]): each rank's pace of steps, open
//!   stages and latest GPU readings, rewritten each second where windows
//!   open on imbalance (rank 0 reads them all) or while `rankscope top`
//!   watches (it keeps `watch` fresh).
//!
//! Whoever can write into the session directory can ask for a window: the
//! directory's permissions are the authentication. Every file is written
//! atomically and read with a size limit; one that does not parse is
//! refused by name, never trusted.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The folder of a session directory that holds the control files.
pub const CONTROL_DIR: &str = "control";
/// The largest control file read, bytes: a plan or a request is a line.
const MAX_CONTROL_BYTES: u64 = 4096;
/// The longest nonce kept, bytes (a longer one is refused).
const MAX_NONCE_BYTES: usize = 64;
/// The most steps a window asked for may cover, and the most it may wait
/// to open: past these a request (or a plan) is refused.
pub const MAX_WINDOW_STEPS: u64 = 1_000_000_000;
/// The longest window asked for in time, milliseconds: an hour, as long
/// as one request may hold the windows (its delay and steps together).
pub const MAX_WINDOW_MS: u64 = 3_600_000;

/// What opened a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// `window_every_steps`: windows one after another.
    Rolling,
    /// `window_every_s`: a window every so many seconds.
    Periodic,
    /// `rankscope trigger`.
    Command,
    /// `SIGUSR1` to rank 0.
    Signal,
    /// `window_on_imbalance_pct`: one rank's steps began to lag the others'.
    Imbalance,
}

impl Trigger {
    /// The name the report uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Rolling => "rolling",
            Trigger::Periodic => "periodic",
            Trigger::Command => "command",
            Trigger::Signal => "signal",
            Trigger::Imbalance => "imbalance",
        }
    }
}

/// The window a payload covers, as the rank that wrote it saw it: which
/// window, its steps, and when it opened and closed on this rank's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowMeta {
    /// The window's number in its session, from 1.
    pub index: u32,
    /// What opened it.
    pub trigger: Trigger,
    /// The step at which every rank was to open it.
    pub planned_first_step: u64,
    /// Steps it was to cover.
    pub planned_steps: u64,
    /// The step at which it opened on this rank: the plan's, or later where
    /// this rank heard of the plan late.
    pub first_step: u64,
    /// Steps it covered on this rank: fewer than planned where it opened
    /// late or the session ended first.
    pub steps: u64,
    /// When it opened, nanoseconds after the session's start.
    pub started_ns: u64,
    /// How long it was open, nanoseconds.
    pub duration_ns: u64,
    /// Why rank 0 ended it before its planned steps, where it did.
    #[serde(default)]
    pub cancelled: Option<String>,
}

/// A window asked for, as `rankscope trigger` writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Tells the answer to this request from others'.
    pub nonce: String,
    /// Steps the window covers (0: as many as `duration_ms` at rank 0's
    /// pace, else the job's `window_steps`).
    pub steps: u64,
    /// Steps to let pass before it opens.
    pub delay_steps: u64,
    /// What asked: `command` or `signal`.
    pub trigger: Trigger,
    /// Python ranks also capture the window with torch.profiler (`--torch`).
    #[serde(default)]
    pub torch: bool,
    /// Python ranks also trace their Python functions in the window
    /// (`--python`).
    #[serde(default)]
    pub python: bool,
    /// A window of about this many milliseconds (`--seconds`): rank 0
    /// turns it into steps at its pace. 0: by steps.
    #[serde(default)]
    pub duration_ms: u64,
    /// Not a window but the end of the one planned or open now
    /// (`--cancel`): the others fields are not read.
    #[serde(default)]
    pub cancel: bool,
    /// The window a cancel ends (`--cancel K`): refused where another is
    /// planned or open. `None`: whichever is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_window: Option<u32>,
}

/// A window rank 0 planned: every rank opens it at `first_step`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The window's number, from 1.
    pub index: u32,
    /// The step at which every rank opens it.
    pub first_step: u64,
    /// Steps it covers.
    pub steps: u64,
    /// What asked for it.
    pub trigger: Trigger,
    /// The request it answers.
    pub nonce: String,
    /// Python ranks also capture it with torch.profiler.
    #[serde(default)]
    pub torch: bool,
    /// Python ranks also trace their Python functions in it.
    #[serde(default)]
    pub python: bool,
    /// The run it belongs to (rank 0's rendezvous identity): a plan an
    /// earlier launch left in the same folder is not this run's.
    #[serde(default)]
    pub run: Option<String>,
    /// Set where rank 0 ended the window before its steps: the plan is
    /// rewritten once, with `steps` cut to where it closes (0: it never
    /// opens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<Cancelled>,
}

/// Why and on whose request rank 0 ended a window early.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    /// The cancel request's nonce (the plan's own where it expired).
    pub nonce: String,
    /// Why: `rankscope trigger --cancel`, or its first step did not come
    /// in time.
    pub reason: String,
}

impl Plan {
    /// The step at which the window closes on every rank.
    pub fn close_step(&self) -> u64 {
        self.first_step.saturating_add(self.steps)
    }
}

/// What a rank is doing, as it shares it each second: for windows on
/// imbalance and for `rankscope top`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveStatus {
    /// The run it belongs to: a status an earlier launch left is not read.
    pub run: Option<String>,
    /// Ranks in the job.
    pub world_size: u32,
    /// The rank's host.
    pub host: String,
    /// Seconds since its session started.
    pub elapsed_s: f64,
    /// Steps ended so far.
    pub steps: u64,
    /// Seconds per step over the last second or more measured; where no
    /// step ended in it, the seconds since the last one did; `None` before
    /// the first step.
    pub step_s: Option<f64>,
    /// The stages open now, innermost last: the innermost
    /// [`MAX_STATUS_STAGES`], each cut to [`MAX_STATUS_NAME`] characters.
    pub stages: Vec<String>,
    /// Its GPUs' latest readings, the first [`MAX_STATUS_GPUS`].
    pub gpus: Vec<GpuStatus>,
    /// Whether the GPU readings are simulated (the demo's).
    pub simulated: bool,
}

/// One GPU's latest readings in a [`LiveStatus`]; `None` where not read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// The device's index.
    pub index: u32,
    /// Utilisation, %.
    pub util_pct: Option<f64>,
    /// Temperature, °C.
    pub temperature_c: Option<f64>,
    /// Memory in use, MiB.
    pub memory_used_mib: Option<f64>,
}

/// Stages a status lists.
pub const MAX_STATUS_STAGES: usize = 4;
/// Characters of a stage name a status keeps.
pub const MAX_STATUS_NAME: usize = 64;
/// GPUs a status lists.
pub const MAX_STATUS_GPUS: usize = 16;
/// The file `rankscope top` keeps fresh while it watches.
pub const WATCH_FILE: &str = "watch";

impl LiveStatus {
    /// Cuts what it lists to the bounds a control file holds.
    pub fn bounded(mut self) -> Self {
        let first = self.stages.len().saturating_sub(MAX_STATUS_STAGES);
        self.stages.drain(..first);
        for stage in &mut self.stages {
            if let Some((cut, _)) = stage.char_indices().nth(MAX_STATUS_NAME) {
                stage.truncate(cut);
            }
        }
        self.host = self.host.chars().take(MAX_STATUS_NAME).collect();
        self.gpus.truncate(MAX_STATUS_GPUS);
        self
    }

    /// Its seconds per step, where it stepped and the time is usable.
    pub fn pace(&self) -> Option<f64> {
        self.step_s
            .filter(|s| self.steps > 0 && s.is_finite() && *s > 0.0)
    }
}

/// Writes `rank`'s `status` ([`LiveStatus::bounded`]), atomically, over
/// the one before.
pub fn write_status(session_dir: &Path, rank: u32, status: LiveStatus) -> std::io::Result<()> {
    write_json(&status_path(session_dir, rank), &status.bounded())
}

/// The statuses of ranks `ranks` of run `run` written within `fresh`, by
/// rank: a rank with no status yet, an old one (a rank gone), or one that
/// cannot be read, is left out.
pub fn read_statuses(
    session_dir: &Path,
    ranks: Range<u32>,
    run: Option<&str>,
    fresh: std::time::Duration,
) -> Vec<(u32, LiveStatus)> {
    ranks
        .filter(|&rank| written_within(&status_path(session_dir, rank), fresh))
        .filter_map(|rank| {
            let status = read_status(session_dir, rank).ok()?;
            (status.run.as_deref() == run).then_some((rank, status))
        })
        .collect()
}

/// Whether the file at `path` was written within the last `within`; one
/// stamped later than now (a file server's clock ahead of this one's) is
/// as new as now.
fn written_within(path: &Path, within: std::time::Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|at| at.elapsed().map_or(true, |age| age <= within))
}

/// How long a rank's status stays news: one older is of a rank that
/// stopped sharing (gone, or its windows thread stuck).
pub const FRESH_STATUS: std::time::Duration = std::time::Duration::from_secs(5);

/// The status file of `rank`.
pub fn status_path(session_dir: &Path, rank: u32) -> PathBuf {
    control_dir(session_dir).join(format!("status-{rank}.json"))
}

/// `rank`'s last status, of whichever run.
pub fn read_status(session_dir: &Path, rank: u32) -> Result<LiveStatus, ControlError> {
    read_json(&status_path(session_dir, rank))
}

/// Says that `rankscope top` watches `session_dir` now: the ranks share
/// their status each second while this was said within the last few.
pub fn watch(session_dir: &Path) -> std::io::Result<()> {
    let dir = control_dir(session_dir);
    std::fs::create_dir_all(&dir)?;
    crate::file::write_atomic(&dir.join(WATCH_FILE), b"top\n")
}

/// Whether `rankscope top` said it watches `session_dir` within `within`.
pub fn watched(session_dir: &Path, within: std::time::Duration) -> bool {
    written_within(&control_dir(session_dir).join(WATCH_FILE), within)
}

/// Rank 0's answer to a request it cannot plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The request refused.
    pub nonce: String,
    /// Why.
    pub reason: String,
}

/// Why a control file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// It could not be opened or read.
    #[error("reading {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is larger than a control file can be.
    #[error("{path} is larger than the {MAX_CONTROL_BYTES} bytes a control file can be")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// It is not what its name says.
    #[error("{path} is not a valid control file: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The file rank 0 keeps in the control folder while its session runs
/// (and can plan windows): its host and process id, on one line.
pub const LIVE_FILE: &str = "live";

/// Rank 0 on `host`: says in `session_dir` that a session runs there.
pub fn write_live(session_dir: &Path, host: &str) -> std::io::Result<()> {
    let dir = control_dir(session_dir);
    std::fs::create_dir_all(&dir)?;
    let line = format!("{host} {}", std::process::id());
    crate::file::write_atomic(&dir.join(LIVE_FILE), line.as_bytes())
}

/// The host and process id of the rank 0 that says a session runs in
/// `session_dir`, where its file says them.
pub fn live_owner(session_dir: &Path) -> Option<(String, u32)> {
    let file = crate::file::open_regular(&control_dir(session_dir).join(LIVE_FILE), false).ok()?;
    let text = String::from_utf8(crate::file::read_capped(file, MAX_CONTROL_BYTES).ok()?).ok()?;
    let (host, pid) = text.trim().rsplit_once(' ')?;
    Some((host.to_string(), pid.parse().ok()?))
}

/// Rank 0: its session there has ended (the control folder goes too,
/// where nothing else is left in it).
pub fn remove_live(session_dir: &Path) {
    let dir = control_dir(session_dir);
    let _ = std::fs::remove_file(dir.join(LIVE_FILE));
    let _ = std::fs::remove_dir(dir);
}

/// Whether a session runs in `session_dir` (its rank 0 said so).
pub fn is_live(session_dir: &Path) -> bool {
    control_dir(session_dir).join(LIVE_FILE).is_file()
}

/// The control folder of `session_dir`.
pub fn control_dir(session_dir: &Path) -> PathBuf {
    session_dir.join(CONTROL_DIR)
}

/// The report folder of window `index` in `session_dir`.
pub fn window_dir(session_dir: &Path, index: u32) -> PathBuf {
    session_dir.join(format!("window-{index}"))
}

/// The plan file of window `index`.
pub fn plan_path(session_dir: &Path, index: u32) -> PathBuf {
    control_dir(session_dir).join(format!("plan-{index}.json"))
}

/// The refusal file of the request with `nonce`.
pub fn refusal_path(session_dir: &Path, nonce: &str) -> PathBuf {
    control_dir(session_dir).join(format!("refused-{nonce}.json"))
}

/// Whether `nonce` is one a request may carry: 1 to 64 ASCII letters,
/// digits, `-` or `_` (it becomes part of a file name).
pub fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce.len() <= MAX_NONCE_BYTES
        && nonce
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Writes `request` into the control folder of `session_dir` (made if
/// missing) as one file, atomically; returns its path.
pub fn write_request(session_dir: &Path, request: &Request) -> std::io::Result<PathBuf> {
    if !valid_nonce(&request.nonce) {
        return Err(std::io::Error::other(format!(
            "nonce `{}` is not 1 to {MAX_NONCE_BYTES} letters, digits, `-` or `_`",
            request.nonce
        )));
    }
    let path = control_dir(session_dir).join(format!("request-{}.json", request.nonce));
    write_json(&path, request)?;
    Ok(path)
}

/// Writes `plan` as window `plan.index`'s plan file, atomically.
pub fn write_plan(session_dir: &Path, plan: &Plan) -> std::io::Result<()> {
    write_json(&plan_path(session_dir, plan.index), plan)
}

/// Writes `refusal` as its request's answer, atomically.
pub fn write_refusal(session_dir: &Path, refusal: &Refusal) -> std::io::Result<()> {
    write_json(&refusal_path(session_dir, &refusal.nonce), refusal)
}

/// Window `index`'s plan, `None` while there is none.
pub fn read_plan(session_dir: &Path, index: u32) -> Result<Option<Plan>, ControlError> {
    let path = plan_path(session_dir, index);
    if !path.exists() {
        return Ok(None);
    }
    let plan: Plan = read_json(&path)?;
    let reason = if plan.index != index {
        format!("it plans window {}", plan.index)
    } else if (plan.steps == 0 && plan.cancelled.is_none()) || plan.steps > MAX_WINDOW_STEPS {
        format!("its {} steps are not 1 to {MAX_WINDOW_STEPS}", plan.steps)
    } else {
        return Ok(Some(plan));
    };
    Err(ControlError::Invalid { path, reason })
}

/// The answer to the request with `nonce`, `None` while there is none;
/// read once (the file goes).
pub fn take_refusal(session_dir: &Path, nonce: &str) -> Result<Option<Refusal>, ControlError> {
    let path = refusal_path(session_dir, nonce);
    if !path.exists() {
        return Ok(None);
    }
    let refusal = read_json(&path);
    let _ = std::fs::remove_file(&path);
    refusal.map(Some)
}

/// The plan that answers the request with `nonce`, among the plan files of
/// `session_dir` (whatever else is there), `None` while there is none.
pub fn plan_for(session_dir: &Path, nonce: &str) -> Option<Plan> {
    let entries = std::fs::read_dir(control_dir(session_dir)).ok()?;
    entries.filter_map(Result::ok).find_map(|entry| {
        let name = entry.file_name();
        let index: u32 = name
            .to_str()?
            .strip_prefix("plan-")?
            .strip_suffix(".json")?
            .parse()
            .ok()?;
        read_plan(session_dir, index).ok().flatten().filter(|plan| {
            plan.nonce == nonce || plan.cancelled.as_ref().is_some_and(|c| c.nonce == nonce)
        })
    })
}

/// The request files in the control folder of `session_dir`, oldest name
/// first, at most `max`; the number found beyond that is returned too.
pub fn pending_requests(session_dir: &Path, max: usize) -> std::io::Result<(Vec<PathBuf>, usize)> {
    let dir = control_dir(session_dir);
    let mut found: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        // Regular files only: a folder or a link named like a request is
        // no request (and could not be removed once answered).
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("request-") && n.ends_with(".json"))
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    found.sort();
    let beyond = found.len().saturating_sub(max);
    found.truncate(max);
    Ok((found, beyond))
}

/// Reads a request file (`rankscope trigger`'s: its trigger is always
/// [`Trigger::Command`]); one whose nonce is not [`valid_nonce`] is
/// invalid (no answer can be named for it). Past that, what it asks is
/// the answerer's to judge ([`Request::problem`]), and to refuse by its
/// nonce.
pub fn read_request(path: &Path) -> Result<Request, ControlError> {
    let mut request: Request = read_json(path)?;
    if !valid_nonce(&request.nonce) {
        return Err(ControlError::Invalid {
            path: path.to_path_buf(),
            reason: "its nonce is not 1 to 64 letters, digits, `-` or `_`".into(),
        });
    }
    request.trigger = Trigger::Command;
    Ok(request)
}

impl Request {
    /// A request of `rankscope trigger`, `nonce`, for a window of `steps`
    /// steps at once (0: the job's `window_steps`); its other fields say
    /// nothing more.
    pub fn command(nonce: impl Into<String>, steps: u64) -> Request {
        Request {
            nonce: nonce.into(),
            steps,
            delay_steps: 0,
            trigger: Trigger::Command,
            torch: false,
            python: false,
            duration_ms: 0,
            cancel: false,
            cancel_window: None,
        }
    }

    /// What makes the request one no window can answer, if anything: a
    /// nonce that is not [`valid_nonce`], steps and a delay together past
    /// [`MAX_WINDOW_STEPS`], a duration past [`MAX_WINDOW_MS`].
    pub fn problem(&self) -> Option<&'static str> {
        if !valid_nonce(&self.nonce) {
            Some("its nonce is not 1 to 64 letters, digits, `-` or `_`")
        } else if self.steps.saturating_add(self.delay_steps) > MAX_WINDOW_STEPS {
            Some("its steps and delay together pass 1 000 000 000")
        } else if self.duration_ms > MAX_WINDOW_MS {
            Some("its duration passes an hour")
        } else {
            None
        }
    }
}

/// Rank 0 takes the request file at `path` to answer it: renamed out of
/// the requests (`claimed-request-<nonce>.json`), so that whoever wrote it
/// can no longer take it back ([`withdraw_request`]); its new path, `None`
/// where it was withdrawn (or cannot be renamed).
pub fn claim_request(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let claimed = path.with_file_name(format!("claimed-{name}"));
    std::fs::rename(path, &claimed).ok()?;
    Some(claimed)
}

/// When the request file at `path` was written, on its file system's
/// clock (the one a window's report is stamped by); now where that cannot
/// be read.
pub fn request_time(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| std::time::SystemTime::now())
}

/// Takes back the request file at `path` that nobody answered in time:
/// `false` where it is not taken back (rank 0 claimed it already: its
/// answer is on the way).
pub fn withdraw_request(path: &Path) -> bool {
    std::fs::remove_file(path).is_ok()
}

/// Rank 0's answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The window planned.
    Planned(Plan),
    /// The request refused: why.
    Refused(String),
    /// No answer in time (the request is taken back), or the wait was
    /// given up.
    Unanswered,
}

/// How often a wait for rank 0 looks for its answer.
const ANSWER_POLL: std::time::Duration = std::time::Duration::from_millis(50);
/// How much longer the wait goes on where rank 0 claimed the request just
/// as it was to be taken back: its answer is on the way.
const CLAIMED_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits for rank 0's answer to the request with `nonce`, written at
/// `path`, until `deadline`, or until `give_up` (asked at each look) says
/// so; a request left unanswered is taken back, unless rank 0 claimed it
/// meanwhile: then its answer is waited for a few seconds more.
pub fn await_answer(
    session_dir: &Path,
    (path, nonce): (&Path, &str),
    deadline: std::time::Instant,
    give_up: &mut dyn FnMut() -> bool,
) -> Answer {
    let mut deadline = deadline;
    let mut withdrawn = false;
    loop {
        match take_refusal(session_dir, nonce) {
            Ok(Some(refusal)) => return Answer::Refused(refusal.reason),
            Ok(None) => {}
            Err(e) => return Answer::Refused(format!("rank 0's answer cannot be read: {e}")),
        }
        if let Some(plan) = plan_for(session_dir, nonce) {
            return Answer::Planned(plan);
        }
        let over = give_up() || std::time::Instant::now() >= deadline;
        if over && (withdrawn || withdraw_request(path)) {
            return Answer::Unanswered;
        }
        if over {
            withdrawn = true;
            deadline = std::time::Instant::now() + CLAIMED_GRACE;
        }
        std::thread::sleep(ANSWER_POLL);
    }
}

/// Waits until the report of the window in `report_dir` is written at or
/// after `since` (one an earlier launch left there is not this one's),
/// until `deadline`, or until `give_up` (asked at each look) says so;
/// whether it was.
pub fn await_report(
    report_dir: &Path,
    since: std::time::SystemTime,
    deadline: std::time::Instant,
    give_up: &mut dyn FnMut() -> bool,
) -> bool {
    let report = report_dir.join("report.json");
    loop {
        if crate::file::modified_since(&report, since) {
            return true;
        }
        if give_up() || std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(ANSWER_POLL);
    }
}

fn write_json(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    crate::file::write_atomic(path, &text)
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ControlError> {
    let io = |source| ControlError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Not through a link, never blocking on a FIFO planted in its place.
    let file = crate::file::open_regular(path, false).map_err(io)?;
    let bytes = crate::file::read_capped(file, MAX_CONTROL_BYTES).map_err(|e| match e.kind() {
        std::io::ErrorKind::Other => ControlError::TooLarge {
            path: path.to_path_buf(),
        },
        _ => io(e),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ControlError::Invalid {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_and_a_request_travel_through_their_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_plan(dir.path(), 1).unwrap().is_none());
        let request = Request {
            nonce: "n-1".into(),
            steps: 5,
            delay_steps: 2,
            trigger: Trigger::Command,
            torch: true,
            python: true,
            duration_ms: 0,
            cancel: false,
            cancel_window: None,
        };
        let path = write_request(dir.path(), &request).unwrap();
        let (found, beyond) = pending_requests(dir.path(), 8).unwrap();
        assert_eq!((found, beyond), (vec![path.clone()], 0));
        assert_eq!(read_request(&path).unwrap(), request);
        let plan = Plan {
            index: 1,
            first_step: 9,
            steps: 5,
            trigger: Trigger::Command,
            nonce: "n-1".into(),
            torch: true,
            python: false,
            run: Some("job.0".into()),
            cancelled: None,
        };
        write_plan(dir.path(), &plan).unwrap();
        assert_eq!(read_plan(dir.path(), 1).unwrap(), Some(plan));
    }

    #[test]
    fn hostile_control_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let control = control_dir(dir.path());
        std::fs::create_dir_all(&control).unwrap();
        std::fs::write(control.join("plan-1.json"), vec![b' '; 10_000]).unwrap();
        let err = read_plan(dir.path(), 1).unwrap_err();
        assert!(matches!(err, ControlError::TooLarge { .. }), "{err}");
        std::fs::write(control.join("plan-2.json"), r#"{"index": 7}"#).unwrap();
        let err = read_plan(dir.path(), 2).unwrap_err().to_string();
        assert!(
            err.contains("plan-2.json is not a valid control file"),
            "{err}"
        );
        let path = control.join("request-x.json");
        std::fs::write(
            &path,
            r#"{"nonce": "../../etc", "steps": 1, "delay_steps": 0, "trigger": "command"}"#,
        )
        .unwrap();
        assert!(read_request(&path)
            .unwrap_err()
            .to_string()
            .contains("nonce"));
        // Past its bounds but named: read, for rank 0 to refuse by name.
        std::fs::write(
            &path,
            r#"{"nonce": "huge", "steps": 18446744073709551615, "delay_steps": 0, "trigger": "command"}"#,
        )
        .unwrap();
        let huge = read_request(&path).unwrap();
        assert!(huge
            .problem()
            .is_some_and(|p| p.contains("pass 1 000 000 000")));
        let request = Request::command("a/b", 1);
        assert!(write_request(dir.path(), &request).is_err());
    }

    #[test]
    fn pending_requests_are_capped_and_the_rest_counted() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            let request = Request::command(format!("r{i}"), 1);
            write_request(dir.path(), &request).unwrap();
        }
        let (found, beyond) = pending_requests(dir.path(), 3).unwrap();
        assert_eq!(found.len(), 3);
        assert_eq!(beyond, 2);
        assert!(found[0].ends_with("request-r0.json"));
    }
}
