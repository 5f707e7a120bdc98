//! Rank 0's answers to window requests: from the inbox (the TCP desk),
//! the control folder (`rankscope trigger --dir`), `SIGUSR1`, the period
//! and imbalance. A request is planned where the windows are free and it
//! holds them for no more than [`MAX_WINDOW_HOLD`]; a cancel ends the
//! window planned or open; a planned window whose first step does not come
//! in time expires as if cancelled.

use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rankscope_common::error::Chain;
use rankscope_common::window::{self, Cancelled, Plan, Refusal, Request, Trigger};

use super::{
    imbalance, notice, say, Hub, Windows, MAX_LEAD_STEPS, MAX_SPAN_UNPACED, MAX_WINDOW_HOLD,
    MIN_LEAD_STEPS, PACE_MEASURE, PLAN_LEAD, REQUESTS_PER_LOOK,
};
use crate::control::WindowAnswer;

/// Who asked, and so where the answer goes.
enum Asker {
    /// The process itself (a signal, the period, imbalance): nowhere.
    Itself,
    /// `rankscope trigger --dir`: a refusal file (a plan is a file anyway).
    Folder,
    /// The inbox: its channel.
    Inbox(Sender<WindowAnswer>),
}

impl Asker {
    /// Tells the asker of the request with `nonce` that it was refused.
    fn refuse(self, windows: &Windows, nonce: String, reason: String) {
        match self {
            Asker::Itself => {}
            Asker::Folder => {
                let _ = window::write_refusal(&windows.dir, &Refusal { nonce, reason });
            }
            Asker::Inbox(answers) => {
                let _ = answers.send(WindowAnswer::Refused(reason));
            }
        }
    }
}

/// A request the process makes of itself: the window `trigger` asks for,
/// of the job's `window_steps`.
fn own_request(nonce: String, trigger: Trigger) -> Request {
    Request {
        trigger,
        ..Request::command(nonce, 0)
    }
}

impl Windows {
    /// Rank 0: answers the requests in the inbox and in the control folder
    /// (a look's worth of each), a `SIGUSR1` received since the last look,
    /// and plans the periodic window that is due.
    pub(super) fn answer_requests(&mut self, hub: &Arc<Hub>) {
        let due = self
            .every
            .filter(|&(period, last)| last.elapsed() >= period);
        if let (Some((period, _)), None) = (due, self.busy()) {
            self.every = Some((period, Instant::now()));
            self.periodic_taken += 1;
            let nonce = format!("periodic-{}", self.periodic_taken);
            self.answer(hub, own_request(nonce, Trigger::Periodic), Asker::Itself);
        }
        if self
            .sigusr1
            .as_ref()
            .is_some_and(|s| s.received.swap(false, Ordering::Relaxed))
        {
            self.signals_taken += 1;
            let nonce = format!("signal-{}", self.signals_taken);
            self.answer(hub, own_request(nonce, Trigger::Signal), Asker::Itself);
        }
        for _ in 0..REQUESTS_PER_LOOK {
            let Some(asked) = self.inbox.next() else {
                break;
            };
            self.answer(hub, asked.request, Asker::Inbox(asked.answers));
        }
        self.answer_folder(hub);
    }

    /// Answers the requests `rankscope trigger --dir` left in the control
    /// folder, a look's worth.
    fn answer_folder(&mut self, hub: &Arc<Hub>) {
        let Ok((paths, _beyond)) = window::pending_requests(&self.dir, REQUESTS_PER_LOOK) else {
            return;
        };
        for path in paths {
            // Taken out of the requests first: one its writer took back
            // (tired of waiting) is not answered.
            let Some(claimed) = window::claim_request(&path) else {
                continue;
            };
            let request = window::read_request(&claimed);
            // Answered or refused: never read twice.
            let _ = std::fs::remove_file(&claimed);
            match request {
                Ok(request) => self.answer(hub, request, Asker::Folder),
                Err(e) => {
                    self.refused_files += 1;
                    if self.refused_files == 1 {
                        notice!(
                            "a window request was refused (later ones are counted): {}",
                            Chain(&e)
                        );
                    }
                }
            }
        }
    }

    /// Rank 0: plans a window on `lag`, the imbalance that began, where
    /// none is open or planned (that one holds it).
    pub(super) fn answer_imbalance(&mut self, hub: &Arc<Hub>, lag: imbalance::Lag) {
        say!(
            "rank {}'s steps take {:.1} ms, the others' {:.1} ms (median): imbalance begins",
            lag.rank,
            lag.step_s * 1e3,
            lag.others_s * 1e3
        );
        self.imbalances_taken += 1;
        let nonce = format!("imbalance-{}", self.imbalances_taken);
        self.answer(hub, own_request(nonce, Trigger::Imbalance), Asker::Itself);
    }

