//! Window control over rank 0's listener, for a machine that can reach rank
//! 0 but not its session directory: rank 0's side of `rankscope trigger
//! ENDPOINT` and `rankscope top ENDPOINT` (the command's side is
//! `remote.rs`, built for the command alone: feature `remote-client`).
//!
//! A controller greets rank 0 as the ranks do, under the rank
//! [`CONTROLLER`]: it proves that it knows the job token for the
//! connection's fresh challenge, so a recorded connection cannot be played
//! again, and rank 0 seals every answer. Rank 0 (`Desk`) hands a window
//! request (or a cancel) to its windows thread's inbox
//! ([`crate::WindowControl`]) and answers with the plan (and, asked to
//! wait, once the window's report is written), as the thread answers it;
//! or it reads the statuses the ranks share and sends them. It serves
//! `AT_ONCE` (4) controllers at once and refuses a request whose nonce it saw before; each refusal is
//! counted among the session's refused connections.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rankscope_common::gather::ConnectionRefusal;
use rankscope_common::remote::{
    RemoteTrigger, StatusSnapshot, TriggerAnswer, MAX_PLAN_WAIT_MS, MAX_REPORT_WAIT_MS,
};
use rankscope_common::window::{self, Trigger, FRESH_STATUS};

use super::places::Places;
use super::wire::{kind, purpose, read_frame, readable, unsealed, write_frame, MAX_CONTROL_BYTES};
use super::HANDSHAKE_TIMEOUT;
use crate::control::{Asking, WindowAnswer};
use crate::sync::lock;
use crate::WindowControl;

/// The rank a controller greets rank 0 as: no rank of any world.
pub(super) const CONTROLLER: u32 = u32::MAX;
/// Controllers rank 0 serves at once; more are refused (and counted).
pub(super) const AT_ONCE: usize = 4;
/// Request nonces rank 0 remembers, to refuse a replay.
const NONCES_KEPT: usize = 1024;
/// While rank 0 waits for a plan or a report, it tells the controller so
/// this often (a peer silent for 10 s is taken for gone).
const KEEP_ALIVE: Duration = Duration::from_secs(3);
/// How long writing a snapshot may take.
pub(super) const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a wait for the windows thread looks whether the controller
/// left.
const LOOK: Duration = Duration::from_millis(100);
/// How much longer rank 0 waits where its windows thread took the request
/// just as the wait for it ended: its answer is on the way.
const TAKEN_GRACE: Duration = Duration::from_secs(5);

/// Rank 0's windows, as its listener serves them.
#[derive(Debug, Clone)]
pub(super) struct ServedControl {
    /// Rank 0's session directory: the ranks' statuses are read there,
    /// their window payloads written there.
    pub(super) session_dir: std::path::PathBuf,
    /// Rank 0's windows thread.
    pub(super) windows: WindowControl,
}

/// Rank 0's side: answers the controllers of its session.
pub(super) struct Desk {
    control: ServedControl,
    world_size: u32,
    /// The job token: a request is sealed with it.
    token: Vec<u8>,
    /// Controllers served now.
    serving: Places,
    nonces: Mutex<VecDeque<String>>,
}

impl Desk {
    /// The desk of the session `control` serves, of `world_size` ranks,
    /// whose job token is `token`.
    pub(super) fn new(control: ServedControl, world_size: u32, token: Vec<u8>) -> Self {
        Desk {
            control,
            world_size,
            token,
            serving: Places::new(AT_ONCE),
            nonces: Mutex::default(),
        }
    }

    /// Serves an authenticated controller that came for `what` on the
    /// connection of `challenge` and the controller's `nonce`; `reply`
    /// seals an answer; `stop` says the session's gather ended.
    pub(super) fn serve(
        &self,
        stream: &mut TcpStream,
        (what, challenge, nonce): (u8, &[u8], &[u8]),
        reply: &dyn Fn(u8, &[u8]) -> Vec<u8>,
        stop: &AtomicBool,
    ) -> Result<(), ConnectionRefusal> {
        let Some(_serving) = self.serving.take(false) else {
            return Err(ConnectionRefusal::Busy);
        };
        match what {
            purpose::TRIGGER => self.trigger(stream, (challenge, nonce), reply, stop),
            _ => self.statuses(stream, reply),
        }
    }

