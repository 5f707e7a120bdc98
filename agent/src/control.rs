//! The windows thread's control plane within the process
//! ([`WindowControl`]), so that nothing in the process writes a file to
//! reach its own windows thread or polls a file for its answer:
//!
//! - rank 0: window requests from the parts of the process that take them
//!   (its TCP desk), each with a channel its answers come back on; which
//!   windows it planned ([`WindowControl::takes_payload_of`]: a window
//!   payload a rank sends is taken only for one of them); and the plans
//!   it made or rewrote lately, which its mirrors wait on and send to the
//!   ranks apart from its folder ([`WindowControl::plans_since`]);
//! - the other ranks: the plans rank 0 sent over the mirror, and its word
//!   that `rankscope top` watches, for the windows thread to follow; a
//!   node leader's are on its board too, for the mirrors of its node's
//!   ranks, whose statuses it relays to rank 0
//!   ([`WindowControl::relay_status`]).
//!
//! `rankscope trigger --dir`, a process with no connection, still writes a
//! request file, and rank 0's plans are still files for the ranks that
//! share its folder; the windows thread reads those itself.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;

use rankscope_common::window::{LiveStatus, Plan, Request};

/// Requests that wait for the windows thread at most; more are refused.
const WAITING: usize = 16;
/// How far ahead of rank 0's newest rolling window another rank's may be
/// and still be taken (rank 0 may be the slow one).
const ROLLING_AHEAD: u32 = 8;
/// How many windows back a payload is still taken: a window's gather
/// waits for its payloads while the next ones open.
const WINDOWS_BACK: u32 = 16;
/// Plans kept (rank 0's lately made, or a rank's delivered): a rank whose
/// mirror was down longer misses some, and goes on from the next it gets.
const PLANS_KEPT: usize = 64;
/// Statuses a node leader keeps to relay, one per rank of its node.
const RELAYED_KEPT: usize = 4096;

/// What the windows thread answers a request asked through the inbox, in
/// order: the plan (or the refusal), then, for a window, whether its
/// report was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WindowAnswer {
    /// The window planned.
    Planned(Plan),
    /// The planned or open window ended early, as its plan now says.
    Cancelled(Plan),
    /// No window (or no cancel): why.
    Refused(String),
    /// The window's report is written in this folder.
    Reported(PathBuf),
    /// The window ended without a report: why.
    Unreported(String),
}

/// A request in the inbox, and where its answers go.
pub(crate) struct Asked {
    pub(crate) request: Request,
    pub(crate) answers: Sender<WindowAnswer>,
    claim: Arc<AtomicU8>,
}

/// A request handed to the inbox, from the asker's side: its answers, and
/// the claim that lets it take the request back while it waits.
#[derive(Debug)]
pub(crate) struct Asking {
    pub(crate) answers: Receiver<WindowAnswer>,
    claim: Arc<AtomicU8>,
}

/// [`Asked::claim`]'s states: the request waits, the windows thread took
/// it, or its asker took it back.
mod claim {
    pub(super) const WAITING: u8 = 0;
    pub(super) const TAKEN: u8 = 1;
    pub(super) const WITHDRAWN: u8 = 2;
}

