//! The session generations (`src/recorder/generations.rs`) under loom:
//! every interleaving of a pairing pass with the end of a session, and
//! every value a weakly ordered CPU (aarch64) may let each load see. The
//! file is compiled here against loom's atomics instead of std's.

// What `generations.rs` takes from its parent module.
use loom::sync::atomic::{AtomicU64, Ordering};

#[path = "../src/recorder/generations.rs"]
mod generations;

use generations::Generations;
use loom::sync::Arc;
use loom::thread;

/// A pass that runs while session 1 ends pairs into session 1, whichever
/// side of the end it falls on: never into none (which drops its stages).
#[test]
fn a_pass_while_a_session_ends_pairs_into_that_session() {
    loom::model(|| {
        let sessions = Arc::new(Generations::new());
        sessions.start(1);
        assert!(sessions.is_recording());
        let pass = {
            let sessions = Arc::clone(&sessions);
            thread::spawn(move || sessions.current())
        };
        assert_eq!(sessions.end(), 1);
        assert!(!sessions.is_recording());
        assert_eq!(pass.join().unwrap(), 1);
    });
}

/// After the drain, and until the next session starts, stages belong to
/// none; then to the new session, never to the one drained.
#[test]
fn a_pass_after_the_drain_never_pairs_into_the_drained_session() {
    loom::model(|| {
        let sessions = Arc::new(Generations::new());
        sessions.start(1);
        sessions.end();
        let pass = {
            let sessions = Arc::clone(&sessions);
            thread::spawn(move || sessions.current())
        };
        sessions.forget_ended();
        sessions.start(2);
        let seen = pass.join().unwrap();
        assert!([1, 0, 2].contains(&seen), "{seen}");
        assert_eq!(sessions.current(), 2);
    });
}