    /// Reads a window request, has it planned, answers with the plan and,
    /// where asked, once the report is written; while it waits, it tells
    /// the controller so every few seconds, and it stops waiting where the
    /// controller left (its place is free then) or the session ends.
    fn trigger(
        &self,
        stream: &mut TcpStream,
        (challenge, nonce): (&[u8], &[u8]),
        reply: &dyn Fn(u8, &[u8]) -> Vec<u8>,
        stop: &AtomicBool,
    ) -> Result<(), ConnectionRefusal> {
        let handshake = Instant::now() + HANDSHAKE_TIMEOUT;
        let frame = read_frame(stream, kind::REQUEST, MAX_CONTROL_BYTES, handshake)?;
        // Sealed as rank 0's answers are: the request is the greeter's.
        let body = unsealed(&self.token, challenge, nonce, kind::REQUEST, &frame)
            .ok_or(ConnectionRefusal::BadToken)?;
        let mut tell = Telling {
            stream,
            reply,
            stop,
            told: Instant::now(),
        };
        let asked = match serde_json::from_slice::<RemoteTrigger>(&body) {
            Ok(asked) => asked,
            Err(e) => {
                let reason = format!("the request does not parse: {e}");
                tell.send(&TriggerAnswer::Refused { reason })?;
                return Err(ConnectionRefusal::Malformed(
                    "a window request that does not parse",
                ));
            }
        };
        // What it asks is the windows thread's to judge, as every
        // request's (`Request::problem`). Whatever it claims, it came from
        // a command.
        let mut request = asked.request;
        request.trigger = Trigger::Command;
        if !self.first_use(&request.nonce) {
            let reason = ConnectionRefusal::Replayed.to_string();
            tell.send(&TriggerAnswer::Refused { reason })?;
            return Err(ConnectionRefusal::Replayed);
        }
        let plan_wait = asked.plan_wait_ms.clamp(1_000, MAX_PLAN_WAIT_MS);
        let asking = match self.control.windows.ask(request) {
            Ok(asking) => asking,
            Err(reason) => return tell.send(&TriggerAnswer::Refused { reason }),
        };
        let planned = self.first_answer(&asking, Duration::from_millis(plan_wait), &mut tell);
        tell.send(&planned)?;
        if !matches!(planned, TriggerAnswer::Planned { .. }) || asked.report_wait_ms == 0 {
            return Ok(());
        }
        let wait = Duration::from_millis(asked.report_wait_ms.min(MAX_REPORT_WAIT_MS));
        let answer = match tell.wait(&asking, Instant::now() + wait) {
            Waited::Answer(WindowAnswer::Reported(report_dir)) => {
                TriggerAnswer::Written { report_dir }
            }
            Waited::Answer(WindowAnswer::Unreported(reason)) => TriggerAnswer::Refused { reason },
            Waited::Answer(_) => TriggerAnswer::Refused {
                reason: "rank 0's windows thread answered out of turn".into(),
            },
            Waited::Ended => TriggerAnswer::Refused {
                reason: "the session ended before the window's report was written".into(),
            },
            Waited::Left => return Ok(()),
            Waited::TimeUp => TriggerAnswer::Refused {
                reason: format!(
                    "no report after {:.1} s: the window may not have closed yet (its steps \
                     have not all passed)",
                    wait.as_secs_f64()
                ),
            },
        };
        tell.send(&answer)
    }

    /// Whether no request with `nonce` came before (it is remembered now).
    fn first_use(&self, nonce: &str) -> bool {
        let mut seen = lock(&self.nonces);
        if seen.iter().any(|n| n == nonce) {
            return false;
        }
        if seen.len() >= NONCES_KEPT {
            seen.pop_front();
        }
        seen.push_back(nonce.to_string());
        true
    }

    /// The windows thread's first answer to the request `asking` waits
    /// for, within `wait`; a request it did not take by then (or whose
    /// controller left) is taken back.
    fn first_answer(
        &self,
        asking: &Asking,
        wait: Duration,
        tell: &mut Telling<'_>,
    ) -> TriggerAnswer {
        let refused = |reason: String| TriggerAnswer::Refused { reason };
        let mut waited = tell.wait(asking, Instant::now() + wait);
        if matches!(waited, Waited::TimeUp) && !asking.withdraw() {
            waited = tell.wait(asking, Instant::now() + TAKEN_GRACE);
        }
        let dir = &self.control.session_dir;
        match waited {
            Waited::Answer(WindowAnswer::Planned(plan)) => TriggerAnswer::Planned {
                report_dir: window::window_dir(dir, plan.index),
                plan,
            },
            Waited::Answer(WindowAnswer::Cancelled(plan)) => TriggerAnswer::Cancelled {
                report_dir: window::window_dir(dir, plan.index),
                plan,
            },
            Waited::Answer(WindowAnswer::Refused(reason)) => refused(reason),
            Waited::Answer(_) => refused("rank 0's windows thread answered out of turn".into()),
            Waited::Ended => refused("the session ended before the window was planned".into()),
            Waited::Left => {
                asking.withdraw();
                refused("the controller left".into())
            }
            Waited::TimeUp => refused(format!(
                "no plan within {:.1} s: do the ranks call Profiler::step (prof.step() in \
                 Python)?",
                wait.as_secs_f64()
            )),
        }
    }

