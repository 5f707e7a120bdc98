//! `rankscope top`: a live view of a running session, refreshed from the
//! statuses its ranks share in the session directory while this command
//! keeps `control/watch` fresh ([`rankscope_common::window`]), read there
//! or by rank 0 for this command over its TCP listener: per rank its
//! steps, pace, open stage and GPUs, the slowest rank marked; or the same
//! numbers as JSON lines for scripts.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use rankscope::transport::tcp::remote::{Remote, RemoteError};
use rankscope_common::file::modified_since;
use rankscope_common::remote::StatusSnapshot;
use rankscope_common::text::terminal;
use rankscope_common::window::{self, GpuStatus, LiveStatus, FRESH_STATUS};
use serde::Serialize;

use crate::reach::Reach;
use crate::trigger::check_running;

/// How often the command looks for the first statuses.
const POLL: Duration = Duration::from_millis(50);
/// How often it asks rank 0 for them, over the network.
const REMOTE_POLL: Duration = Duration::from_millis(250);
/// Looks at rank 0 that fail in a row before the view ends.
const REMOTE_TRIES: u32 = 4;
/// The pause before a failed look is tried again.
const REMOTE_RETRY: Duration = Duration::from_millis(500);
/// How long the first view waits for rank 0's status.
const FIRST_WAIT: Duration = Duration::from_secs(5);
/// How long the ranks take to see the watch and share (they look each
/// second): the first view waits this long for every rank's status.
const EVERY_RANK_WAIT: Duration = Duration::from_millis(2_500);
/// The most ranks a view reads (a status file each, every view): rank 0's
/// status claiming more is refused.
const MAX_RANKS: u32 = 65_536;

/// What `rankscope top` was asked.
pub struct TopOptions {
    /// The running session.
    pub session: Reach,
    /// JSON lines instead of a table.
    pub json: bool,
    /// Time between two views.
    pub interval: Duration,
    /// Views to show; `None`: until the session ends.
    pub count: Option<u64>,
}

/// One view of the session: every rank's latest status.
#[derive(Debug, Serialize)]
pub struct View {
    /// The session directory.
    pub session_dir: PathBuf,
    /// Ranks in the job.
    pub world_size: u32,
    /// The ranks that shared a status lately, by rank.
    pub ranks: Vec<RankView>,
    /// The ranks with no fresh status.
    pub missing: Vec<u32>,
    /// The rank whose steps take longest, where two or more ranks stepped.
    pub slowest_rank: Option<u32>,
    /// Whether the GPU readings are simulated (the demo's).
    pub gpus_simulated: bool,
}

/// One rank in a [`View`].
#[derive(Debug, Serialize)]
pub struct RankView {
    pub rank: u32,
    pub host: String,
    /// Seconds since the rank's session started.
    pub elapsed_s: f64,
    pub steps: u64,
    /// Milliseconds per step over the last second (`null` before a step).
    pub step_ms: Option<f64>,
    pub steps_per_s: Option<f64>,
    /// The innermost stage open, `null` between stages.
    pub stage: Option<String>,
    /// Every stage open, innermost last.
    pub stages: Vec<String>,
    pub gpus: Vec<GpuStatus>,
}

/// Shows the session in `options.dir` until `options.count` views were
/// shown or the session ends.
pub fn run(options: &TopOptions) -> Result<()> {
    let count = options.count.or(options.json.then_some(1));
    let tty = !options.json && std::io::stdout().is_terminal();
    let source = &options.session;
    let mut view = first_view(source)?;
    let mut shown = 0;
    loop {
        let mut out = std::io::stdout().lock();
        if options.json {
            serde_json::to_writer(&mut out, &view)?;
            writeln!(out)?;
        } else {
            if tty {
                // Home, and clear the screen: the view redrawn in place.
                write!(out, "\x1b[H\x1b[2J")?;
            } else if shown > 0 {
                writeln!(out)?;
            }
            write!(out, "{}", render(&view, tty))?;
        }
        out.flush()?;
        drop(out);
        shown += 1;
        if count.is_some_and(|count| shown >= count) {
            return Ok(());
        }
        std::thread::sleep(options.interval);
        match next_view(source)? {
            Some(next) => view = next,
            None => return Ok(()),
        }
    }
}

/// The first view, once the ranks share their statuses.
fn first_view(source: &Reach) -> Result<View> {
    match source {
        Reach::Dir(dir) => {
            check_running(dir)?;
            let watched_from = SystemTime::now();
            window::watch(dir).with_context(|| {
                format!("asking the ranks of {} for their status", dir.display())
            })?;
            wait_for_ranks(dir, watched_from)?;
            window::watch(dir).context("keeping the ranks' statuses coming")?;
            read_view(dir)
        }
        Reach::Endpoint(remote) => view_of_snapshot(first_snapshot(remote)?),
    }
}

