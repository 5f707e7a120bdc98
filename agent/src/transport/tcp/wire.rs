//! What crosses a TCP connection: frames (a kind byte, a length, the
//! bytes), each read and written by a deadline; the peer's proof that it
//! knows the job token, and rank 0's seal on its replies.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use rankscope_common::gather::ConnectionRefusal;
use sha2::Sha256;

use crate::sync::lock;

/// Message kinds: one byte before each frame's length.
pub(super) mod kind {
    pub const CHALLENGE: u8 = 1;
    pub const HELLO: u8 = 2;
    pub const RUN: u8 = 4;
    pub const PING: u8 = 5;
    pub const PONG: u8 = 6;
    pub const OFFSET: u8 = 7;
    pub const PAYLOAD: u8 = 8;
    pub const ACK: u8 = 9;
    pub const NODE_DIGEST: u8 = 10;
    pub const REQUEST: u8 = 11;
    pub const ANSWER: u8 = 12;
    pub const STATUSES: u8 = 13;
    pub const PROBE: u8 = 14;
    pub const SHARED: u8 = 15;
    pub const MIRRORED: u8 = 16;
    pub const STATUS: u8 = 17;
    pub const WINDOW_NAME: u8 = 18;
    /// Rank 0's refusal of an authenticated connection, sealed: whether to
    /// try again ([`super::Refusal`]) and why.
    pub const REFUSED: u8 = 19;
}

/// What a connection is for.
pub(super) mod purpose {
    pub const RENDEZVOUS: u8 = 1;
    pub const RESYNC: u8 = 2;
    pub const PAYLOAD: u8 = 3;
    pub const NODE_DIGEST: u8 = 4;
    /// A controller's: a window asked for (`rankscope trigger ENDPOINT`).
    pub const TRIGGER: u8 = 5;
    /// A controller's: the ranks' statuses (`rankscope top ENDPOINT`).
    pub const STATUS: u8 = 6;
    /// A rank's, for the session: the window control files mirrored.
    pub const MIRROR: u8 = 7;
    /// A rank's: one window payload, into the window's folder.
    pub const WINDOW_PAYLOAD: u8 = 8;
}

/// Largest control frame (everything but a payload).
pub(super) const MAX_CONTROL_BYTES: u64 = 4096;
/// A greeting: rank, purpose, the peer's nonce, its proof.
pub(super) const HELLO_BYTES: usize = 4 + 1 + 16 + 32;

/// A peer's greeting: its rank, the connection's purpose, its nonce and
/// its proof that it knows the token. Written by a rank ([`Hello::write`]),
/// read and checked by rank 0 ([`Hello::read`], [`Hello::proves`]): the
/// layout and the proof are defined here alone.
#[derive(Debug)]
pub(super) struct Hello<'a> {
    /// The rank the peer says it is.
    pub(super) rank: u32,
    /// What it came for (`purpose`).
    pub(super) what: u8,
    /// Its nonce: rank 0's replies are sealed with it.
    pub(super) nonce: &'a [u8],
    proof: &'a [u8],
}

impl<'a> Hello<'a> {
    /// The greeting of rank `rank` for `what`, proving that it knows
    /// `token` for this connection's `challenge`.
    pub(super) fn write(
        token: &[u8],
        challenge: &[u8],
        rank: u32,
        what: u8,
        nonce: &[u8; 16],
    ) -> Vec<u8> {
        let mut hello = Vec::with_capacity(HELLO_BYTES);
        hello.extend_from_slice(&rank.to_le_bytes());
        hello.push(what);
        hello.extend_from_slice(nonce);
        hello.extend_from_slice(
            &proof(token, challenge, rank, what, nonce)
                .finalize()
                .into_bytes(),
        );
        hello
    }

    /// Reads a greeting's parts; its proof is not checked yet.
    pub(super) fn read(bytes: &'a [u8]) -> Result<Self, ConnectionRefusal> {
        if bytes.len() != HELLO_BYTES {
            return Err(ConnectionRefusal::Malformed(
                "a greeting of the wrong length",
            ));
        }
        let (rank, rest) = bytes.split_at(4);
        let (what, rest) = rest.split_at(1);
        let (nonce, proof) = rest.split_at(16);
        Ok(Hello {
            rank: u32::from_le_bytes(rank.try_into().expect("4 bytes")),
            what: what[0],
            nonce,
            proof,
        })
    }