impl Asking {
    /// Takes the request back, unless the windows thread took it first
    /// (`false`: its first answer is on the way): a request its asker gave
    /// up on never opens a window later, unasked.
    pub(crate) fn withdraw(&self) -> bool {
        self.claim
            .compare_exchange(
                claim::WAITING,
                claim::WITHDRAWN,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// A handle on rank 0's windows thread through which the transports hand
/// it window requests and learn which windows it planned. Cloned freely.
#[derive(Clone)]
pub struct WindowControl {
    sender: SyncSender<Asked>,
    shared: Arc<Shared>,
}

/// What the control plane needs of a session's steps.
pub(crate) trait Stepping: Send + Sync {
    /// Wakes the windows thread: something waits for it.
    fn wake(&self);
    /// Steps ended since the session started.
    fn count(&self) -> u64;
}

/// No steps, none woken: the control plane of a test with no session.
#[cfg(test)]
impl Stepping for () {
    fn wake(&self) {}
    fn count(&self) -> u64 {
        0
    }
}

/// What the handles and the windows thread share.
struct Shared {
    /// The session's steps: the windows thread is woken through them.
    steps: Arc<dyn Stepping>,
    /// The highest window number rank 0 planned or opened, 0 for none.
    latest: AtomicU32,
    /// `window_every_steps` where windows roll (0: they do not): the ranks
    /// number them by their own steps, and may be ahead of rank 0's
    /// windows thread.
    rolling: AtomicU64,
    /// Rank 0: the latest windows it cancelled before they opened, which
    /// no rank's payload is taken for.
    never_opened: Mutex<VecDeque<u32>>,
    /// The plans rank 0 made or rewrote lately: rank 0's own, or those
    /// another rank was sent (a node leader's mirrors send them on).
    board: Mutex<Board>,
    /// A plan was posted on the board.
    posted: Condvar,
    /// Another rank: the plans rank 0 sent it, the newest of each window.
    delivered: Mutex<BTreeMap<u32, Plan>>,
    /// Another rank: when rank 0 last said that `rankscope top` watches.
    watched: Mutex<Option<Instant>>,
    /// Another rank: its newest status not sent to rank 0 yet.
    status: Mutex<Option<LiveStatus>>,
    /// Another rank: whether rank 0 sees its folder, once its mirror
    /// learned it (`Some(false)`: apart, so its statuses go as messages,
    /// not files).
    folder: Mutex<Option<bool>>,
    /// Another rank: its mirror learned whether rank 0 sees its folder.
    folder_told: Condvar,
    /// A node leader: the newest status of each rank of its node that
    /// its mirror has not relayed to rank 0 yet.
    relayed: Mutex<BTreeMap<u32, LiveStatus>>,
}

/// Rank 0's plans lately made or rewritten, each with the version the
/// board had once it was posted.
#[derive(Default)]
struct Board {
    version: u64,
    plans: VecDeque<(u64, Plan)>,
}

/// The windows thread's end of the inbox.
pub(crate) struct Inbox {
    receiver: Receiver<Asked>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WindowControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowControl")
            .field("latest", &self.shared.latest.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl WindowControl {
    /// A handle and its inbox, for the session whose steps are `steps`.
    pub(crate) fn new(steps: Arc<dyn Stepping>) -> (WindowControl, Inbox) {
        let (sender, receiver) = mpsc::sync_channel(WAITING);
        let shared = Arc::new(Shared {
            steps,
            latest: AtomicU32::new(0),
            rolling: AtomicU64::new(0),
            never_opened: Mutex::default(),
            board: Mutex::default(),
            posted: Condvar::new(),
            delivered: Mutex::default(),
            watched: Mutex::default(),
            status: Mutex::default(),
            folder: Mutex::default(),
            folder_told: Condvar::new(),
            relayed: Mutex::default(),
        });
        let inbox = Inbox {
            receiver,
            shared: Arc::clone(&shared),
        };
        (WindowControl { sender, shared }, inbox)
    }

    /// Hands `request` to the windows thread; its answers come through
    /// what is returned, or why it cannot be asked now.
    pub(crate) fn ask(&self, request: Request) -> Result<Asking, String> {
        let (answers, answered) = mpsc::channel();
        let claim = Arc::new(AtomicU8::new(claim::WAITING));
        let asked = Asked {
            request,
            answers,
            claim: Arc::clone(&claim),
        };
        match self.sender.try_send(asked) {
            Ok(()) => {
                self.shared.steps.wake();
                Ok(Asking {
                    answers: answered,
                    claim,
                })
            }
            Err(TrySendError::Full(_)) => Err(format!(
                "{WAITING} requests already wait for rank 0's windows thread"
            )),
            Err(TrySendError::Disconnected(_)) => {
                Err("the session does not plan windows now (it ended)".into())
            }
        }
    }

    /// Why rank 0 does not take a rank's payload of window `index`, where
    /// it does not: only the windows it planned, none it cancelled before
    /// they opened, and none long closed. Rolling windows are numbered by
    /// steps: up to [`ROLLING_AHEAD`] past rank 0's own count.
    pub(crate) fn takes_payload_of(&self, index: u32) -> Result<(), &'static str> {
        let mut latest = self.shared.latest.load(Ordering::Acquire);
        let period = self.shared.rolling.load(Ordering::Relaxed);
        if let Some(counted) = self.shared.steps.count().checked_div(period) {
            let counted = u32::try_from(counted + 1).unwrap_or(u32::MAX);
            latest = latest.max(counted).saturating_add(ROLLING_AHEAD);
        }
        if index == 0 || index > latest {
            Err("a payload of a window rank 0 did not plan")
        } else if index < latest.saturating_sub(WINDOWS_BACK) {
            Err("a payload of a window long closed")
        } else if lock(&self.shared.never_opened).contains(&index) {
            Err("a payload of a window rank 0 cancelled before it opened")
        } else {
            Ok(())
        }
    }

    /// A mirror served (rank 0's of a rank, or a node leader's of a rank
    /// of its node): the plans posted since version `seen`
    /// (where `seen` is 0, those of window `from` and after, and the one
    /// before it, which may have been rewritten), waiting up to `wait` for
    /// one; and the version to ask from next.
    pub(crate) fn plans_since(&self, seen: u64, from: u32, wait: Duration) -> (u64, Vec<Plan>) {
        let board = lock(&self.shared.board);
        let (board, _) = self
            .shared
            .posted
            .wait_timeout_while(board, wait, |board| board.version <= seen)
            .unwrap_or_else(|e| e.into_inner());
        let plans = board
            .plans
            .iter()
            .filter(|(version, plan)| match seen {
                0 => plan.index >= from.saturating_sub(1),
                _ => *version > seen,
            })
            .map(|(_, plan)| plan.clone())
            .collect();
        (board.version, plans)
    }

    /// Another rank's mirror: hands the windows thread a plan rank 0 sent,
    /// and posts it for the mirrors this rank serves as its node's leader.
    pub(crate) fn deliver(&self, plan: Plan) {
        let mut delivered = lock(&self.shared.delivered);
        delivered.insert(plan.index, plan.clone());
        while delivered.len() > PLANS_KEPT {
            delivered.pop_first();
        }
        drop(delivered);
        self.shared.steps.wake();
        post(&self.shared, &plan);
    }

    /// Another rank's mirror: rank 0 said that `rankscope top` watches.
    pub(crate) fn rank_0_watches(&self) {
        *lock(&self.shared.watched) = Some(Instant::now());
    }

    /// Another rank's mirror: whether rank 0 sees the rank's folder.
    pub(crate) fn set_shared(&self, shared: bool) {
        *lock(&self.shared.folder) = Some(shared);
        self.shared.folder_told.notify_all();
    }

    /// A node leader's mirror desk: whether rank 0 does not see the
    /// leader's folder (its node's statuses are relayed, not written).
    pub(crate) fn apart(&self) -> bool {
        self.shared.apart()
    }

    /// A node leader's mirror desk: whether rank 0 said within `within`
    /// that `rankscope top` watches.
    pub(crate) fn watched_within(&self, within: Duration) -> bool {
        self.shared.watched_within(within)
    }

    /// A node leader's mirror desk: whether rank 0 sees the leader's
    /// folder, waiting up to `wait` for its mirror to learn it; `None`
    /// where it did not.
    pub(crate) fn rank_0_sees_folder(&self, wait: Duration) -> Option<bool> {
        let folder = lock(&self.shared.folder);
        let (folder, _) = self
            .shared
            .folder_told
            .wait_timeout_while(folder, wait, |folder| folder.is_none())
            .unwrap_or_else(|e| e.into_inner());
        *folder
    }

    /// A node leader's mirror desk: the newest status of rank `rank` of
    /// its node, for the leader's mirror to relay to rank 0 (an older one
    /// of the rank not sent yet is replaced).
    pub(crate) fn relay_status(&self, rank: u32, status: LiveStatus) {
        self.shared.keep_relayed(rank, status, true);
    }

    /// A rank's mirror whose connection failed: the statuses it took and
    /// did not send (its own, rank `own`'s, and those it relays), kept for
    /// the next connection unless a newer one of the rank came meanwhile.
    pub(crate) fn keep_unsent(
        &self,
        own: u32,
        unsent: impl IntoIterator<Item = (u32, LiveStatus)>,
    ) {
        for (rank, status) in unsent {
            if rank == own {
                lock(&self.shared.status).get_or_insert(status);
                continue;
            }
            self.shared.keep_relayed(rank, status, false);
        }
    }

    /// A node leader's mirror: the statuses of its node's ranks to relay
    /// now, taken.
    pub(crate) fn take_relayed(&self) -> BTreeMap<u32, LiveStatus> {
        std::mem::take(&mut *lock(&self.shared.relayed))
    }

    /// Another rank's mirror: the rank's newest status since the last
    /// taken, for rank 0.
    pub(crate) fn take_status(&self) -> Option<LiveStatus> {
        lock(&self.shared.status).take()
    }
}

impl Shared {
    fn apart(&self) -> bool {
        *lock(&self.folder) == Some(false)
    }

    fn watched_within(&self, within: Duration) -> bool {
        lock(&self.watched).is_some_and(|at| at.elapsed() < within)
    }

    /// Keeps rank `rank`'s `status` to relay, within [`RELAYED_KEPT`]
    /// ranks: in place of one kept already where it is the `newest`.
    fn keep_relayed(&self, rank: u32, status: LiveStatus, newest: bool) {
        let mut relayed = lock(&self.relayed);
        if relayed.len() >= RELAYED_KEPT && !relayed.contains_key(&rank) {
            return;
        }
        match relayed.entry(rank) {
            Entry::Occupied(mut kept) if newest => {
                kept.insert(status);
            }
            Entry::Occupied(_) => {}
            Entry::Vacant(place) => {
                place.insert(status);
            }
        }
    }
}

/// Posts `plan` on the board, for the mirrors served to send.
fn post(shared: &Shared, plan: &Plan) {
    let mut board = lock(&shared.board);
    board.version += 1;
    let version = board.version;
    board.plans.retain(|(_, kept)| kept.index != plan.index);
    board.plans.push_back((version, plan.clone()));
    if board.plans.len() > PLANS_KEPT {
        board.plans.pop_front();
    }
    drop(board);
    shared.posted.notify_all();
}

impl Inbox {
    /// Rank 0: posts `plan`, made or rewritten, for its mirrors to send.
    pub(crate) fn post(&self, plan: &Plan) {
        post(&self.shared, plan);
    }

    /// Another rank: the plan of window `index` rank 0 sent, if it did.
    pub(crate) fn delivered(&self, index: u32) -> Option<Plan> {
        lock(&self.shared.delivered).get(&index).cloned()
    }

    /// Another rank: the first plan rank 0 sent of window `index` or a
    /// later one, if any.
    pub(crate) fn delivered_from(&self, index: u32) -> Option<Plan> {
        let delivered = lock(&self.shared.delivered);
        delivered
            .range(index..)
            .next()
            .map(|(_, plan)| plan.clone())
    }

    /// Another rank: whether rank 0 does not see its folder (its statuses
    /// go to its mirror, [`Inbox::share_status`]).
    pub(crate) fn apart(&self) -> bool {
        self.shared.apart()
    }

    /// Another rank: hands its mirror the status it shares now (an older
    /// one not sent yet is replaced).
    pub(crate) fn share_status(&self, status: LiveStatus) {
        *lock(&self.shared.status) = Some(status);
    }

    /// Another rank: whether rank 0 said within `within` that `rankscope
    /// top` watches.
    pub(crate) fn watched_within(&self, within: Duration) -> bool {
        self.shared.watched_within(within)
    }

    /// The next request waiting, taken (one its asker took back is
    /// passed over), if any.
    pub(crate) fn next(&self) -> Option<Asked> {
        loop {
            let asked = match self.receiver.try_recv() {
                Ok(asked) => asked,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return None,
            };
            let taken = asked.claim.compare_exchange(
                claim::WAITING,
                claim::TAKEN,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if taken.is_ok() {
                return Some(asked);
            }
        }
    }

    /// Notes that rank 0 planned (or opened) window `index`.
    pub(crate) fn planned(&self, index: u32) {
        self.shared.latest.fetch_max(index, Ordering::AcqRel);
    }

    /// Notes that windows roll every `period` steps (0: they do not).
    pub(crate) fn set_rolling(&self, period: u64) {
        self.shared.rolling.store(period, Ordering::Relaxed);
    }

    /// Rank 0: notes that window `index` was cancelled before it opened.
    pub(crate) fn never_opens(&self, index: u32) {
        let mut never = lock(&self.shared.never_opened);
        never.push_back(index);
        if never.len() > WINDOWS_BACK as usize {
            never.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::window::Trigger;

    /// Steps that count `count` and count their wakes.
    #[derive(Default)]
    struct Counted {
        count: AtomicU64,
        wakes: AtomicU32,
    }

    impl Stepping for Counted {
        fn wake(&self) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
        }
        fn count(&self) -> u64 {
            self.count.load(Ordering::SeqCst)
        }
    }

    fn request(nonce: &str) -> Request {
        Request::command(nonce, 1)
    }

    #[test]
    fn a_request_wakes_the_thread_and_its_answer_comes_back() {
        let steps = Arc::new(Counted::default());
        let (control, inbox) = WindowControl::new(steps.clone());
        let asking = control.ask(request("a")).unwrap();
        assert_eq!(steps.wakes.load(Ordering::SeqCst), 1);
        let asked = inbox.next().expect("the request waits in the inbox");
        assert_eq!(asked.request.nonce, "a");
        asked
            .answers
            .send(WindowAnswer::Refused("busy".into()))
            .unwrap();
        assert_eq!(
            asking.answers.recv().unwrap(),
            WindowAnswer::Refused("busy".into())
        );
        assert!(!asking.withdraw(), "taken: no longer withdrawn");
        assert!(inbox.next().is_none());
    }

    #[test]
    fn a_request_taken_back_is_never_taken() {
        let (control, inbox) = WindowControl::new(Arc::new(Counted::default()));
        let withdrawn = control.ask(request("gave-up")).unwrap();
        let _waiting = control.ask(request("waits")).unwrap();
        assert!(withdrawn.withdraw());
        let next = inbox.next().expect("the second request is taken");
        assert_eq!(next.request.nonce, "waits");
        assert!(inbox.next().is_none());
    }

    #[test]
    fn a_full_inbox_or_a_gone_thread_refuses_with_the_reason() {
        let (control, inbox) = WindowControl::new(Arc::new(Counted::default()));
        for n in 0..WAITING {
            control.ask(request(&format!("r{n}"))).unwrap();
        }
        let full = control.ask(request("one-more")).unwrap_err();
        assert!(full.contains("already wait"), "{full}");
        drop(inbox);
        let gone = control.ask(request("late")).unwrap_err();
        assert!(gone.contains("does not plan windows now"), "{gone}");
    }

    fn plan(index: u32, steps: u64) -> Plan {
        Plan {
            index,
            first_step: 10,
            steps,
            trigger: Trigger::Command,
            nonce: format!("n{index}"),
            torch: false,
            python: false,
            run: None,
            cancelled: None,
        }
    }

    #[test]
    fn mirrors_get_each_plan_posted_once_and_a_rewritten_one_again() {
        let (control, inbox) = WindowControl::new(Arc::new(Counted::default()));
        let quick = Duration::from_millis(1);
        assert_eq!(control.plans_since(0, 1, quick), (0, vec![]));
        inbox.post(&plan(1, 5));
        inbox.post(&plan(2, 5));
        let (seen, plans) = control.plans_since(0, 2, quick);
        assert_eq!(plans, [plan(1, 5), plan(2, 5)], "from 2 and the one before");
        assert_eq!(control.plans_since(seen, 1, quick), (seen, vec![]));
        // A mirror waiting is woken by the next post.
        let waiting = {
            let control = control.clone();
            std::thread::spawn(move || control.plans_since(seen, 1, Duration::from_secs(60)))
        };
        inbox.post(&plan(2, 1));
        let (_, rewritten) = waiting.join().unwrap();
        assert_eq!(rewritten, [plan(2, 1)]);
        for index in 3..100 {
            inbox.post(&plan(index, 5));
        }
        let (_, kept) = control.plans_since(0, 1, quick);
        assert_eq!(kept.len(), PLANS_KEPT, "the board keeps the latest");
    }

    #[test]
    fn a_rank_keeps_the_newest_plan_of_each_window_delivered() {
        let steps = Arc::new(Counted::default());
        let (control, inbox) = WindowControl::new(steps.clone());
        control.deliver(plan(1, 5));
        control.deliver(plan(1, 2));
        assert_eq!(inbox.delivered(1), Some(plan(1, 2)));
        assert_eq!(inbox.delivered(2), None);
        control.deliver(plan(4, 5));
        assert_eq!(inbox.delivered_from(2), Some(plan(4, 5)), "3 never came");
        assert_eq!(steps.wakes.load(Ordering::SeqCst), 3);
        assert!(!inbox.watched_within(Duration::from_secs(5)));
        control.rank_0_watches();
        assert!(inbox.watched_within(Duration::from_secs(5)));
    }

    #[test]
    fn payloads_are_taken_only_for_windows_rank_0_planned() {
        let (control, inbox) = WindowControl::new(Arc::new(Counted::default()));
        assert!(control.takes_payload_of(1).is_err(), "nothing planned yet");
        inbox.planned(3);
        assert!(control.takes_payload_of(3).is_ok());
        assert!(control.takes_payload_of(4).is_err(), "not planned");
        assert!(control.takes_payload_of(0).is_err());
        assert!(control.takes_payload_of(1_000_000_000).is_err());
        inbox.planned(40);
        assert!(control.takes_payload_of(3).is_err(), "long closed");
        assert!(control.takes_payload_of(24).is_ok());
        inbox.never_opens(39);
        assert!(control.takes_payload_of(39).is_err(), "cancelled unopened");
    }

    /// Rolling windows: a rank's may be ahead of rank 0's windows thread
    /// (which may wait for a report) by rank 0's own steps, and some.
    #[test]
    fn rolling_payloads_are_taken_up_to_rank_0_s_count_and_some() {
        let steps = Arc::new(Counted::default());
        let (control, inbox) = WindowControl::new(steps.clone());
        inbox.set_rolling(10);
        inbox.planned(2);
        steps.count.store(95, Ordering::SeqCst);
        // Rank 0 stepped into window 10 while its thread opened window 2.
        assert!(control.takes_payload_of(10 + ROLLING_AHEAD).is_ok());
        assert!(control.takes_payload_of(11 + ROLLING_AHEAD).is_err());
    }
}