    /// Plans the window `request` asks for, or ends the one planned or
    /// open where it is a cancel, and tells `asker`; or tells it why not.
    fn answer(&mut self, hub: &Arc<Hub>, request: Request, asker: Asker) {
        if let Some(problem) = request.problem() {
            let reason = format!("the request cannot be answered: {problem}");
            return asker.refuse(self, request.nonce, reason);
        }
        if request.cancel {
            let cancelled = Cancelled {
                nonce: request.nonce.clone(),
                reason: "cancelled by `rankscope trigger --cancel`".into(),
            };
            let current = self.current_plan().map(|plan| plan.index);
            let ended = match (request.cancel_window, current) {
                (Some(asked), Some(current)) if asked != current => Err(format!(
                    "window {current} is planned or open, not window {asked}"
                )),
                _ => self.cancel(hub, cancelled),
            };
            return match ended {
                Ok(plan) => match asker {
                    Asker::Inbox(answers) => {
                        let _ = answers.send(WindowAnswer::Cancelled(plan));
                    }
                    // The plan file, rewritten, is the folder's answer.
                    Asker::Itself | Asker::Folder => {}
                },
                Err(reason) => asker.refuse(self, request.nonce, reason),
            };
        }
        let nonce = request.nonce.clone();
        match self.plan(request) {
            Ok(plan) => {
                if let Asker::Inbox(answers) = asker {
                    let _ = answers.send(WindowAnswer::Planned(plan));
                    self.waiting = Some(answers);
                }
            }
            Err(reason) => asker.refuse(self, nonce, reason),
        }
    }

    /// Plans the window `request` asks for, where none is open or planned
    /// and it would not hold the windows too long; else why not.
    fn plan(&mut self, request: Request) -> Result<Plan, String> {
        let steps = match (request.steps, request.duration_ms) {
            (0, 0) => self.default_steps,
            // About that long at this rank's pace now.
            (0, ms) => ((self.steps_per_second() * ms as f64 / 1e3).ceil() as u64)
                .clamp(1, window::MAX_WINDOW_STEPS),
            (steps, _) => steps,
        };
        if let Some(reason) = self
            .busy()
            .or_else(|| self.too_long(steps.saturating_add(request.delay_steps)))
        {
            return Err(reason);
        }
        let count = self.steps.count();
        let first_step = count
            .saturating_add(request.delay_steps)
            .saturating_add(self.lead_steps());
        let plan = Plan {
            index: self.next_index,
            first_step,
            steps,
            trigger: request.trigger,
            nonce: request.nonce,
            torch: request.torch,
            python: request.python,
            run: self.run.clone(),
            cancelled: None,
        };
        if let Err(e) = window::write_plan(&self.dir, &plan) {
            notice!("window {} could not be planned: {e}", plan.index);
            return Err(format!("rank 0 cannot write the plan: {e}"));
        }
        self.inbox.post(&plan);
        say!(
            "window {} planned ({}): steps {} to {}",
            plan.index,
            plan.trigger.as_str(),
            plan.first_step,
            plan.close_step()
        );
        // Due when its steps come at the pace now; expired some time after.
        let pace = self.steps_per_second();
        let due_s = match pace > 0.0 {
            true => ((first_step - count) as f64 / pace).min(MAX_WINDOW_HOLD.as_secs_f64()),
            false => 0.0,
        };
        self.expires = Some(Instant::now() + Duration::from_secs_f64(due_s) + self.expiry);
        self.inbox.planned(plan.index);
        self.planned = Some(plan.clone());
        Ok(plan)
    }

