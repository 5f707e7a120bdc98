//! Window control mirrored over TCP, for ranks that do not see rank 0's
//! session directory (a job on several nodes, each writing under a folder
//! of its own): windows meet in one folder, and here the files travel to
//! it and from it.
//!
//! Each rank other than 0 keeps a connection to rank 0 (purpose `MIRROR`)
//! while its session runs ([`Mirror`]). It first leaves a probe file in
//! its own control folder and names it; rank 0 looks for it in its own:
//! found, the two share the folder and nothing is mirrored. Otherwise rank
//! 0 sends the rank each window plan of this run it writes and, while
//! `rankscope top` watches, the watch ([`Mirrored`]); the rank writes them
//! into its own control folder, where its windows thread reads them as if
//! rank 0 had written them there. The rank sends each status it rewrites,
//! which rank 0 writes into its own control folder (for imbalance windows
//! and `top`), and each window payload it writes, on a connection of its
//! own (purpose `WINDOW_PAYLOAD`), which rank 0 writes into the window's
//! folder, where the window's gather finds it by the directory transport's
//! rules. The windows work unchanged on both sides: only the files travel.
//!
//! Rank 0 keeps at most [`MAX_MIRRORS`] mirrors, a thread each looking
//! every [`TICK`] (the rank every [`RANK_TICK`]); a rank past them, or one that cannot reach rank 0, is
//! named missing in the windows it cannot reach, as a rank blind to a
//! shared folder is.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use rankscope_common::file::{create_real_dir, open_regular, read_capped, write_atomic};
use rankscope_common::gather::ConnectionRefusal;
use rankscope_common::remote::Mirrored;
use rankscope_common::spill;
use rankscope_common::window::{self, LiveStatus};

use super::wire::{
    kind, purpose, read_frame, read_frame_within, readable, write_frame, FrameBudget,
    MAX_CONTROL_BYTES,
};
use super::{Link, Unreached, HANDSHAKE_TIMEOUT};
use crate::notice::notice;

/// How often rank 0 looks for what to send a mirror (a plan leads its
/// window by 0.3 s: this look, the rank's and its windows thread's fit).
const TICK: Duration = Duration::from_millis(100);
/// How often a rank looks (its own files only).
const RANK_TICK: Duration = Duration::from_millis(50);
/// How long a rank waits to try rank 0 again after a failed connection,
/// at first; each failure more doubles it, up to [`MAX_RETRY`].
const RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two tries.
const MAX_RETRY: Duration = Duration::from_secs(30);
/// The most mirrors rank 0 keeps at once.
const MAX_MIRRORS: usize = 1024;
/// The largest status or mirrored message read (each is bounded far
/// below: `LiveStatus::bounded`, a plan).
const MAX_MESSAGE_BYTES: u64 = 64 << 10;
/// How often rank 0 passes the watch on while `rankscope top` watches.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// A watch older than this is over (the ranks' own reading of it is 5 s).
const WATCH_FRESH: Duration = Duration::from_secs(3);
/// Windows past the next one a rank looks in for its payload (where it
/// wrote none of a window, the next ones still go).
const WINDOWS_AHEAD: u32 = 4;
/// The probe file's name before its rank and nonce.
const PROBE_PREFIX: &str = "mirror-probe-";

/// Rank 0's side: the mirrors of the session in `session_dir`.
pub(super) struct MirrorDesk {
    session_dir: PathBuf,
    run_id: String,
    mirrors: AtomicUsize,
}

