//! Window control over TCP, for ranks that do not see rank 0's session
//! directory (a job on several nodes, each writing under a folder of its
//! own): rank 0's plans go out as messages, the ranks' statuses and window
//! payloads come in.
//!
//! Each rank other than 0 keeps a connection to rank 0 (purpose `MIRROR`;
//! to its node's leader under a two-level gather, below) while its session
//! runs ([`Mirror`]). It first leaves a probe file in
//! its own control folder and names it; rank 0 looks for it in its own:
//! found, the two share the folder and nothing is mirrored (the rank reads
//! rank 0's plan files). Otherwise rank 0 sends the rank each window plan
//! its windows thread posts ([`crate::WindowControl::plans_since`], from
//! the one the rank needs next, and again where rank 0 rewrote one) and,
//! while `rankscope top` watches, the watch ([`Mirrored`]); the rank hands
//! them to its own windows thread ([`crate::WindowControl::deliver`]):
//! nothing is written into its folder. The rank sends each status its
//! windows thread shares ([`crate::WindowControl::take_status`]), which
//! rank 0 writes into its own control folder (for imbalance windows and
//! `top`), or a beat where it has none to send. A
//! second thread of the rank's sends each window payload its windows
//! thread wrote ([`Mirror::window_written`]) on a connection of its own
//! (purpose `WINDOW_PAYLOAD`), again and again for a while where that
//! fails; rank 0 writes it into the window's folder (one of a window it
//! planned, one per rank), where the window's gather finds it by the
//! directory transport's rules.
//!
//! Under a two-level gather, a rank of a node whose leader it met keeps
//! that connection to its leader instead ([`Mirrors::Leader`]), so that
//! rank 0 holds one per node: the leader answers the probe for rank 0
//! (shared where the rank shares the leader's folder and rank 0 sees the
//! leader's), sends the plans it was sent itself, and relays the rank's
//! statuses to rank 0 over its own mirror ([`RankStatus`]), where rank 0
//! takes them for that leader's node alone. A leader whose folder rank 0
//! sees, or that never learned whether it does, relays for no rank: it
//! sends a rank apart to rank 0 itself, as a rank that cannot reach its
//! leader goes after a few tries. Window payloads still go straight to
//! rank 0, on short connections of their own.
//!
//! Rank 0 keeps one mirror per rank (a newer connection replaces an older
//! one), ends one whose rank went silent, and keeps at most 1,024 (a
//! quarter of its open-file limit where that is less), a thread each,
//! waiting for the next plan and looking for statuses every [`TICK`]; a
//! rank past them, or one that cannot reach rank 0, is named missing in
//! the windows, as a rank blind to a shared folder is.

use std::collections::{HashMap, HashSet};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rankscope_common::file::{create_real_dir, open_regular, read_capped, write_atomic};
use rankscope_common::gather::ConnectionRefusal;
use rankscope_common::remote::{Mirrored, RankStatus};
use rankscope_common::spill;
use rankscope_common::window;

use super::control::ServedControl;
use super::places::{Place, Places};
use super::wire::{
    kind, purpose, read_frame, read_frame_within, readable, write_frame, FrameBudget,
    MAX_CONTROL_BYTES,
};
use super::{Link, Unreached, HANDSHAKE_TIMEOUT};
use crate::notice::{notice, spawn_with_notices};
use crate::sync::lock;
use crate::transport::nodes::node_led_by;
use crate::WindowControl;

/// How often a desk (rank 0's, a leader's) looks for a mirror's status
/// (a plan is sent as soon as it is posted).
const TICK: Duration = Duration::from_millis(100);
/// How often a rank looks (its own files only).
const RANK_TICK: Duration = Duration::from_millis(50);
/// A rank sends a beat where it sent nothing for this long...
const BEAT: Duration = Duration::from_secs(5);
/// ... and rank 0 ends a mirror that sent nothing for this long.
const SILENT: Duration = Duration::from_secs(30);
/// How long a rank waits to try rank 0 again after a failure, at first;
/// each failure more doubles it, up to [`MAX_RETRY`].
const RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two tries.
const MAX_RETRY: Duration = Duration::from_secs(30);
/// Failed tries at the mirror's first connection that are not said (a
/// rank that shares rank 0's folder needs none).
const QUIET_TRIES: u32 = 3;
/// The most mirrors a desk keeps at once.
const MAX_MIRRORS: usize = 1024;
/// The largest status or mirrored message read (each is bounded far
/// below: `LiveStatus::bounded`, a plan).
const MAX_MESSAGE_BYTES: u64 = 64 << 10;
/// How often rank 0 passes the watch on while `rankscope top` watches.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// A watch older than this is over (the ranks' own reading of it is 5 s).
const WATCH_FRESH: Duration = Duration::from_secs(3);
/// Window payloads a rank keeps waiting to be sent; an older one goes.
const MAX_QUEUED: usize = 8;
/// The probe file's name before its rank and nonce.
const PROBE_PREFIX: &str = "mirror-probe-";

/// Whose mirrors a desk serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mirrors {
    /// Rank 0's: those of the ranks that reach it, and, under a two-level
    /// gather of nodes of `node_size` ranks, the statuses each node's
    /// leader relays for its node.
    Rank0 { node_size: Option<u32> },
    /// A node leader's: those of its node's ranks, sent the plans the
    /// leader is sent, their statuses relayed to rank 0.
    Leader,
}

/// The side that serves mirrors: rank 0's, or a node leader's.
pub(super) struct MirrorDesk {
    session_dir: PathBuf,
    /// The windows of rank 0 (which it planned) or of the leader.
    windows: WindowControl,
    run_id: String,
    role: Mirrors,
    /// Ranks in the job.
    world_size: u32,
    /// Mirrors kept now.
    mirrors: Places,
    /// Each rank's mirror: its connection's id, and a handle to cut it.
    by_rank: Mutex<HashMap<u32, (u64, TcpStream)>>,
    /// The (window, rank) payloads being taken now.
    taking: Mutex<HashSet<(u32, u32)>>,
}