/// The next view; `None` (said on stderr) once the session ended.
fn next_view(source: &Reach) -> Result<Option<View>> {
    match source {
        Reach::Dir(dir) => {
            if check_running(dir).is_err() {
                eprintln!("rankscope top: the session in {} ended", dir.display());
                return Ok(None);
            }
            window::watch(dir).context("keeping the ranks' statuses coming")?;
            read_view(dir).map(Some)
        }
        Reach::Endpoint(remote) => {
            // A look rank 0 turns away (busy with other controllers) or
            // one lost on the network is tried again; rank 0 no longer
            // listening is the session's end.
            let mut tries = 0;
            loop {
                match remote.statuses() {
                    Ok(snapshot) => return view_of_snapshot(snapshot).map(Some),
                    Err(RemoteError::Unreached { .. }) if tries + 1 >= REMOTE_TRIES => {
                        eprintln!("rankscope top: the session ended (rank 0 no longer answers)");
                        return Ok(None);
                    }
                    Err(e) if tries + 1 >= REMOTE_TRIES => return Err(e.into()),
                    Err(_) => tries += 1,
                }
                std::thread::sleep(REMOTE_RETRY);
            }
        }
    }
}

/// Rank 0's first snapshot with its own status (it shares within a
/// second of the first look), then with every rank's or after
/// [`EVERY_RANK_WAIT`] more.
fn first_snapshot(remote: &Remote) -> Result<StatusSnapshot> {
    let started = Instant::now();
    let has = |snapshot: &StatusSnapshot, rank: u32| snapshot.statuses.iter().any(|s| s.0 == rank);
    let mut snapshot = remote.statuses()?;
    while !has(&snapshot, 0) {
        if started.elapsed() >= FIRST_WAIT {
            bail!(
                "rank 0 shared no status within {} s: does it run a version of rankscope that \
                 shares one?",
                FIRST_WAIT.as_secs()
            );
        }
        std::thread::sleep(REMOTE_POLL);
        snapshot = remote.statuses()?;
    }
    let rank_0_shared = Instant::now();
    while rank_0_shared.elapsed() < EVERY_RANK_WAIT
        && snapshot.statuses.len() < snapshot.world_size as usize
    {
        std::thread::sleep(REMOTE_POLL);
        snapshot = remote.statuses()?;
    }
    Ok(snapshot)
}

/// The view of rank 0's snapshot.
fn view_of_snapshot(snapshot: StatusSnapshot) -> Result<View> {
    if snapshot.world_size > MAX_RANKS {
        bail!(
            "rank 0 claims {} ranks, past the {MAX_RANKS} this view reads",
            snapshot.world_size
        );
    }
    Ok(view_of(
        snapshot.session_dir,
        snapshot.world_size.max(1),
        snapshot.statuses,
    ))
}