/// A mirror being served; dropped, it makes room for another.
struct Serving<'a>(&'a AtomicUsize);

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl MirrorDesk {
    /// The desk of the session in `session_dir`, run `run_id`.
    pub(super) fn new(session_dir: PathBuf, run_id: String) -> Self {
        MirrorDesk {
            session_dir,
            run_id,
            mirrors: AtomicUsize::new(0),
        }
    }

    /// Serves rank `rank`'s mirror until it closes it or `stop` (the
    /// gather ended); `reply` seals a message.
    pub(super) fn serve(
        &self,
        stream: &mut TcpStream,
        rank: u32,
        reply: &dyn Fn(u8, &[u8]) -> Vec<u8>,
        stop: &AtomicBool,
    ) -> Result<(), ConnectionRefusal> {
        let dir = &self.session_dir;
        let handshake = Instant::now() + HANDSHAKE_TIMEOUT;
        let probe = read_frame(stream, kind::PROBE, MAX_CONTROL_BYTES, handshake)?;
        let probe = String::from_utf8(probe)
            .ok()
            .filter(|name| is_probe_of(name, rank))
            .ok_or(ConnectionRefusal::Malformed("a probe's name"))?;
        let probed = std::fs::symlink_metadata(window::control_dir(dir).join(probe));
        let shared = probed.is_ok_and(|meta| meta.is_file());
        let room = shared || self.mirrors.fetch_add(1, Ordering::SeqCst) < MAX_MIRRORS;
        let _serving = (!shared).then(|| Serving(&self.mirrors));
        let answer = match (shared, room) {
            (true, _) => Probed::Shared,
            (false, true) => Probed::Apart,
            (false, false) => Probed::NoRoom,
        };
        write_frame(
            stream,
            kind::SHARED,
            &reply(kind::SHARED, &[answer as u8]),
            handshake,
        )?;
        if answer != Probed::Apart {
            return Ok(());
        }
        let mut next_plan = 1u32;
        let mut watch_sent: Option<Instant> = None;
        let send = |stream: &mut TcpStream, mirrored: &Mirrored| {
            let body = serde_json::to_vec(mirrored).expect("a message serialises");
            let until = Instant::now() + HANDSHAKE_TIMEOUT;
            write_frame(stream, kind::MIRRORED, &reply(kind::MIRRORED, &body), until)
        };
        while !stop.load(Ordering::SeqCst) {
            // This run's plans, in order (one of an earlier launch in the
            // same folder waits for this run's rank 0 to write its own).
            while let Ok(Some(plan)) = window::read_plan(dir, next_plan) {
                if plan.run.as_deref() != Some(self.run_id.as_str()) {
                    break;
                }
                send(stream, &Mirrored::Plan { plan })?;
                next_plan += 1;
            }
            let watched = window::watched(dir, WATCH_FRESH);
            if watched && watch_sent.is_none_or(|sent| sent.elapsed() >= WATCH_EVERY) {
                send(stream, &Mirrored::Watch)?;
                watch_sent = Some(Instant::now());
            }
            // The rank's statuses; its closing the connection is its end.
            while match readable(stream) {
                Err(ConnectionRefusal::Closed) => return Ok(()),
                readable => readable?,
            } {
                let until = Instant::now() + HANDSHAKE_TIMEOUT;
                let body = read_frame(stream, kind::STATUS, MAX_MESSAGE_BYTES, until)?;
                let status: LiveStatus = serde_json::from_slice(&body)
                    .map_err(|_| ConnectionRefusal::Malformed("a status that does not parse"))?;
                let _ = window::write_status(dir, rank, status);
            }
            std::thread::sleep(TICK);
        }
        Ok(())
    }

    /// Takes rank `rank`'s payload of a window and writes it into the
    /// window's folder (unless a file of that name is there: the rank
    /// wrote it there itself), within `max_frame` bytes, by `timeout`, its
    /// bytes held against `frames`.
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
        let until = Instant::now() + timeout;
        let (bytes, _held) =
            read_frame_within(stream, kind::PAYLOAD, max_frame, until, Some(frames))?;
        let folder = window::window_dir(&self.session_dir, index);
        let path = folder.join(file);
        let written = create_real_dir(&folder).and_then(|()| match path.exists() {
            true => Ok(()),
            false => write_atomic(&path, &bytes),
        });
        written.map_err(|_| ConnectionRefusal::WrongPayload("its window's folder is not writable"))
    }
}

/// Rank 0's answer to a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Probed {
    /// Apart: the files are mirrored.
    Apart = 0,
    /// The rank and rank 0 share the folder: nothing to mirror.
    Shared = 1,
    /// Apart, but rank 0 mirrors [`MAX_MIRRORS`] ranks already.
    NoRoom = 2,
}