    /// Ends the window planned or open now early, for `cancelled`: a
    /// planned one never opens, an open one closes a plan's lead of steps
    /// from now (every rank at the same step). Its plan is rewritten to say
    /// so, and returned; or why nothing was cancelled.
    pub(super) fn cancel(&mut self, hub: &Arc<Hub>, cancelled: Cancelled) -> Result<Plan, String> {
        if self.rolling > 0 {
            return Err(format!(
                "rolling windows run (window_every_steps = {}): they end with the session",
                self.rolling
            ));
        }
        let lead = self.lead_steps();
        let Some(plan) = self.current_plan() else {
            return Err("no window is planned or open".into());
        };
        if plan.cancelled.is_some() {
            return Err(format!(
                "window {} is ending already: it closes at step {}",
                plan.index,
                plan.close_step()
            ));
        }
        let mut revised = plan.clone();
        revised.steps = match self.open.as_ref().map(|open| open.edge.count) {
            // Closes a lead from now, after at least one step, never later
            // than planned.
            Some(opened) => self
                .steps
                .count()
                .saturating_add(lead)
                .max(opened + 1)
                .min(plan.close_step())
                .saturating_sub(plan.first_step),
            None => 0,
        };
        say!(
            "window {} {}: {}",
            revised.index,
            match revised.steps {
                0 => "will not open".to_string(),
                _ => format!("closes at step {}", revised.close_step()),
            },
            cancelled.reason
        );
        revised.cancelled = Some(cancelled);
        window::write_plan(&self.dir, &revised)
            .map_err(|e| format!("rank 0 cannot rewrite window {}'s plan: {e}", revised.index))?;
        self.inbox.post(&revised);
        self.revise(hub, revised.clone());
        Ok(revised)
    }

    /// Rank 0: cancels the planned window whose first step did not come
    /// by the time it expires.
    pub(super) fn expire(&mut self, hub: &Arc<Hub>) {
        let Some(plan) = self.planned.as_ref().filter(|_| self.open.is_none()) else {
            return;
        };
        if self.expires.is_none_or(|expires| Instant::now() < expires) {
            return;
        }
        let cancelled = Cancelled {
            nonce: plan.nonce.clone(),
            reason: format!(
                "expired: its first step ({}) did not come within window_expiry_s ({} s) of \
                 when it was due (the steps are at {})",
                plan.first_step,
                self.expiry.as_secs_f64(),
                self.steps.count()
            ),
        };
        if let Err(reason) = self.cancel(hub, cancelled) {
            notice!("a planned window did not expire: {reason}");
            self.expires = None;
        }
    }

    /// The steps per second now: over the last second or more measured
    /// (a long warm-up before the loop does not slow it), else since the
    /// measure began.
    pub(super) fn steps_per_second(&mut self) -> f64 {
        let (since, at, last) = self.pace;
        let seconds = since.elapsed().as_secs_f64();
        let count = self.steps.count();
        let now = match seconds > 0.0 {
            true => count.saturating_sub(at) as f64 / seconds,
            false => 0.0,
        };
        if seconds >= PACE_MEASURE.as_secs_f64() {
            self.pace = (Instant::now(), count, Some(now));
        }
        last.map_or(now, |last| last.max(now))
    }

    /// Why a window that would end `span` steps from now (its delay and
    /// its steps) is refused, where it is: at this rank's pace it would hold
    /// the windows past [`MAX_WINDOW_HOLD`] (before the pace is known, past
    /// [`MAX_SPAN_UNPACED`] steps), keeping every later request out that
    /// long.
    fn too_long(&mut self, span: u64) -> Option<String> {
        let pace = self.steps_per_second();
        if pace <= 0.0 {
            return (span > MAX_SPAN_UNPACED).then(|| {
                format!(
                    "its delay and steps ({span}) pass the {MAX_SPAN_UNPACED} one request may \
                     hold before this rank's pace is known"
                )
            });
        }
        let hold_s = span as f64 / pace;
        (hold_s > MAX_WINDOW_HOLD.as_secs_f64()).then(|| {
            format!(
                "its delay and steps ({span}) would hold the windows about {hold_s:.0} s at \
                 this pace ({pace:.1} steps/s), past the {} s one request may",
                MAX_WINDOW_HOLD.as_secs()
            )
        })
    }

    /// Steps that pass in [`PLAN_LEAD`] at this rank's pace now.
    fn lead_steps(&mut self) -> u64 {
        let lead = (self.steps_per_second() * PLAN_LEAD.as_secs_f64()).ceil() as u64;
        lead.clamp(MIN_LEAD_STEPS, MAX_LEAD_STEPS)
    }

    /// Why no window can be planned now, where none can.
    pub(super) fn busy(&self) -> Option<String> {
        if self.rolling > 0 {
            return Some(format!(
                "rolling windows run (window_every_steps = {}): each already gets a report",
                self.rolling
            ));
        }
        let busy = self.current_plan()?;
        Some(format!(
            "window {} is planned or open; ask again when its report is written",
            busy.index
        ))
    }
}