    /// Whether the greeting proves that its peer knows `token` for
    /// `challenge` (compared in constant time).
    pub(super) fn proves(&self, token: &[u8], challenge: &[u8]) -> bool {
        proof(token, challenge, self.rank, self.what, self.nonce)
            .verify_slice(self.proof)
            .is_ok()
    }
}

/// The peer's proof that it knows `token`: HMAC-SHA256 of the challenge,
/// its rank, the connection's purpose and its own nonce.
fn proof(token: &[u8], challenge: &[u8], rank: u32, what: u8, nonce: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(token).expect("HMAC takes any key");
    mac.update(challenge);
    mac.update(&rank.to_le_bytes());
    mac.update(&[what]);
    mac.update(nonce);
    mac
}

/// Rank 0's proof that a reply is its own: HMAC-SHA256, under the token, of
/// the connection's challenge and the peer's nonce (so that it cannot be
/// replayed on another connection), the reply's kind and its body.
fn seal(token: &[u8], challenge: &[u8], nonce: &[u8], kind: u8, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(token).expect("HMAC takes any key");
    mac.update(b"rank 0");
    mac.update(challenge);
    mac.update(nonce);
    mac.update(&[kind]);
    mac.update(body);
    mac
}

/// `body` followed by its seal.
pub(super) fn sealed(
    token: &[u8],
    challenge: &[u8],
    nonce: &[u8],
    kind: u8,
    body: &[u8],
) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(
        &seal(token, challenge, nonce, kind, body)
            .finalize()
            .into_bytes(),
    );
    out
}

/// The body of a sealed reply, if its seal is rank 0's (compared in
/// constant time).
pub(super) fn unsealed(
    token: &[u8],
    challenge: &[u8],
    nonce: &[u8],
    kind: u8,
    frame: &[u8],
) -> Option<Vec<u8>> {
    let (body, mac) = frame.split_at(frame.len().checked_sub(32)?);
    seal(token, challenge, nonce, kind, body)
        .verify_slice(mac)
        .ok()?;
    Some(body.to_vec())
}

/// Rank 0's refusal of a connection after its greeting, as its peer reads
/// it: whether another try may be taken, and why it was refused. The body
/// of a [`kind::REFUSED`] frame: one byte (1: try again), then the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    /// A later try may be taken: the rank's places were all taken, rank 0
    /// had no room for another controller or no file descriptor, or the
    /// frame came slower than rank 0 takes (a congested link may do better).
    pub(super) again: bool,
    /// Why, as rank 0 said it.
    pub(super) why: String,
}

impl Refusal {
    /// The body that tells a peer `refusal`.
    pub(super) fn body(refusal: &ConnectionRefusal) -> Vec<u8> {
        let again = matches!(
            refusal,
            ConnectionRefusal::TooMany
                | ConnectionRefusal::Busy
                | ConnectionRefusal::NoResources
                | ConnectionRefusal::TooSlow { .. }
        );
        let mut body = vec![u8::from(again)];
        body.extend_from_slice(refusal.to_string().as_bytes());
        body
    }

