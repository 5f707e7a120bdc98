//! A panic caught by `catch_quietly` prints nothing; other panics still
//! reach the hook that was installed before. (Its own process: the panic
//! hook is global.)

use std::sync::atomic::{AtomicUsize, Ordering};

use rankscope_common::error::catch_quietly;

static SEEN: AtomicUsize = AtomicUsize::new(0);

#[test]
fn a_caught_panic_is_quiet_and_others_still_reach_the_hook() {
    std::panic::set_hook(Box::new(|_| {
        SEEN.fetch_add(1, Ordering::SeqCst);
    }));
    let caught = catch_quietly(|| -> u32 { panic!("hostile input") });
    assert!(caught.is_err());
    assert_eq!(
        SEEN.load(Ordering::SeqCst),
        0,
        "no message for a caught panic"
    );
    assert_eq!(catch_quietly(|| 7).unwrap(), 7);

    let loud = std::panic::catch_unwind(|| panic!("a bug elsewhere"));
    assert!(loud.is_err());
    assert_eq!(
        SEEN.load(Ordering::SeqCst),
        1,
        "the earlier hook still runs"
    );
}
