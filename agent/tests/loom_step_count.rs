//! The step count (`src/session/windows/step_count.rs`) under loom: a
//! thread stepping while the windows thread arms an edge, under every
//! interleaving and every value a weakly ordered CPU may let each load
//! see. The file is compiled here against loom's atomics instead of std's.

// What `step_count.rs` takes from its parent module.
use loom::sync::atomic::{AtomicU64, Ordering};

#[path = "../src/session/windows/step_count.rs"]
#[allow(dead_code)]
mod step_count;

use loom::sync::Arc;
use loom::thread;
use step_count::{StepCount, NONE};

/// The edges one step claimed.
fn claimed_by_a_step(count: &StepCount) -> Vec<u64> {
    let mut claimed = Vec::new();
    count.advance(|edge| claimed.push(edge));
    claimed
}

/// `steps` steps on another thread while an edge is armed at `at`: the
/// edges the steps claimed, and whether the arming said one comes.
fn step_while_arming(steps: u64, at: u64, then: u64, period: u64) -> (Vec<u64>, bool) {
    let count = Arc::new(StepCount::new());
    count.reset(period);
    let stepper = {
        let count = Arc::clone(&count);
        thread::spawn(move || {
            (0..steps)
                .flat_map(|_| claimed_by_a_step(&count))
                .collect::<Vec<u64>>()
        })
    };
    let armed = count.arm(at, then);
    (stepper.join().unwrap(), armed)
}

/// An edge armed while the count passes it is claimed by the step that
/// reaches it, once, exactly where the arming says one comes: never armed
/// past and lost, never claimed where the arming took it back.
#[test]
fn an_edge_armed_as_the_count_passes_it_is_claimed_once_or_taken_back() {
    loom::model(|| {
        let (claimed, armed) = step_while_arming(2, 2, NONE, 0);
        match armed {
            true => assert_eq!(claimed, [2]),
            false => assert_eq!(claimed, []),
        }
    });
}

/// A planned window's close, armed with its opening: a step that claims
/// the opening arms the close, which a later step claims.
#[test]
fn the_close_follows_the_opening_in_order() {
    loom::model(|| {
        let (claimed, armed) = step_while_arming(3, 1, 3, 0);
        match armed {
            true => assert_eq!(claimed, [1, 3]),
            // The count passed 1 first: no window, no close either.
            false => assert_eq!(claimed, []),
        }
    });
}

/// Rolling windows, steps on two threads: an edge every 2 steps, each
/// claimed once, though a step may pass the next edge while another still
/// arms it (then that one notes it, late).
#[test]
fn rolling_edges_come_every_period_steps() {
    loom::model(|| {
        let count = Arc::new(StepCount::new());
        count.reset(2);
        let stepper = {
            let count = Arc::clone(&count);
            thread::spawn(move || {
                (0..3)
                    .flat_map(|_| claimed_by_a_step(&count))
                    .collect::<Vec<u64>>()
            })
        };
        let mine: Vec<u64> = (0..2).flat_map(|_| claimed_by_a_step(&count)).collect();
        let mut claimed = stepper.join().unwrap();
        claimed.extend(mine);
        claimed.sort_unstable();
        // Five steps on two threads: the edges at 2 and 4, each once.
        assert_eq!(claimed, [2, 4]);
        assert_eq!(count.count(), 5);
    });
}

/// A one-step window, steps on two threads: its close is noted even where
/// a step passes it while the opening's claim still arms it.
#[test]
fn a_close_passed_while_it_is_armed_is_noted_late_not_lost() {
    loom::model(|| {
        let count = Arc::new(StepCount::new());
        count.reset(0);
        assert!(count.arm(1, 2));
        let stepper = {
            let count = Arc::clone(&count);
            thread::spawn(move || claimed_by_a_step(&count))
        };
        let mut claimed = claimed_by_a_step(&count);
        claimed.extend(stepper.join().unwrap());
        claimed.sort_unstable();
        assert_eq!(claimed, [1, 2]);
    });
}

/// A window's close noted, the windows thread arms the next window while
/// the step that noted it still finishes its claim: the new plan's edges
/// stand, and the steps after claim them.
#[test]
fn a_plan_armed_as_a_close_is_noted_stands() {
    loom::model(|| {
        let count = Arc::new(StepCount::new());
        count.reset(0);
        assert!(count.arm(1, NONE));
        let (noted, seen) = loom::sync::mpsc::channel();
        let stepper = {
            let count = Arc::clone(&count);
            thread::spawn(move || {
                let mut claimed = Vec::new();
                for _ in 0..4 {
                    count.advance(|edge| {
                        claimed.push(edge);
                        let _ = noted.send(edge);
                    });
                }
                claimed
            })
        };
        // As the windows thread does: the next plan armed once the edge
        // at 1 is seen (unless the count passed 3 first).
        assert_eq!(seen.recv().unwrap(), 1);
        let armed = count.arm(3, 4);
        let claimed = stepper.join().unwrap();
        match armed {
            true => assert_eq!(claimed, [1, 3, 4]),
            false => assert_eq!(claimed, [1]),
        }
    });
}