    /// A refusal's body read (its reason at most [`MAX_CONTROL_BYTES`]).
    pub(super) fn read(body: &[u8]) -> Self {
        let (again, why) = body.split_first().unwrap_or((&0, &[]));
        Refusal {
            again: *again == 1,
            why: String::from_utf8_lossy(why).into_owned(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank 0 refused it: {}", self.why)
    }
}

/// Writes one frame — its kind, its length (u64, little endian), its bytes —
/// all of it by `deadline` (a peer that reads a byte now and then gets no
/// longer).
pub(super) fn write_frame(
    stream: &mut TcpStream,
    kind: u8,
    body: &[u8],
    deadline: Instant,
) -> Result<(), ConnectionRefusal> {
    let mut head = [0u8; 9];
    head[0] = kind;
    head[1..].copy_from_slice(&(body.len() as u64).to_le_bytes());
    write_all_by(stream, &head, deadline)?;
    write_all_by(stream, body, deadline)?;
    stream.flush().map_err(|e| refusal_of(&e))
}

/// Writes all of `bytes` to `stream` by `deadline`.
fn write_all_by(
    stream: &mut TcpStream,
    bytes: &[u8],
    deadline: Instant,
) -> Result<(), ConnectionRefusal> {
    transfer_by(bytes.len(), deadline, |done, left| {
        stream.set_write_timeout(Some(left))?;
        stream.write(&bytes[done..])
    })
}

/// Moves `len` bytes by `deadline`, `step` at a time: given how many moved
/// so far and the time left, it moves some more (a read or a write, its
/// timeout set) and says how many.
fn transfer_by(
    len: usize,
    deadline: Instant,
    mut step: impl FnMut(usize, Duration) -> std::io::Result<usize>,
) -> Result<(), ConnectionRefusal> {
    let mut done = 0;
    // Once past the deadline, a last moment to take what already arrived
    // (bytes that came while this thread did not run still count).
    let mut last_moment: Option<Instant> = None;
    while done < len {
        let now = Instant::now();
        let left = match deadline.saturating_duration_since(now) {
            left if !left.is_zero() => left,
            _ => {
                let until = *last_moment.get_or_insert(now + LAST_MOMENT);
                if now >= until {
                    return Err(ConnectionRefusal::Stalled);
                }
                until - now
            }
        };
        match step(done, left) {
            Ok(0) => return Err(ConnectionRefusal::Closed),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(refusal_of(&e)),
        }
    }
    Ok(())
}

/// How long past its deadline a transfer may still take what already
/// arrived.
const LAST_MOMENT: Duration = Duration::from_millis(10);

/// Whether `stream` has bytes to read now, without waiting; `Closed`
/// where its peer closed it.
pub(super) fn readable(stream: &TcpStream) -> Result<bool, ConnectionRefusal> {
    stream
        .set_nonblocking(true)
        .map_err(|_| ConnectionRefusal::Closed)?;
    let peeked = stream.peek(&mut [0u8; 1]);
    let _ = stream.set_nonblocking(false);
    match peeked {
        Ok(0) => Err(ConnectionRefusal::Closed),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(refusal_of(&e)),
    }
}

/// Why a read or write on a connection failed: a peer gone (closed,
/// reset) is told apart from one that went silent (timed out).
pub(super) fn refusal_of(error: &std::io::Error) -> ConnectionRefusal {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => ConnectionRefusal::Stalled,
        _ => ConnectionRefusal::Closed,
    }
}

/// Reads one frame of kind `expected` and at most `max` bytes, all of it by
/// `deadline` and at [`PACE`] (a peer that sends a byte now and then gets
/// no longer). A length past `max` is refused before anything is
/// allocated; the body's address space is reserved at once (refused, not
/// aborted, where there is none) and its pages filled only as bytes arrive.
pub(super) fn read_frame(
    stream: &mut TcpStream,
    expected: u8,
    max: u64,
    deadline: Instant,
) -> Result<Vec<u8>, ConnectionRefusal> {
    let (_, len) = read_head(stream, Some(expected), max, deadline)?;
    read_body(stream, len, deadline, PACE, None)
}

/// A frame of any kind: its kind and body, read as [`read_frame`] reads.
pub(super) fn read_any_frame(
    stream: &mut TcpStream,
    max: u64,
    deadline: Instant,
) -> Result<(u8, Vec<u8>), ConnectionRefusal> {
    let (kind, len) = read_head(stream, None, max, deadline)?;
    Ok((kind, read_body(stream, len, deadline, PACE, None)?))
}

/// [`read_frame`] of a frame its peer sends at once (a payload, a digest):
/// its head is due within [`PACE`]'s grace; the frame's whole length (at
/// most the whole budget) is taken from `budget` before its body is read,
/// and stays held until the [`Held`] returned is dropped.
pub(super) fn read_frame_within<'b>(
    stream: &mut TcpStream,
    expected: u8,
    max: u64,
    deadline: Instant,
    budget: &'b FrameBudget,
) -> Result<(Vec<u8>, Held<'b>), ConnectionRefusal> {
    let head_due = Instant::now() + PACE.grace;
    let (_, len) = read_head(stream, Some(expected), max, deadline.min(head_due))
        .map_err(|why| PACE.named(why, head_due <= deadline))?;
    let held = budget.take(len.min(FRAMES_IN_FLIGHT_BYTES), stream, deadline)?;
    // The pace counts from the budget's grant: waiting for room is rank 0's.
    match read_body(stream, len, deadline, PACE, Some(&held)) {
        Ok(body) => {
            // Whole: no longer one to cut off, however long it is decoded.
            held.whole();
            Ok((body, held))
        }
        Err(_) if held.was_cut() => Err(ConnectionRefusal::TooSlow {
            bytes_per_s: MAKE_ROOM_BYTES_PER_S,
        }),
        Err(why) => Err(why),
    }
}