    /// Sends every rank's fresh status (asking the ranks to share theirs
    /// from now on, for the next look).
    fn statuses(
        &self,
        stream: &mut TcpStream,
        reply: &dyn Fn(u8, &[u8]) -> Vec<u8>,
    ) -> Result<(), ConnectionRefusal> {
        let dir = &self.control.session_dir;
        let _ = window::watch(dir);
        let statuses = match window::read_status(dir, 0) {
            Ok(own) => {
                window::read_statuses(dir, 0..self.world_size, own.run.as_deref(), FRESH_STATUS)
            }
            Err(_) => Vec::new(),
        };
        let snapshot = StatusSnapshot {
            session_dir: dir.clone(),
            world_size: self.world_size,
            statuses,
        };
        let body = serde_json::to_vec(&snapshot).expect("statuses serialise");
        let until = Instant::now() + SNAPSHOT_TIMEOUT;
        write_frame(stream, kind::STATUSES, &reply(kind::STATUSES, &body), until)
    }
}

/// A controller's connection while rank 0 answers it: it sends answers,
/// and while rank 0 waits, tells the controller so every [`KEEP_ALIVE`].
struct Telling<'a> {
    stream: &'a mut TcpStream,
    reply: &'a dyn Fn(u8, &[u8]) -> Vec<u8>,
    stop: &'a AtomicBool,
    /// When the controller was last sent something.
    told: Instant,
}

/// How a wait for the windows thread ended.
enum Waited {
    /// It answered.
    Answer(WindowAnswer),
    /// The wait's time is over.
    TimeUp,
    /// The controller left.
    Left,
    /// The windows thread is gone (the session ended), or the session's
    /// gather ended.
    Ended,
}