/// Waits until rank 0 shares a status after `since` (it saw the watch),
/// then until every rank did, or [`EVERY_RANK_WAIT`] more passed (a rank
/// gone, or not yet started, shares none).
fn wait_for_ranks(dir: &Path, since: SystemTime) -> Result<()> {
    let started = Instant::now();
    let shared = |rank: u32| modified_since(&window::status_path(dir, rank), since);
    while !shared(0) {
        if started.elapsed() >= FIRST_WAIT {
            bail!(
                "rank 0 of the session in {} shared no status within {} s: do its ranks run a \
                 version of rankscope that shares one?",
                dir.display(),
                FIRST_WAIT.as_secs()
            );
        }
        std::thread::sleep(POLL);
    }
    let world = window::read_status(dir, 0).map_or(1, |s| s.world_size.min(MAX_RANKS));
    let rank_0_shared = Instant::now();
    while rank_0_shared.elapsed() < EVERY_RANK_WAIT && !(1..world).all(shared) {
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// The view of every rank of rank 0's run whose status is fresh.
pub fn read_view(dir: &Path) -> Result<View> {
    let own = window::read_status(dir, 0).context("reading rank 0's status")?;
    let world_size = own.world_size.max(1);
    if world_size > MAX_RANKS {
        bail!(
            "rank 0's status in {} claims {world_size} ranks, past the {MAX_RANKS} this view reads",
            dir.display()
        );
    }
    let shared = window::read_statuses(dir, 0..world_size, own.run.as_deref(), FRESH_STATUS);
    Ok(view_of(dir.to_path_buf(), world_size, shared))
}

/// The view of the fresh statuses `shared` (by rank) of a session of
/// `world_size` ranks in `session_dir`.
fn view_of(session_dir: PathBuf, world_size: u32, shared: Vec<(u32, LiveStatus)>) -> View {
    // In rank order, each rank of the world once, within the bounds a
    // rank keeps to (rank 0 may have sent them over the network).
    let mut shared: Vec<(u32, LiveStatus)> = shared
        .into_iter()
        .filter(|(rank, _)| *rank < world_size)
        .map(|(rank, status)| (rank, status.bounded()))
        .collect();
    shared.sort_by_key(|(rank, _)| *rank);
    shared.dedup_by_key(|(rank, _)| *rank);
    let gpus_simulated = shared.iter().any(|(_, status)| status.simulated);
    let missing = (0..world_size)
        .filter(|rank| shared.binary_search_by_key(rank, |(r, _)| *r).is_err())
        .collect();
    let ranks: Vec<RankView> = shared
        .into_iter()
        .map(|(rank, status)| rank_view(rank, status))
        .collect();
    let stepped = ranks.iter().filter(|r| r.step_ms.is_some()).count();
    let slowest_rank = ranks
        .iter()
        .filter_map(|r| Some((r.rank, r.step_ms?)))
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(rank, _)| rank)
        .filter(|_| stepped >= 2);
    View {
        session_dir,
        world_size,
        ranks,
        missing,
        slowest_rank,
        gpus_simulated,
    }
}

fn rank_view(rank: u32, status: LiveStatus) -> RankView {
    let pace = status.pace();
    RankView {
        rank,
        step_ms: pace.map(|s| s * 1e3),
        steps_per_s: pace.map(|s| 1.0 / s),
        stage: status.stages.last().cloned(),
        host: status.host,
        elapsed_s: status.elapsed_s,
        steps: status.steps,
        stages: status.stages,
        gpus: status.gpus,
    }
}

/// The view as a table: a line per rank, the slowest marked `*` (in bold
/// on a terminal, `tty`); names from the ranks made safe to print.
pub fn render(view: &View, tty: bool) -> String {
    let mut out = format!(
        "rankscope top: {} ({} of {} ranks sharing{})\n",
        terminal(&view.session_dir.display().to_string()),
        view.ranks.len(),
        view.world_size,
        if view.gpus_simulated {
            "; GPU readings simulated"
        } else {
            ""
        }
    );
    out.push_str(&format!(
        "  {:>6}  {:<20} {:>8} {:>8} {:>8}  {:<24} {:>5} {:>5}\n",
        "rank", "host", "steps", "ms/step", "steps/s", "stage", "GPU%", "°C"
    ));
    let num =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for rank in &view.ranks {
        let slowest = view.slowest_rank == Some(rank.rank);
        let util = mean(rank.gpus.iter().filter_map(|g| g.util_pct));
        let temperature = rank
            .gpus
            .iter()
            .filter_map(|g| g.temperature_c)
            .max_by(f64::total_cmp);
        let line = format!(
            "{} {:>6}  {:<20} {:>8} {:>8} {:>8}  {:<24} {:>5} {:>5}",
            if slowest { "*" } else { " " },
            rank.rank,
            cut(&terminal(&rank.host), 20),
            rank.steps,
            num(rank.step_ms, 1),
            num(rank.steps_per_s, 1),
            cut(&terminal(rank.stage.as_deref().unwrap_or("-")), 24),
            num(util, 0),
            num(temperature, 0),
        );
        match (slowest, tty) {
            (true, true) => out.push_str(&format!("\x1b[1m{line}\x1b[0m\n")),
            _ => out.push_str(&format!("{line}\n")),
        }
    }
    if let Some(slowest) = view.slowest_rank {
        out.push_str(&format!("* slowest steps: rank {slowest}\n"));
    }
    if !view.missing.is_empty() {
        let missing = rankscope_common::text::rank_ranges(&view.missing);
        out.push_str(&format!(
            "missing: {missing} (no status in the last {} s)\n",
            FRESH_STATUS.as_secs()
        ));
    }
    out
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

/// `text` cut to `width` characters.
fn cut(text: &str, width: usize) -> String {
    text.chars().take(width).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: u32, step_ms: Option<f64>, stage: &str) -> RankView {
        RankView {
            rank,
            host: "node-a".into(),
            elapsed_s: 1.0,
            steps: 10,
            step_ms,
            steps_per_s: step_ms.map(|ms| 1e3 / ms),
            stage: Some(stage.into()),
            stages: vec![stage.into()],
            gpus: Vec::new(),
        }
    }

    #[test]
    fn a_status_claiming_a_world_past_the_bound_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let status = LiveStatus {
            run: None,
            world_size: u32::MAX,
            host: "h".into(),
            elapsed_s: 1.0,
            steps: 1,
            step_s: Some(0.01),
            stages: Vec::new(),
            gpus: Vec::new(),
            simulated: false,
        };
        window::write_status(dir.path(), 0, status).unwrap();
        let err = read_view(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("claims 4294967295 ranks, past the 65536"),
            "{err}"
        );
    }

    #[test]
    fn the_table_marks_the_slowest_names_the_missing_and_prints_no_control_codes() {
        let view = View {
            session_dir: "/s".into(),
            world_size: 4,
            ranks: vec![
                rank(0, Some(10.0), "decode"),
                rank(2, Some(31.0), "\x1b]0;owned\x07attention"),
            ],
            missing: vec![1, 3],
            slowest_rank: Some(2),
            gpus_simulated: false,
        };
        let text = render(&view, false);
        assert!(text.contains("(2 of 4 ranks sharing)"), "{text}");
        let marked: Vec<&str> = text.lines().filter(|l| l.starts_with('*')).collect();
        assert_eq!(marked.len(), 2, "{text}");
        assert!(
            marked[0].contains("31.0") && marked[1].ends_with("rank 2"),
            "{text}"
        );
        assert!(
            text.contains("missing: 1, 3 (no status in the last 5 s)"),
            "{text}"
        );
        assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
        // On a terminal the slowest rank's line is bold.
        assert!(render(&view, true).contains("\x1b[1m*"));
    }
}