/// A frame's kind (the `expected` one, where one is) and length, at most
/// `max`, by `deadline`.
fn read_head(
    stream: &mut TcpStream,
    expected: Option<u8>,
    max: u64,
    deadline: Instant,
) -> Result<(u8, u64), ConnectionRefusal> {
    let mut head = [0u8; 9];
    read_exact_by(stream, &mut head, deadline)?;
    if expected.is_some_and(|kind| kind != head[0]) {
        return Err(ConnectionRefusal::Malformed("an unexpected message"));
    }
    let len = u64::from_le_bytes(head[1..].try_into().expect("8 bytes"));
    if len > max {
        return Err(ConnectionRefusal::FrameTooLarge {
            bytes: len,
            limit: max,
        });
    }
    Ok((head[0], len))
}

/// A frame's body of `len` bytes, by `deadline` and at `pace`, telling
/// `held` (where it holds part of a budget) how far it got.
fn read_body(
    stream: &mut TcpStream,
    len: u64,
    deadline: Instant,
    pace: Pace,
    held: Option<&Held<'_>>,
) -> Result<Vec<u8>, ConnectionRefusal> {
    let started = Instant::now();
    let mut body = Vec::new();
    body.try_reserve_exact(usize::try_from(len).unwrap_or(usize::MAX))
        .map_err(|_| ConnectionRefusal::Malformed("a frame larger than rank 0 can hold"))?;
    while (body.len() as u64) < len {
        let start = body.len();
        let chunk = (len - start as u64).min(64 << 10) as usize;
        body.resize(start + chunk, 0);
        let due = started + pace.due(body.len() as u64);
        read_exact_by(stream, &mut body[start..], deadline.min(due))
            .map_err(|why| pace.named(why, due <= deadline))?;
        if let Some(held) = held {
            held.received(body.len() as u64);
        }
    }
    Ok(body)
}

/// The least pace of a frame a peer sends: its `n`-th byte is due `grace`
/// plus `n / bytes_per_s` after it began. A peer that holds a connection's
/// place by dripping bytes loses it within the grace, whatever the frame's
/// length and the gather's deadline.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    pub(super) grace: Duration,
    pub(super) bytes_per_s: u64,
}

/// The pace of every frame rank 0 and the node leaders read: 1 s of grace
/// (a rank writes its frame at once, and what arrived while rank 0's
/// thread did not run still counts), then 1 MiB/s.
pub(super) const PACE: Pace = Pace {
    grace: Duration::from_secs(1),
    bytes_per_s: 1 << 20,
};

impl Pace {
    /// How long after its start a frame's first `bytes` are due.
    fn due(self, bytes: u64) -> Duration {
        self.grace + Duration::from_secs_f64(bytes as f64 / self.bytes_per_s.max(1) as f64)
    }

    /// `why` a read failed, named [`ConnectionRefusal::TooSlow`] where it
    /// ran out of the pace's time (not the deadline's).
    fn named(self, why: ConnectionRefusal, pace_first: bool) -> ConnectionRefusal {
        match why {
            ConnectionRefusal::Stalled if pace_first => ConnectionRefusal::TooSlow {
                bytes_per_s: self.bytes_per_s,
            },
            why => why,
        }
    }
}

/// Fills `buf` from `stream` by `deadline`, with no pause longer than
/// [`IDLE_TIMEOUT`] between bytes.
fn read_exact_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<(), ConnectionRefusal> {
    let len = buf.len();
    transfer_by(len, deadline, |done, left| {
        stream.set_read_timeout(Some(left.min(IDLE_TIMEOUT)))?;
        stream.read(&mut buf[done..])
    })
}

/// The longest a peer may go without sending a byte of a frame it began:
/// a stalled frame gives back its share of the frame budget then, not at
/// the gather's deadline.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of payload frames rank 0 holds at once, across all its
/// connections (each frame is within `max_frame_bytes` too): a frame takes
/// its whole length from the budget (all of it, for a frame larger than
/// the budget) before its body is read, waiting for room, so that many
/// peers sending large frames at once cannot take rank 0's memory, and no
/// two frames each hold part of the budget while waiting for the rest.
pub(super) const FRAMES_IN_FLIGHT_BYTES: u64 = 512 << 20;