impl Telling<'_> {
    /// Waits for the next answer `asking` gets, until `deadline` or the
    /// controller left, telling it meanwhile that rank 0 still waits.
    fn wait(&mut self, asking: &Asking, deadline: Instant) -> Waited {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match asking.answers.recv_timeout(left.min(LOOK)) {
                Ok(answer) => return Waited::Answer(answer),
                Err(RecvTimeoutError::Disconnected) => return Waited::Ended,
                Err(RecvTimeoutError::Timeout) => {}
            }
            if self.stop.load(Ordering::SeqCst) {
                return Waited::Ended;
            }
            if self.over() {
                return Waited::Left;
            }
            if left.is_zero() {
                return Waited::TimeUp;
            }
        }
    }

    /// Sends `answer`, sealed.
    fn send(&mut self, answer: &TriggerAnswer) -> Result<(), ConnectionRefusal> {
        let body = serde_json::to_vec(answer).expect("an answer serialises");
        let until = Instant::now() + HANDSHAKE_TIMEOUT;
        let sealed = (self.reply)(kind::ANSWER, &body);
        self.told = Instant::now();
        write_frame(self.stream, kind::ANSWER, &sealed, until)
    }

    /// Whether the wait is over: the session's gather ended, or the
    /// controller left (it sends nothing while it waits: anything
    /// readable is its end, or not the protocol); tells it that rank 0
    /// still waits where it is time to.
    fn over(&mut self) -> bool {
        if self.stop.load(Ordering::SeqCst) || readable(self.stream) != Ok(false) {
            return true;
        }
        if self.told.elapsed() >= KEEP_ALIVE {
            return self.send(&TriggerAnswer::Waiting).is_err();
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::remote::{Remote, RemoteError, TriggerCall};
    use super::super::test_support::{rank_0, TOKEN};
    use super::*;
    use crate::control::{Asked, Inbox};
    use rankscope_common::window::{Plan, Request};

    fn asked(n: u32) -> RemoteTrigger {
        RemoteTrigger {
            request: Request::command(format!("{n:032x}"), 1),
            plan_wait_ms: 60_000,
            report_wait_ms: 0,
        }
    }

    /// Takes `n` requests from `inbox` (each handed over once its
    /// controller is served), as a windows thread that answers none.
    fn take_requests(inbox: &Inbox, n: usize) -> Vec<Asked> {
        let started = Instant::now();
        let mut taken = Vec::new();
        while taken.len() < n {
            assert!(started.elapsed() < Duration::from_secs(10), "{n} requests");
            match inbox.next() {
                Some(asked) => taken.push(asked),
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        taken
    }

    /// The windows thread here takes requests but answers none: each
    /// controller waits for a plan. Past [`AT_ONCE`] of them one more is
    /// turned away; a controller without the token gets nothing; a
    /// controller that leaves frees its place at once.
    #[test]
    fn controllers_past_the_limit_or_without_the_token_are_turned_away() {
        let dir = tempfile::tempdir().unwrap();
        let rank_0 = rank_0(dir.path());
        let remote = Remote::new(&rank_0.endpoint, TOKEN);
        let waiting: Vec<TriggerCall<'_>> = (0..AT_ONCE as u32)
            .map(|n| remote.trigger(&asked(n)).unwrap())
            .collect();
        let _unanswered = take_requests(&rank_0.inbox, AT_ONCE);
        // Turned away as it greets, or as it sends its request.
        let turned_away = remote
            .trigger(&asked(99))
            .and_then(|mut call| call.answer(Duration::ZERO));
        assert!(
            matches!(&turned_away, Err(RemoteError::Refused { why, .. }) if why.contains("too many")),
            "{turned_away:?}"
        );
        let stranger = Remote::new(&rank_0.endpoint, b"another token").statuses();
        assert!(
            matches!(&stranger, Err(RemoteError::Refused { why, .. }) if why.contains("token")),
            "{stranger:?}"
        );
        assert!(rank_0.inbox.next().is_none(), "no request got in");

        drop(waiting);
        // Room again, long before the plans' wait would have ended.
        let started = Instant::now();
        let snapshot = loop {
            match remote.statuses() {
                Ok(snapshot) => break snapshot,
                Err(e) => assert!(started.elapsed() < Duration::from_secs(30), "{e}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!((snapshot.world_size, snapshot.statuses.len()), (2, 0));
    }

    /// Rank 0 waits as long as the controller asked: for a plan nobody
    /// makes, that long, then takes the request back; for a report longer
    /// than a peer may stay silent, telling the controller it still waits.
    #[test]
    fn rank_0_waits_as_asked_and_says_it_still_waits() {
        let dir = tempfile::tempdir().unwrap();
        let rank_0 = rank_0(dir.path());
        let remote = Remote::new(&rank_0.endpoint, TOKEN);
        let unplanned = RemoteTrigger {
            plan_wait_ms: 1_000,
            ..asked(1)
        };
        let answer = remote
            .trigger(&unplanned)
            .unwrap()
            .answer(Duration::from_secs(30));
        assert!(
            matches!(&answer, Ok(TriggerAnswer::Refused { reason }) if reason.contains("no plan within 1.0 s")),
            "{answer:?}"
        );
        assert!(rank_0.inbox.next().is_none(), "taken back");

        // This test plans the window, as the windows thread would, and
        // says its report is written 11 s later.
        let waited = RemoteTrigger {
            report_wait_ms: 60_000,
            ..asked(2)
        };
        let mut call = remote.trigger(&waited).unwrap();
        let [asked] = take_requests(&rank_0.inbox, 1).try_into().ok().unwrap();
        assert_eq!(asked.request.trigger, Trigger::Command);
        let plan = Plan {
            index: 1,
            first_step: 5,
            steps: 1,
            trigger: Trigger::Command,
            nonce: asked.request.nonce.clone(),
            torch: false,
            python: false,
            run: Some("r".into()),
            cancelled: None,
        };
        asked.answers.send(WindowAnswer::Planned(plan)).unwrap();
        let planned = call.answer(Duration::from_secs(30)).unwrap();
        let TriggerAnswer::Planned { report_dir, .. } = planned else {
            panic!("{planned:?}");
        };
        assert_eq!(report_dir, window::window_dir(dir.path(), 1));
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(11));
            let _ = asked.answers.send(WindowAnswer::Reported(report_dir));
        });
        let written = call.answer(Duration::from_secs(60));
        writer.join().unwrap();
        assert!(
            matches!(written, Ok(TriggerAnswer::Written { .. })),
            "{written:?}"
        );
    }
}