/// A mirror being served; dropped, it makes room for another.
struct Serving<'a> {
    _place: Place<'a>,
    desk: &'a MirrorDesk,
    rank: u32,
    id: u64,
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        let mut by_rank = lock(&self.desk.by_rank);
        if by_rank
            .get(&self.rank)
            .is_some_and(|(id, _)| *id == self.id)
        {
            by_rank.remove(&self.rank);
        }
    }
}

impl MirrorDesk {
    /// The desk of the session `control` serves, run `run_id`, serving
    /// `role`'s mirrors.
    pub(super) fn new(
        control: ServedControl,
        run_id: String,
        (role, world_size): (Mirrors, u32),
    ) -> Self {
        MirrorDesk {
            session_dir: control.session_dir,
            windows: control.windows,
            run_id,
            role,
            world_size,
            mirrors: Places::new(
                open_files_limit().map_or(MAX_MIRRORS, |limit| MAX_MIRRORS.min(limit / 4)),
            ),
            by_rank: Mutex::default(),
            taking: Mutex::default(),
        }
    }

    /// Serves rank `rank`'s mirror (connection `id`) until it closes it,
    /// goes silent, is replaced, or `stop` (the gather ended); `reply`
    /// seals a message.
    pub(super) fn serve(
        &self,
        stream: &mut TcpStream,
        (rank, id): (u32, u64),
        reply: &dyn Fn(u8, &[u8]) -> Vec<u8>,
        stop: &AtomicBool,
    ) -> Result<(), ConnectionRefusal> {
        let dir = &self.session_dir;
        let handshake = Instant::now() + HANDSHAKE_TIMEOUT;
        let probe = read_frame(stream, kind::PROBE, MAX_CONTROL_BYTES, handshake)?;
        let (probe, mut next_plan) = String::from_utf8(probe)
            .ok()
            .and_then(|text| {
                let (name, next) = text.split_once('\n')?;
                let next = next.parse::<u32>().ok().filter(|&n| n >= 1)?;
                is_probe_of(name, rank).then(|| (name.to_string(), next))
            })
            .ok_or(ConnectionRefusal::Malformed("a probe"))?;
        let probed = std::fs::symlink_metadata(window::control_dir(dir).join(probe));
        let found = probed.is_ok_and(|meta| meta.is_file());
        let (answer, _serving) = self.probed(found, stream, (rank, id));
        write_frame(
            stream,
            kind::SHARED,
            &reply(kind::SHARED, &[answer as u8]),
            handshake,
        )?;
        if answer != Probed::Apart {
            return Ok(());
        }
        let mut watch_sent: Option<Instant> = None;
        let mut heard = Instant::now();
        let send = |stream: &mut TcpStream, mirrored: &Mirrored| {
            let body = serde_json::to_vec(mirrored).expect("a message serialises");
            let until = Instant::now() + HANDSHAKE_TIMEOUT;
            write_frame(stream, kind::MIRRORED, &reply(kind::MIRRORED, &body), until)
        };
        // The version of rank 0's plans sent so far.
        let mut seen = 0;
        while !stop.load(Ordering::SeqCst) && heard.elapsed() < SILENT {
            // Each plan rank 0 made or rewrote since the last look, as it
            // posts them (waiting a tick for one).
            let (now_seen, plans) = self.windows.plans_since(seen, next_plan, TICK);
            seen = now_seen;
            for plan in plans {
                next_plan = next_plan.max(plan.index.saturating_add(1));
                send(stream, &Mirrored::Plan { plan })?;
            }
            let watched =
                window::watched(dir, WATCH_FRESH) || self.windows.watched_within(WATCH_FRESH);
            if watched && watch_sent.is_none_or(|sent| sent.elapsed() >= WATCH_EVERY) {
                send(stream, &Mirrored::Watch)?;
                watch_sent = Some(Instant::now());
            }
            // The rank's statuses and beats; its closing the connection (or
            // a newer one's cutting it) is its end.
            loop {
                match readable(stream) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(_) => return Ok(()),
                }
                let until = Instant::now() + HANDSHAKE_TIMEOUT;
                let body = read_frame(stream, kind::STATUS, MAX_MESSAGE_BYTES, until)?;
                heard = Instant::now();
                if body.is_empty() {
                    continue;
                }
                let RankStatus { rank: of, status } = serde_json::from_slice(&body)
                    .map_err(|_| ConnectionRefusal::Malformed("a status that does not parse"))?;
                if !self.takes_status(rank, of) {
                    return Err(ConnectionRefusal::Malformed(
                        "a status of a rank it does not relay for",
                    ));
                }
                match self.role {
                    Mirrors::Leader if self.windows.apart() => {
                        self.windows.relay_status(of, status);
                    }
                    _ => {
                        let _ = window::write_status(dir, of, status);
                    }
                }
            }
        }
        Ok(())
    }

    /// The ranks whose mirrors it serves now, in order.
    #[cfg(test)]
    pub(super) fn ranks(&self) -> Vec<u32> {
        let mut ranks: Vec<u32> = lock(&self.by_rank).keys().copied().collect();
        ranks.sort_unstable();
        ranks
    }

    /// The answer to the probe of `rank`'s connection `id`, its file
    /// `found` in this desk's folder or not, and the mirror's place where
    /// it is served. A leader relays only where rank 0 does not see its own
    /// folder (its own mirror says, soon); where rank 0 sees it, a rank
    /// that shares it shares rank 0's too, and another goes to rank 0
    /// itself, as does every rank of a leader that learned nothing.
    fn probed(
        &self,
        found: bool,
        stream: &TcpStream,
        (rank, id): (u32, u64),
    ) -> (Probed, Option<Serving<'_>>) {
        let apart = match self.role {
            Mirrors::Rank0 { .. } => !found,
            Mirrors::Leader => match self.windows.rank_0_sees_folder(HANDSHAKE_TIMEOUT / 2) {
                Some(false) => true,
                Some(true) if found => false,
                _ => return (Probed::ToRank0, None),
            },
        };
        if !apart {
            return (Probed::Shared, None);
        }
        match self.admit(stream, rank, id) {
            Some(serving) => (Probed::Apart, Some(serving)),
            None => (Probed::NoRoom, None),
        }
    }

    /// Whether the mirror of `rank` may send rank `of`'s status: its own,
    /// or at rank 0 from a node's leader, one of its node's. (Every rank
    /// holds the job's token and may connect as any rank: this keeps a
    /// status where it belongs, it is no boundary between ranks.)
    fn takes_status(&self, rank: u32, of: u32) -> bool {
        let node = match self.role {
            Mirrors::Rank0 {
                node_size: Some(size),
            } => node_led_by(rank, size, self.world_size),
            _ => None,
        };
        of == rank || node.is_some_and(|node| node.contains(&of))
    }

    /// Takes connection `id` of `rank` among the mirrors, in place of the
    /// rank's older one (cut off); `None` where there is no room.
    fn admit(&self, stream: &TcpStream, rank: u32, id: u64) -> Option<Serving<'_>> {
        let handle = stream.try_clone().ok()?;
        let mut by_rank = lock(&self.by_rank);
        // A rank coming back takes the place of its older connection,
        // whose place is given back as it ends: room for both meanwhile.
        let place = self.mirrors.take(by_rank.contains_key(&rank))?;
        if let Some((_, older)) = by_rank.insert(rank, (id, handle)) {
            let _ = older.shutdown(Shutdown::Both);
        }
        Some(Serving {
            _place: place,
            desk: self,
            rank,
            id,
        })
    }

    /// Takes rank `rank`'s payload of a window rank 0 planned and writes
    /// it into the window's folder (unless the rank has one there: it
    /// wrote it there itself, or sent it before), within `max_frame`
    /// bytes, by `timeout`, its bytes held against `frames`.
    pub(super) fn take_window_payload(
        &self,
        stream: &mut TcpStream,
        rank: u32,
        frames: &FrameBudget,
        (max_frame, timeout): (u64, Duration),
    ) -> Result<(), ConnectionRefusal> {
        let handshake = Instant::now() + HANDSHAKE_TIMEOUT;
        let named = read_frame(stream, kind::WINDOW_NAME, MAX_CONTROL_BYTES, handshake)?;
        let named = String::from_utf8(named).ok();
        let (index, file) = named
            .as_deref()
            .and_then(|n| n.split_once('/'))
            .and_then(|(index, file)| Some((index.parse::<u32>().ok()?, file)))
            .filter(|&(index, _)| index >= 1)
            .ok_or(ConnectionRefusal::Malformed("a window payload's name"))?;
        let run = Some(self.run_id.as_str());
        if file.contains('/') || !spill::is_spill_of(file, Some(rank), run) {
            return Err(ConnectionRefusal::WrongPayload(
                "a window payload named for another rank or run",
            ));
        }
        self.windows
            .takes_payload_of(index)
            .map_err(ConnectionRefusal::WrongPayload)?;
        let folder = window::window_dir(&self.session_dir, index);
        // One payload per rank and window, whatever its connections: the
        // same file again (its acknowledgement was lost) is taken, and not
        // written twice; another is refused before its frame is read.
        let Some(_taking) = self.taking(index, rank) else {
            return Err(ConnectionRefusal::Busy);
        };
        let kept = payload_of(&folder, rank, run);
        if kept.as_deref().is_some_and(|kept| kept != file) {
            return Err(ConnectionRefusal::WrongPayload(
                "a second payload of one rank for one window",
            ));
        }
        let until = Instant::now() + timeout;
        let (bytes, _held) = read_frame_within(stream, kind::PAYLOAD, max_frame, until, frames)?;
        if kept.is_some() {
            return Ok(());
        }
        let written =
            create_real_dir(&folder).and_then(|()| write_atomic(&folder.join(file), &bytes));
        written.map_err(|_| ConnectionRefusal::WrongPayload("its window's folder is not writable"))
    }

    /// Rank `rank`'s payload of window `index` being taken, `None` where
    /// another connection takes one now.
    fn taking(&self, index: u32, rank: u32) -> Option<Taking<'_>> {
        let mut taking = lock(&self.taking);
        taking.insert((index, rank)).then_some(Taking {
            desk: self,
            key: (index, rank),
        })
    }
}