/// How long a frame waits for room before the slowest frame holding the
/// budget below [`MAKE_ROOM_BYTES_PER_S`] is cut off to make it: a peer
/// that drips a large frame at the least pace cannot keep the budget (and
/// every other rank's payload) for longer.
const MAKE_ROOM_AFTER: Duration = Duration::from_secs(1);
/// The pace below which a frame holding the budget is cut off when
/// another waits for room (it may try again).
const MAKE_ROOM_BYTES_PER_S: u64 = 16 << 20;

/// The frames holding the budget now, against [`FRAMES_IN_FLIGHT_BYTES`].
#[derive(Default)]
pub(super) struct FrameBudget {
    holders: Mutex<Holders>,
    freed: Condvar,
}

/// The bytes held, and each frame holding them.
#[derive(Default)]
struct Holders {
    bytes: u64,
    frames: Vec<Holder>,
}

/// A frame holding part of the budget: its bytes, since when, how many
/// arrived (its [`Progress`], which its [`Held`] shares), and its
/// connection (to cut off to make room).
struct Holder {
    bytes: u64,
    since: Instant,
    progress: Arc<Progress>,
    stream: TcpStream,
}

/// How far a frame holding the budget got, whether all of it arrived, and
/// whether it was cut off to make room.
#[derive(Default)]
struct Progress {
    received: AtomicU64,
    arrived: AtomicBool,
    cut: AtomicBool,
}

impl FrameBudget {
    /// Takes `bytes` for the frame on `stream` once they fit (or nothing
    /// else is held), by `deadline`, cutting off the slowest holder after
    /// [`MAKE_ROOM_AFTER`] of waiting; they are given back when the
    /// [`Held`] is dropped.
    fn take(
        &self,
        bytes: u64,
        stream: &TcpStream,
        deadline: Instant,
    ) -> Result<Held<'_>, ConnectionRefusal> {
        let started = Instant::now();
        let mut holders = lock(&self.holders);
        while holders.bytes > 0 && holders.bytes + bytes > FRAMES_IN_FLIGHT_BYTES {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnectionRefusal::Stalled);
            }
            if started.elapsed() >= MAKE_ROOM_AFTER {
                holders.cut_slowest();
            }
            let wait = left.min(Duration::from_millis(100));
            holders = self
                .freed
                .wait_timeout(holders, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let handle = stream
            .try_clone()
            .map_err(|_| ConnectionRefusal::NoResources)?;
        let progress = Arc::new(Progress::default());
        holders.bytes += bytes;
        holders.frames.push(Holder {
            bytes,
            since: Instant::now(),
            progress: Arc::clone(&progress),
            stream: handle,
        });
        Ok(Held {
            budget: self,
            progress,
        })
    }
}