/// Whether `name` is a probe file's name of `rank`: `mirror-probe-<rank>-`
/// and 32 hexadecimal digits.
fn is_probe_of(name: &str, rank: u32) -> bool {
    name.strip_prefix(PROBE_PREFIX)
        .and_then(|rest| rest.strip_prefix(&format!("{rank}-")))
        .is_some_and(|nonce| nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// What a rank's mirror needs to know.
pub(super) struct MirrorSettings {
    pub(super) endpoint: String,
    pub(super) token: Vec<u8>,
    pub(super) rank: u32,
    /// The rank's own session directory.
    pub(super) session_dir: PathBuf,
    pub(super) run_id: String,
    /// The largest payload rank 0 takes.
    pub(super) max_frame: u64,
    /// How long a window payload may take to send.
    pub(super) payload_timeout: Duration,
}

/// A rank's mirror of rank 0's window control files, on a thread of its
/// own while the session runs.
pub(super) struct Mirror {
    stop: Arc<AtomicBool>,
    /// At the stop, window payloads written since the last look are sent
    /// (the session's last window, closed as it finished).
    last_look: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Mirror {
    /// Starts the mirror; `None` (said) where its thread cannot start.
    pub(super) fn start(settings: MirrorSettings) -> Option<Mirror> {
        let stop = Arc::new(AtomicBool::new(false));
        let last_look = Arc::new(AtomicBool::new(false));
        let mut mirroring = Mirroring {
            settings,
            link: None,
            apart: false,
            retry_at: Instant::now(),
            retry: RETRY,
            next_window: 1,
            status_sent: None,
            said: false,
        };
        let (stopped, looking) = (Arc::clone(&stop), Arc::clone(&last_look));
        let thread = std::thread::Builder::new()
            .name("rankscope-mirror".into())
            .spawn(move || mirroring.run(&stopped, &looking));
        match thread {
            Ok(thread) => Some(Mirror {
                stop,
                last_look,
                thread: Some(thread),
            }),
            Err(e) => {
                notice!("windows cannot reach this rank unless it sees rank 0's folder: {e}");
                None
            }
        }
    }

    /// Sends the window payloads not sent yet, then stops.
    pub(super) fn finish(mut self) {
        self.last_look.store(true, Ordering::SeqCst);
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The mirror thread's state.
struct Mirroring {
    settings: MirrorSettings,
    link: Option<Link>,
    /// Rank 0 said it does not see this rank's folder.
    apart: bool,
    retry_at: Instant,
    /// The wait before the next try, after a failure.
    retry: Duration,
    /// The window whose payload is sent next.
    next_window: u32,
    /// When the status last sent was written.
    status_sent: Option<SystemTime>,
    /// A failure was said (one is, of all).
    said: bool,
}

impl Mirroring {
    fn run(&mut self, stop: &AtomicBool, last_look: &AtomicBool) {
        loop {
            if stop.load(Ordering::SeqCst) {
                if last_look.load(Ordering::SeqCst) && self.apart {
                    self.send_windows();
                }
                return;
            }
            if self.link.is_none() && Instant::now() >= self.retry_at {
                match self.connect() {
                    Ok(Some(link)) => {
                        self.link = Some(link);
                        self.apart = true;
                        self.retry = RETRY;
                    }
                    // One folder: nothing to mirror.
                    Ok(None) => return,
                    Err(e) => self.failed(&e),
                }
            }
            if let Some(mut link) = self.link.take() {
                match self.exchange(&mut link) {
                    Ok(()) => self.link = Some(link),
                    Err(e) => self.failed(&e),
                }
            }
            if self.apart {
                self.send_windows();
            }
            std::thread::sleep(RANK_TICK);
        }
    }

    /// Said once; tried again later, each time later still.
    fn failed(&mut self, e: &Unreached) {
        if !self.said {
            self.said = true;
            notice!(
                "window plans and payloads cannot travel between this rank and rank 0 (tried \
                 again, less and less often): {}",
                rankscope_common::error::Chain(e)
            );
        }
        self.retry_at = Instant::now() + self.retry;
        self.retry = (self.retry * 2).min(MAX_RETRY);
    }

    /// The mirror's connection, after the probe; `None` where rank 0 sees
    /// this rank's folder, or has no room for another mirror.
    fn connect(&self) -> Result<Option<Link>, Unreached> {
        let s = &self.settings;
        let until = Instant::now() + HANDSHAKE_TIMEOUT;
        let mut link = Link::open(&s.endpoint, &s.token, (s.rank, purpose::MIRROR), until)?;
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|_| Unreached::NoRandomness)?;
        let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let probe = format!("{PROBE_PREFIX}{}-{hex}", s.rank);
        let control = window::control_dir(&s.session_dir);
        let path = control.join(&probe);
        create_real_dir(&control)
            .and_then(|()| write_atomic(&path, b"probe\n"))
            .map_err(Unreached::Files)?;
        let answer = write_frame(&mut link.stream, kind::PROBE, probe.as_bytes(), until)
            .map_err(Unreached::from)
            .and_then(|()| link.reply(&s.token, kind::SHARED, MAX_CONTROL_BYTES, until));
        let _ = std::fs::remove_file(&path);
        match answer?.as_slice() {
            [0] => Ok(Some(link)),
            [1] => Ok(None),
            [2] => {
                notice!(
                    "rank 0 mirrors its window files for {MAX_MIRRORS} ranks already: this \
                     rank takes part in windows only where it sees rank 0's session directory"
                );
                Ok(None)
            }
            _ => Err(ConnectionRefusal::Malformed("a probe's answer").into()),
        }
    }

    /// Takes what rank 0 sent, and sends this rank's status where it was
    /// rewritten.
    fn exchange(&mut self, link: &mut Link) -> Result<(), Unreached> {
        let s = &self.settings;
        let dir = &s.session_dir;
        while readable(&link.stream)? {
            let until = Instant::now() + HANDSHAKE_TIMEOUT;
            let body = link.reply(&s.token, kind::MIRRORED, MAX_MESSAGE_BYTES, until)?;
            let mirrored: Mirrored = serde_json::from_slice(&body)
                .map_err(|_| ConnectionRefusal::Malformed("a mirrored message"))?;
            // Written for the windows thread to read, as rank 0 wrote it.
            let _ = match mirrored {
                Mirrored::Plan { plan } if plan.run.as_deref() == Some(s.run_id.as_str()) => {
                    window::write_plan(dir, &plan)
                }
                Mirrored::Plan { .. } => Ok(()),
                Mirrored::Watch => window::watch(dir),
            };
        }
        let path = window::status_path(dir, s.rank);
        let written = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        if written.is_some() && written != self.status_sent {
            let bytes = open_regular(&path, false).and_then(|f| read_capped(f, MAX_MESSAGE_BYTES));
            if let Ok(bytes) = bytes {
                let until = Instant::now() + HANDSHAKE_TIMEOUT;
                write_frame(&mut link.stream, kind::STATUS, &bytes, until)?;
            }
            self.status_sent = written;
        }
        Ok(())
    }

    /// Sends rank 0 this rank's payloads of the next windows, in order, as
    /// they are written.
    fn send_windows(&mut self) {
        let s = &self.settings;
        let first = self.next_window;
        for index in first..first.saturating_add(WINDOWS_AHEAD) {
            let Some(path) = own_payload(&window::window_dir(&s.session_dir, index), s) else {
                continue;
            };
            match self.send_window(index, &path) {
                Ok(()) => {}
                Err(e) if !self.said => {
                    self.said = true;
                    notice!(
                        "window {index}: this rank's data did not reach rank 0 (later windows' \
                         failures are not said): {}",
                        rankscope_common::error::Chain(&e)
                    );
                }
                Err(_) => {}
            }
            self.next_window = index + 1;
        }
    }

    fn send_window(&self, index: u32, path: &Path) -> Result<(), Unreached> {
        let s = &self.settings;
        let bytes = open_regular(path, false)
            .and_then(|f| read_capped(f, s.max_frame))
            .map_err(Unreached::Files)?;
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        let until = Instant::now() + HANDSHAKE_TIMEOUT;
        let mut link = Link::open(
            &s.endpoint,
            &s.token,
            (s.rank, purpose::WINDOW_PAYLOAD),
            until,
        )?;
        let name = format!("{index}/{file}");
        write_frame(&mut link.stream, kind::WINDOW_NAME, name.as_bytes(), until)?;
        let until = Instant::now() + s.payload_timeout;
        write_frame(&mut link.stream, kind::PAYLOAD, &bytes, until)?;
        link.reply(&s.token, kind::ACK, MAX_CONTROL_BYTES, until)?;
        Ok(())
    }
}

/// This rank's payload file in the window folder `folder`, once written.
fn own_payload(folder: &Path, s: &MirrorSettings) -> Option<PathBuf> {
    std::fs::read_dir(folder)
        .ok()?
        .filter_map(|entry| entry.ok())
        .find(|entry| {
            let name = entry.file_name();
            let is_file = entry.file_type().is_ok_and(|t| t.is_file());
            is_file
                && spill::is_spill_of(
                    &name.to_string_lossy(),
                    Some(s.rank),
                    Some(s.run_id.as_str()),
                )
        })
        .map(|entry| entry.path())
}