/// The name of the payload of `rank` in run `run` that `folder` holds, if
/// any.
fn payload_of(folder: &Path, rank: u32, run: Option<&str>) -> Option<String> {
    let entries = std::fs::read_dir(folder).ok()?;
    entries.filter_map(Result::ok).find_map(|entry| {
        let name = entry.file_name().into_string().ok()?;
        spill::is_spill_of(&name, Some(rank), run).then_some(name)
    })
}

/// A rank's window payload being taken; dropped, another may be.
struct Taking<'a> {
    desk: &'a MirrorDesk,
    key: (u32, u32),
}

impl Drop for Taking<'_> {
    fn drop(&mut self) {
        lock(&self.desk.taking).remove(&self.key);
    }
}

/// This process's limit of open files (the soft one), where it can be read.
fn open_files_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    read.then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

/// The answer to a probe (rank 0's, or a node leader's for rank 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Probed {
    /// Apart: plans and statuses travel on the connection.
    Apart = 0,
    /// The rank and rank 0 share the folder: nothing to mirror.
    Shared = 1,
    /// Apart, but the desk keeps as many mirrors as it can already.
    NoRoom = 2,
    /// A leader's: it does not relay for this rank, which goes to rank 0.
    ToRank0 = 3,
}

/// Whether `name` is a probe file's name of `rank`: `mirror-probe-<rank>-`
/// and 32 hexadecimal digits.
fn is_probe_of(name: &str, rank: u32) -> bool {
    name.strip_prefix(PROBE_PREFIX)
        .and_then(|rest| rest.strip_prefix(&format!("{rank}-")))
        .is_some_and(|nonce| nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// What a rank's mirror needs to know.
pub(crate) struct MirrorSettings {
    /// Where its mirror connects: rank 0's listener, or its node leader's.
    pub(crate) endpoint: String,
    /// Where its window payloads go: rank 0's listener.
    pub(crate) payload_endpoint: String,
    pub(crate) token: Vec<u8>,
    pub(crate) rank: u32,
    /// The rank's own session directory.
    pub(crate) session_dir: PathBuf,
    pub(crate) run_id: String,
    /// The largest payload rank 0 takes.
    pub(crate) max_frame: u64,
    /// How long a window payload is tried, and may take to send.
    pub(crate) payload_timeout: Duration,
    /// The rank's windows thread, which rank 0's plans are handed to.
    pub(crate) windows: WindowControl,
}

/// Whether the rank and rank 0 share the folder, as rank 0 said.
mod folder {
    /// Not said yet.
    pub(super) const UNKNOWN: u8 = 0;
    /// Apart: the files travel.
    pub(super) const APART: u8 = 1;
    /// Shared, or rank 0 has no room: nothing travels.
    pub(super) const NOTHING: u8 = 2;
}

/// What the rank's two mirror threads share.
struct MirrorState {
    settings: MirrorSettings,
    folder: AtomicU8,
    stop: AtomicBool,
    /// With the stop, until when the window payloads queued are still
    /// tried (`None`: not at all).
    last_until: Mutex<Option<Instant>>,
    /// The mirror's connection, to cut it at a stop.
    link: Mutex<Option<TcpStream>>,
    /// The mirror thread runs (a stop does not wait for it: it has
    /// nothing to deliver).
    linking: AtomicBool,
    /// The payload thread ended, and its end said.
    sent: Mutex<bool>,
    ended: Condvar,
}

impl MirrorState {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// A rank's window control over TCP, on two threads while the session
/// runs: rank 0's plans in and its statuses out, and the sender of its
/// window payloads.
pub(crate) struct Mirror {
    state: Arc<MirrorState>,
    payloads: Mutex<Sender<(u32, PathBuf)>>,
    /// The payload thread, joined once it ended.
    sender: Option<JoinHandle<()>>,
}

impl Mirror {
    /// Starts the mirror; `None` (said) where its threads cannot start.
    pub(crate) fn start(settings: MirrorSettings) -> Option<Mirror> {
        let state = Arc::new(MirrorState {
            settings,
            folder: AtomicU8::new(folder::UNKNOWN),
            stop: AtomicBool::new(false),
            last_until: Mutex::new(None),
            link: Mutex::new(None),
            linking: AtomicBool::new(true),
            sent: Mutex::new(false),
            ended: Condvar::new(),
        });
        let (payloads, queued) = std::sync::mpsc::channel();
        let mirroring = Arc::clone(&state);
        let sending = Arc::clone(&state);
        // The mirror thread is left to end by itself (its handle let go).
        let linked = spawn_with_notices("rankscope-mirror", move || {
            Mirroring::new(&mirroring).run();
            mirroring.linking.store(false, Ordering::SeqCst);
        });
        let sender = linked.and_then(|_| {
            spawn_with_notices("rankscope-mirror-payloads", move || {
                send_payloads(&sending, &queued);
                *lock(&sending.sent) = true;
                sending.ended.notify_all();
            })
        });
        match sender {
            Ok(sender) => Some(Mirror {
                state,
                payloads: Mutex::new(payloads),
                sender: Some(sender),
            }),
            Err(e) => {
                state.stop.store(true, Ordering::SeqCst);
                notice!("windows cannot reach this rank unless it sees rank 0's folder: {e}");
                None
            }
        }
    }

    /// Window `index`'s payload of this rank is written at `file`: sent to
    /// rank 0 where it does not see this rank's folder.
    pub(crate) fn window_written(&self, index: u32, file: &Path) {
        let _ = lock(&self.payloads).send((index, file.to_path_buf()));
    }

    /// Stops, trying the window payloads not sent yet (the session's last
    /// window, closed as it finished) until halfway to `deadline`, the
    /// gather's; a thread still blocked then is left to end by itself.
    pub(crate) fn finish(mut self, deadline: Instant) {
        let now = Instant::now();
        let until = now + deadline.saturating_duration_since(now) / 2;
        *lock(&self.state.last_until) = Some(until);
        self.halt(until);
    }

    /// Stops; waits for the payload thread until `until` at most (the
    /// mirror thread, cut off, ends by itself).
    fn halt(&mut self, until: Instant) {
        let state = &self.state;
        state.stop.store(true, Ordering::SeqCst);
        if let Some(link) = lock(&state.link).as_ref() {
            let _ = link.shutdown(Shutdown::Both);
        }
        let mut sent = lock(&state.sent);
        while !*sent {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            sent = state
                .ended
                .wait_timeout(sent, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(sent);
        if let Some(sender) = self.sender.take() {
            let _ = sender.join();
        }
    }
}

impl Drop for Mirror {
    /// Stops without trying what is queued (a stop signal: no time), and
    /// without waiting for a thread blocked on the network.
    fn drop(&mut self) {
        self.halt(Instant::now() + RANK_TICK * 2);
    }
}

/// The mirror thread's state.
struct Mirroring<'a> {
    state: &'a MirrorState,
    link: Option<Link>,
    retry: Backoff,
    /// The plan index the rank needs next (rank 0 sends from it on).
    next_plan: u32,
    /// When something was last sent.
    sent: Instant,
    /// Where it connects: its node's leader, or rank 0.
    endpoint: String,
}

impl<'a> Mirroring<'a> {
    fn new(state: &'a MirrorState) -> Self {
        Mirroring {
            state,
            link: None,
            retry: Backoff::new(),
            next_plan: 1,
            sent: Instant::now(),
            endpoint: state.settings.endpoint.clone(),
        }
    }

    fn run(&mut self) {
        while !self.state.stopping() {
            if self.link.is_none() && self.retry.due() {
                match self.connect() {
                    Ok(Connected::ToRank0) => self.go_to_rank_0(),
                    Ok(Connected::Apart(link)) => {
                        self.keep(link);
                        self.state.folder.store(folder::APART, Ordering::SeqCst);
                        self.state.settings.windows.set_shared(false);
                        self.retry = Backoff::new();
                    }
                    // One folder (or no room at rank 0): nothing to mirror.
                    Ok(shared_or_no_room) => {
                        if matches!(shared_or_no_room, Connected::Shared) {
                            self.state.settings.windows.set_shared(true);
                        }
                        self.state.folder.store(folder::NOTHING, Ordering::SeqCst);
                        return;
                    }
                    Err(e) => {
                        self.retry.failed(&e, "window plans and statuses");
                        // A leader that cannot be reached: rank 0 itself.
                        if self.retry.failures >= QUIET_TRIES {
                            self.go_to_rank_0();
                        }
                    }
                }
            }
            if let Some(mut link) = self.link.take() {
                match self.exchange(&mut link) {
                    Ok(()) => self.link = Some(link),
                    Err(e) => self.retry.failed(&e, "window plans and statuses"),
                }
            }
            std::thread::sleep(RANK_TICK);
        }
    }

    /// Connects to rank 0 from now on (where it went through its node's
    /// leader), at once.
    fn go_to_rank_0(&mut self) {
        let rank_0 = &self.state.settings.payload_endpoint;
        if self.endpoint != *rank_0 {
            self.endpoint = rank_0.clone();
            self.retry = Backoff::new();
        }
    }

    /// Keeps `link` as the mirror's connection (a handle of it where a stop
    /// can cut it).
    fn keep(&mut self, link: Link) {
        *lock(&self.state.link) = link.stream.try_clone().ok();
        self.link = Some(link);
    }

    /// The mirror's connection after the probe, unless rank 0 sees this
    /// rank's folder, or the desk (rank 0's, or the node leader's) has no
    /// room for another mirror, or the leader sends the rank to rank 0.
    fn connect(&self) -> Result<Connected, Unreached> {
        let s = &self.state.settings;
        let until = Instant::now() + HANDSHAKE_TIMEOUT;
        let mut link = Link::open(&self.endpoint, &s.token, (s.rank, purpose::MIRROR), until)?;
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|_| Unreached::NoRandomness)?;
        let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let probe = format!("{PROBE_PREFIX}{}-{hex}", s.rank);
        let control = window::control_dir(&s.session_dir);
        let path = control.join(&probe);
        create_real_dir(&control)
            .and_then(|()| write_atomic(&path, b"probe\n"))
            .map_err(Unreached::Files)?;
        let asked = format!("{probe}\n{}", self.next_plan);
        let answer = write_frame(&mut link.stream, kind::PROBE, asked.as_bytes(), until)
            .map_err(Unreached::from)
            .and_then(|()| link.reply(&s.token, kind::SHARED, MAX_CONTROL_BYTES, until));
        let _ = std::fs::remove_file(&path);
        match answer?.as_slice() {
            [0] => Ok(Connected::Apart(link)),
            [1] => Ok(Connected::Shared),
            [3] if self.endpoint != s.payload_endpoint => Ok(Connected::ToRank0),
            [2] => {
                notice!(
                    "rank 0 (or this node's leader) mirrors window files for as many ranks as it \
                     can already: this \
                     rank takes part in windows only where it sees rank 0's session directory"
                );
                Ok(Connected::NoRoom)
            }
            _ => Err(ConnectionRefusal::Malformed("a probe's answer").into()),
        }
    }

    /// Takes what rank 0 sent, and sends this rank's status where its
    /// windows thread shared a new one (or a beat, where nothing was sent
    /// for a while).
    fn exchange(&mut self, link: &mut Link) -> Result<(), Unreached> {
        let s = &self.state.settings;
        while readable(&link.stream)? {
            let until = Instant::now() + HANDSHAKE_TIMEOUT;
            let body = link.reply(&s.token, kind::MIRRORED, MAX_MESSAGE_BYTES, until)?;
            let mirrored: Mirrored = serde_json::from_slice(&body)
                .map_err(|_| ConnectionRefusal::Malformed("a mirrored message"))?;
            // Handed to the windows thread (a plan of another run is not
            // this rank's).
            match mirrored {
                Mirrored::Plan { plan } if plan.run.as_deref() == Some(s.run_id.as_str()) => {
                    self.next_plan = self.next_plan.max(plan.index.saturating_add(1));
                    s.windows.deliver(plan);
                }
                Mirrored::Plan { .. } => {}
                Mirrored::Watch => s.windows.rank_0_watches(),
            }
        }
        // Its own status, then those it relays as its node's leader.
        let own = s.windows.take_status().map(|status| (s.rank, status));
        let mut statuses = own.into_iter().chain(s.windows.take_relayed()).peekable();
        // Where there are none, an empty frame: a beat.
        if statuses.peek().is_none() && self.sent.elapsed() >= BEAT {
            let until = Instant::now() + HANDSHAKE_TIMEOUT;
            write_frame(&mut link.stream, kind::STATUS, &[], until)?;
            self.sent = Instant::now();
        }
        while let Some((rank, status)) = statuses.next() {
            let sent = RankStatus {
                rank,
                status: status.bounded(),
            };
            let body = serde_json::to_vec(&sent).expect("a status serialises");
            let until = Instant::now() + HANDSHAKE_TIMEOUT;
            if let Err(cut) = write_frame(&mut link.stream, kind::STATUS, &body, until) {
                let unsent = std::iter::once((sent.rank, sent.status)).chain(statuses);
                s.windows.keep_unsent(s.rank, unsent);
                return Err(cut.into());
            }
            self.sent = Instant::now();
        }
        Ok(())
    }
}

/// What rank 0 answered a mirror's probe.
enum Connected {
    /// Rank 0 does not see the rank's folder: plans and statuses travel
    /// on this connection.
    Apart(Link),
    /// Rank 0 sees the rank's folder: nothing travels.
    Shared,
    /// Apart, but rank 0 keeps as many mirrors as it can already.
    NoRoom,
    /// The node's leader does not relay for the rank: it goes to rank 0.
    ToRank0,
}

/// When to try again after failures, and whether to say so: the first
/// failures of a connection that may be needed at all are not said.
struct Backoff {
    at: Instant,
    wait: Duration,
    failures: u32,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            at: Instant::now(),
            wait: RETRY,
            failures: 0,
        }
    }

    fn due(&self) -> bool {
        Instant::now() >= self.at
    }

    /// Notes a failure of `what`, said once, after [`QUIET_TRIES`].
    fn failed(&mut self, e: &Unreached, what: &str) {
        self.failures += 1;
        if self.failures == QUIET_TRIES {
            notice!(
                "{what} cannot travel between this rank and rank 0 (needed where this rank does \
                 not see rank 0's session directory; tried again, less and less often): {}",
                rankscope_common::error::Chain(e)
            );
        }
        self.at = Instant::now() + self.wait;
        self.wait = (self.wait * 2).min(MAX_RETRY);
    }
}

/// The payload sender's thread: sends each window payload queued, in
/// order, once rank 0 said it does not see this rank's folder; one that
/// fails is tried again (with a growing pause) for `payload_timeout`.
fn send_payloads(state: &MirrorState, queued: &Receiver<(u32, PathBuf)>) {
    let mut pending: Vec<(u32, PathBuf, Option<Instant>)> = Vec::new();
    let mut retry = Backoff::new();
    let queue = |pending: &mut Vec<(u32, PathBuf, Option<Instant>)>, (index, path)| {
        if pending.len() >= MAX_QUEUED {
            let (dropped, _, _) = pending.remove(0);
            notice!(
                "window {dropped}: this rank's data is not sent to rank 0: {MAX_QUEUED} later \
                 windows wait to be sent already"
            );
        }
        pending.push((index, path, None));
    };
    loop {
        match queued.recv_timeout(RANK_TICK) {
            Ok(written) => queue(&mut pending, written),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        while let Ok(written) = queued.try_recv() {
            queue(&mut pending, written);
        }
        let last_until = *lock(&state.last_until);
        let stopping = state.stopping();
        // At the stop, what was queued (all there is: the windows thread
        // ended first) is tried until the last look's end.
        let over = last_until.is_none_or(|until| Instant::now() >= until);
        if stopping && (pending.is_empty() || over) {
            return;
        }
        match state.folder.load(Ordering::SeqCst) {
            folder::NOTHING => return,
            folder::UNKNOWN if stopping => {
                if let Some((first, _, _)) = pending.first() {
                    notice!(
                        "window {first} and later: this rank's data is not sent to rank 0: rank \
                         0 never answered whether it sees this rank's folder"
                    );
                }
                return;
            }
            folder::UNKNOWN => continue,
            _ => {}
        }
        while let Some((index, path, first_try)) = pending.first_mut() {
            if !retry.due() && !state.stopping() {
                break;
            }
            let since = *first_try.get_or_insert_with(Instant::now);
            match send_window(&state.settings, *index, path, last_until) {
                Ok(()) => {
                    pending.remove(0);
                    retry = Backoff::new();
                }
                // A file that cannot be read will not be read on a second try.
                Err(e @ Unreached::Files(_)) => {
                    notice!(
                        "window {index}: this rank's data cannot be read to send it to rank 0: {}",
                        rankscope_common::error::Chain(&e)
                    );
                    pending.remove(0);
                }
                // Rank 0 said why it does not take it: no second try.
                Err(Unreached::Refused(refusal)) if !refusal.again => {
                    notice!("window {index}: this rank's data is not sent: {refusal}");
                    pending.remove(0);
                }
                Err(e) if since.elapsed() >= state.settings.payload_timeout => {
                    notice!(
                        "window {index}: this rank's data did not reach rank 0: {}",
                        rankscope_common::error::Chain(&e)
                    );
                    pending.remove(0);
                }
                Err(e) => {
                    retry.failed(&e, "window payloads");
                    break;
                }
            }
            if last_until.is_some_and(|until| Instant::now() >= until) {
                return;
            }
        }
    }
}

/// Sends window `index`'s payload at `path` to rank 0, by `until` where
/// given (the stop's last look).
fn send_window(
    s: &MirrorSettings,
    index: u32,
    path: &Path,
    until: Option<Instant>,
) -> Result<(), Unreached> {
    let bytes = open_regular(path, false)
        .and_then(|f| read_capped(f, s.max_frame))
        .map_err(Unreached::Files)?;
    let file = path.file_name().unwrap_or_default().to_string_lossy();
    let by = |wait: Duration| until.map_or(Instant::now() + wait, |u| u.min(Instant::now() + wait));
    let mut link = Link::open(
        &s.payload_endpoint,
        &s.token,
        (s.rank, purpose::WINDOW_PAYLOAD),
        by(HANDSHAKE_TIMEOUT),
    )?;
    let name = format!("{index}/{file}");
    write_frame(
        &mut link.stream,
        kind::WINDOW_NAME,
        name.as_bytes(),
        by(HANDSHAKE_TIMEOUT),
    )?;
    let deadline = by(s.payload_timeout);
    write_frame(&mut link.stream, kind::PAYLOAD, &bytes, deadline)?;
    link.reply(&s.token, kind::ACK, MAX_CONTROL_BYTES, deadline)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use rankscope_common::spill::SpillName;
    use rankscope_common::window::{LiveStatus, Plan, Trigger};

    use super::super::control::ServedControl;
    use super::super::server::Serves;
    use super::super::test_support::{listener, rank_0, TestListener, TOKEN};
    use super::*;
    use crate::control::Inbox;

    fn settings(endpoint: &str, own: &Path, windows: WindowControl) -> MirrorSettings {
        MirrorSettings {
            endpoint: endpoint.to_string(),
            payload_endpoint: endpoint.to_string(),
            token: TOKEN.to_vec(),
            rank: 1,
            session_dir: own.to_path_buf(),
            run_id: "r".into(),
            max_frame: 1 << 20,
            payload_timeout: Duration::from_secs(5),
            windows,
        }
    }

    /// Window `index`'s plan in run `run`.
    fn plan(index: u32, run: &str) -> Plan {
        Plan {
            index,
            first_step: 10,
            steps: 5,
            trigger: Trigger::Command,
            nonce: format!("n{index}"),
            torch: false,
            python: false,
            run: Some(run.into()),
            cancelled: None,
        }
    }

    /// Rank 0 of 4 ranks in nodes of 2, rank 2 leading the second node
    /// (its listener, and its own mirror to rank 0), and rank 3 mirroring
    /// through rank 2, with its windows thread's inbox.
    struct TwoNodes {
        rank_0: TestListener,
        leader: TestListener,
        rank_2: Mirror,
        rank_3: Mirror,
        inbox: Inbox,
    }

    /// [`TwoNodes`], rank 0 writing under `home`, rank 2 under `leaders`,
    /// rank 3 under `own`.
    fn two_nodes(home: &Path, leaders: &Path, own: &Path) -> TwoNodes {
        let rank_0 = listener(home, Serves::Rank0 { node_size: Some(2) }, (4, 1..4));
        let leader = listener(leaders, Serves::Leader, (4, 3..4));
        let rank_2 = Mirror::start(MirrorSettings {
            rank: 2,
            ..settings(&rank_0.endpoint, leaders, leader.windows.clone())
        })
        .unwrap();
        let (windows, inbox) = WindowControl::new(std::sync::Arc::new(()));
        let rank_3 = Mirror::start(MirrorSettings {
            rank: 3,
            endpoint: leader.endpoint.clone(),
            ..settings(&rank_0.endpoint, own, windows)
        })
        .unwrap();
        TwoNodes {
            rank_0,
            leader,
            rank_2,
            rank_3,
            inbox,
        }
    }

    /// A rank's status in a job of `world_size` ranks.
    fn status(world_size: u32) -> LiveStatus {
        LiveStatus {
            run: Some("r".into()),
            world_size,
            host: "node-1".into(),
            elapsed_s: 1.0,
            steps: 7,
            step_s: Some(0.01),
            stages: vec!["denoise".into()],
            gpus: Vec::new(),
            simulated: false,
        }
    }

    /// Waits (up to 30 s) until `what` holds.
    fn eventually(what: &str, holds: impl Fn() -> bool) {
        let started = Instant::now();
        while !holds() {
            assert!(started.elapsed() < Duration::from_secs(30), "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A rank whose folder rank 0 does not see: rank 0's plans (of this
    /// run) and watch reach its folder, its status and its window
    /// payloads (of any window, in any order) reach rank 0's.
    #[test]
    fn a_rank_apart_mirrors_plans_statuses_and_window_payloads() {
        let (home, own) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let rank_0 = rank_0(home.path());
        let (windows, inbox) = WindowControl::new(std::sync::Arc::new(()));
        let mirror = Mirror::start(settings(&rank_0.endpoint, own.path(), windows)).unwrap();
        // Posted by rank 0's windows thread, handed to this rank's.
        rank_0.inbox.post(&plan(1, "r"));
        eventually("plan 1 sent", || inbox.delivered(1) == Some(plan(1, "r")));
        // Rewritten (rank 0 ended the window early): mirrored again.
        let cancelled = Plan {
            steps: 0,
            cancelled: Some(window::Cancelled {
                nonce: "c".into(),
                reason: "cancelled".into(),
            }),
            ..plan(1, "r")
        };
        rank_0.inbox.post(&cancelled);
        eventually("the rewritten plan sent", || {
            inbox.delivered(1).as_ref() == Some(&cancelled)
        });
        window::watch(home.path()).unwrap();
        eventually("the watch sent", || {
            inbox.watched_within(Duration::from_secs(5))
        });
        let status = status(2);
        // Shared by the rank's windows thread: sent as a message, not read
        // from a file.
        inbox.share_status(status.clone());
        eventually("the status sent", || {
            window::read_status(home.path(), 1).is_ok_and(|s| s == status)
        });
        let name = |process| {
            SpillName {
                rank: 1,
                run_id: Some("r"),
                process,
            }
            .file_name()
        };
        let write = |index, process| {
            let folder = window::window_dir(own.path(), index);
            std::fs::create_dir_all(&folder).unwrap();
            let path = folder.join(name(process));
            std::fs::write(&path, format!("window {index} of {process}")).unwrap();
            mirror.window_written(index, &path);
        };
        // Rank 0 planned windows up to 9: one past them is refused, and a
        // second payload of this rank for a window (another process's).
        rank_0.inbox.planned(9);
        for (index, process) in [(10, 7), (9, 7), (2, 7), (2, 8), (3, 7)] {
            write(index, process);
        }
        for index in [2, 3, 9] {
            let there = window::window_dir(home.path(), index).join(name(7));
            eventually("the payload sent", || {
                std::fs::read_to_string(&there).is_ok_and(|t| t == format!("window {index} of 7"))
            });
        }
        assert!(!window::window_dir(home.path(), 10).exists());
        let twos = std::fs::read_dir(window::window_dir(home.path(), 2)).unwrap();
        assert_eq!(twos.count(), 1, "one payload of rank 1 in window 2");
        // Another run's plan is not this rank's; the next of its own is,
        // sent after it. Nothing is written into the rank's folder.
        rank_0.inbox.post(&plan(2, "an earlier run"));
        rank_0.inbox.post(&plan(3, "r"));
        eventually("plan 3 sent", || inbox.delivered(3) == Some(plan(3, "r")));
        assert_eq!(inbox.delivered(2), None);
        assert!(window::read_plan(own.path(), 1).unwrap().is_none());
        mirror.finish(Instant::now() + Duration::from_secs(5));
    }

    /// Two nodes of two ranks, each node with a folder of its own: rank 3
    /// mirrors through its leader, rank 2, so that rank 0 serves one mirror
    /// for the node. Rank 0's plans reach rank 3 through rank 2's board,
    /// rank 3's status reaches rank 0's folder through rank 2's mirror, and
    /// its window payload goes to rank 0 itself.
    #[test]
    fn a_node_leader_relays_its_nodes_mirrors() {
        let (home, node) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let TwoNodes {
            rank_0,
            leader,
            rank_2,
            rank_3,
            inbox,
        } = two_nodes(home.path(), node.path(), node.path());
        let plan = plan(1, "r");
        rank_0.inbox.post(&plan);
        eventually("the plan relayed", || {
            inbox.delivered(1) == Some(plan.clone())
        });
        assert_eq!(leader.inbox.delivered(1), Some(plan.clone()));
        let status = status(4);
        inbox.share_status(status.clone());
        eventually("the status relayed", || {
            window::read_status(home.path(), 3).is_ok_and(|s| s == status)
        });
        assert!(window::read_status(node.path(), 3).is_err(), "not written");
        rank_0.inbox.planned(1);
        let name = SpillName {
            rank: 3,
            run_id: Some("r"),
            process: 7,
        }
        .file_name();
        let folder = window::window_dir(node.path(), 1);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(&name), "window 1 of rank 3").unwrap();
        rank_3.window_written(1, &folder.join(&name));
        let there = window::window_dir(home.path(), 1).join(&name);
        eventually("the payload sent to rank 0", || there.exists());
        assert_eq!(rank_0.server.mirrored_ranks(), [2], "one mirror per node");
        assert_eq!(leader.server.mirrored_ranks(), [3]);
        rank_3.finish(Instant::now() + Duration::from_secs(5));
        rank_2.finish(Instant::now() + Duration::from_secs(5));
    }

    /// A leader whose folder rank 0 sees relays for no rank: a rank of its
    /// node that does not share that folder is sent to rank 0, and is
    /// mirrored there.
    #[test]
    fn a_leader_in_rank_0s_folder_sends_a_rank_apart_to_rank_0() {
        let (home, own) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let TwoNodes {
            rank_0,
            leader,
            rank_2,
            rank_3,
            inbox,
        } = two_nodes(home.path(), home.path(), own.path());
        let plan = plan(1, "r");
        rank_0.inbox.post(&plan);
        eventually("the plan sent", || inbox.delivered(1) == Some(plan.clone()));
        assert_eq!(rank_0.server.mirrored_ranks(), [3]);
        assert!(leader.server.mirrored_ranks().is_empty());
        rank_3.finish(Instant::now() + Duration::from_secs(5));
        rank_2.finish(Instant::now() + Duration::from_secs(5));
    }

    /// Rank 0 takes a rank's own status from its mirror, and from a node's
    /// leader those of its node; no other.
    #[test]
    fn rank_0_takes_relayed_statuses_from_a_nodes_leader_alone() {
        let dir = tempfile::tempdir().unwrap();
        let control = ServedControl {
            session_dir: dir.path().to_path_buf(),
            windows: WindowControl::new(std::sync::Arc::new(())).0,
        };
        let role = Mirrors::Rank0 { node_size: Some(2) };
        let desk = MirrorDesk::new(control, "r".into(), (role, 6));
        for (rank, of, taken) in [
            (1, 1, true),
            (1, 3, false),
            (2, 3, true),
            (2, 4, false),
            (4, 5, true),
            (3, 2, false),
            (6, 7, false),
        ] {
            assert_eq!(desk.takes_status(rank, of), taken, "{rank} for {of}");
        }
    }

    /// A rank that shares rank 0's folder mirrors nothing: its mirror ends
    /// at once, its probe file gone, and it takes no place among rank 0's
    /// mirrors (a rank apart after it is mirrored still).
    #[test]
    fn a_rank_in_rank_0s_folder_mirrors_nothing() {
        let (home, own) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let rank_0 = rank_0(home.path());
        let endpoint = rank_0.endpoint.clone();
        let mirror = Mirror::start(settings(
            &endpoint,
            home.path(),
            WindowControl::new(std::sync::Arc::new(())).0,
        ))
        .unwrap();
        eventually("rank 0 answered the probe", || {
            mirror.state.folder.load(Ordering::SeqCst) == folder::NOTHING
        });
        let apart = Mirror::start(settings(
            &endpoint,
            own.path(),
            WindowControl::new(std::sync::Arc::new(())).0,
        ))
        .unwrap();
        eventually("rank 0 mirrors the rank apart", || {
            apart.state.folder.load(Ordering::SeqCst) == folder::APART
        });
        apart.finish(Instant::now() + Duration::from_secs(5));
        let probes = std::fs::read_dir(window::control_dir(home.path()))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains("probe")
            })
            .count();
        assert_eq!(probes, 0, "the probe file is removed");
        mirror.finish(Instant::now() + Duration::from_secs(5));
    }

    /// A rank 0 that takes connections and never answers (stopped, say)
    /// does not hold the rank's finish past the time it is given.
    #[test]
    fn a_silent_rank_0_does_not_hold_the_finish() {
        let own = tempfile::tempdir().unwrap();
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = silent.local_addr().unwrap().to_string();
        let mirror = Mirror::start(settings(
            &endpoint,
            own.path(),
            WindowControl::new(std::sync::Arc::new(())).0,
        ))
        .unwrap();
        let state = Arc::clone(&mirror.state);
        std::thread::sleep(Duration::from_millis(200));
        // The mirror waits up to 5 s for rank 0's greeting; the finish,
        // given a second, returns while it still does.
        mirror.finish(Instant::now() + Duration::from_secs(1));
        assert!(
            state.linking.load(Ordering::SeqCst),
            "the finish waited for rank 0"
        );
        drop(silent);
    }
}