impl Holders {
    /// Cuts off the slowest frame still arriving, past its grace, below
    /// [`MAKE_ROOM_BYTES_PER_S`], if one is; one at a time (the next only
    /// once the last cut has left), however many wait.
    fn cut_slowest(&mut self) {
        let cut = |frame: &Holder| frame.progress.cut.load(Ordering::Relaxed);
        if self.frames.iter().any(cut) {
            return;
        }
        let rate = |frame: &Holder| {
            let seconds = frame.since.elapsed().as_secs_f64().max(1e-3);
            frame.progress.received.load(Ordering::Relaxed) as f64 / seconds
        };
        let slowest = self
            .frames
            .iter()
            .filter(|f| !f.progress.arrived.load(Ordering::Relaxed))
            .filter(|f| f.since.elapsed() >= PACE.grace)
            .filter(|f| rate(f) < MAKE_ROOM_BYTES_PER_S as f64)
            .min_by(|a, b| rate(a).total_cmp(&rate(b)));
        if let Some(frame) = slowest {
            frame.progress.cut.store(true, Ordering::Relaxed);
            let _ = frame.stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// A frame's part of a [`FrameBudget`]; given back on drop.
pub(super) struct Held<'a> {
    budget: &'a FrameBudget,
    progress: Arc<Progress>,
}

impl Held<'_> {
    /// The frame's bytes that arrived so far.
    fn received(&self, bytes: u64) {
        self.progress.received.store(bytes, Ordering::Relaxed);
    }

    /// All of the frame arrived.
    fn whole(&self) {
        self.progress.arrived.store(true, Ordering::Relaxed);
    }

    /// Whether the frame was cut off to make room.
    fn was_cut(&self) -> bool {
        self.progress.cut.load(Ordering::Relaxed)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut holders = lock(&self.budget.holders);
        let mine = |f: &Holder| Arc::ptr_eq(&f.progress, &self.progress);
        if let Some(at) = holders.frames.iter().position(mine) {
            let frame = holders.frames.swap_remove(at);
            holders.bytes -= frame.bytes;
        }
        drop(holders);
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_greeting_proves_the_token_for_its_challenge_rank_purpose_and_nonce() {
        let (token, challenge) = (b"token".as_slice(), [1u8; 32]);
        let bytes = Hello::write(token, &challenge, 3, purpose::PAYLOAD, &[7; 16]);
        let hello = Hello::read(&bytes).unwrap();
        assert_eq!(
            (hello.rank, hello.what, hello.nonce),
            (3, purpose::PAYLOAD, &[7u8; 16][..])
        );
        assert!(hello.proves(token, &challenge));
        assert!(!hello.proves(b"other", &challenge));
        assert!(!hello.proves(token, &[2; 32]));
        // A byte of its rank, its purpose or its nonce changed.
        for at in [0, 4, 5] {
            let mut forged = bytes.clone();
            forged[at] ^= 1;
            let forged = Hello::read(&forged).unwrap();
            assert!(!forged.proves(token, &challenge), "byte {at}");
        }
        assert!(Hello::read(&bytes[1..]).is_err());
    }

    #[test]
    fn a_reply_is_rank_zeros_only_under_its_seal() {
        let reply = sealed(b"token", &[1; 32], &[2; 16], kind::RUN, b"run-7");
        assert_eq!(
            unsealed(b"token", &[1; 32], &[2; 16], kind::RUN, &reply).as_deref(),
            Some(&b"run-7"[..])
        );
        assert!(unsealed(b"guess", &[1; 32], &[2; 16], kind::RUN, &reply).is_none());
        assert!(
            unsealed(b"token", &[1; 32], &[3; 16], kind::RUN, &reply).is_none(),
            "no replay"
        );
        assert!(unsealed(b"token", &[1; 32], &[2; 16], kind::OFFSET, &reply).is_none());
        assert!(unsealed(b"token", &[1; 32], &[2; 16], kind::RUN, b"short").is_none());
    }

    /// A peer that closed or reset the connection is told apart from one
    /// that went silent.
    #[test]
    fn a_closed_connection_is_not_a_silent_one() {
        use std::io::{Error, ErrorKind};
        for kind in [ErrorKind::WouldBlock, ErrorKind::TimedOut] {
            assert_eq!(refusal_of(&Error::from(kind)), ConnectionRefusal::Stalled);
        }
        for kind in [
            ErrorKind::ConnectionReset,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
        ] {
            assert_eq!(refusal_of(&Error::from(kind)), ConnectionRefusal::Closed);
        }
    }

    /// A frame dripped slower than the pace is cut off as too slow, long
    /// before its deadline and before its last byte; the same frame sent
    /// at once is read whole at the same pace.
    #[test]
    fn a_frame_dripped_below_the_pace_is_cut_off() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let pace = Pace {
            grace: Duration::from_millis(300),
            bytes_per_s: 100,
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let sent = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&sent);
        let writer = std::thread::spawn(move || {
            let mut peer = TcpStream::connect(address).unwrap();
            peer.write_all(&[7; 100]).unwrap(); // at once
            for _ in 0..100 {
                if peer.write_all(&[7]).is_err() {
                    break;
                }
                counted.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        let (mut stream, _) = listener.accept().unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        assert_eq!(
            read_body(&mut stream, 100, deadline, pace, None).unwrap(),
            [7; 100]
        );
        let dripped = read_body(&mut stream, 100, deadline, pace, None);
        assert_eq!(
            dripped,
            Err(ConnectionRefusal::TooSlow { bytes_per_s: 100 })
        );
        assert!(sent.load(Ordering::SeqCst) < 100);
        drop(stream);
        writer.join().unwrap();
    }
}
