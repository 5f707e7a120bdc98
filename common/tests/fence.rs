//! The fence around hostile input turns a panic into an error and leaves
//! the process's panic hook alone: the library installs none, so the
//! program's own hook still sees every panic. (Its own process: the panic
//! hook is global.)

use std::sync::atomic::{AtomicUsize, Ordering};

use rankscope_common::error::fence;

static SEEN: AtomicUsize = AtomicUsize::new(0);

#[test]
fn a_fenced_panic_is_an_error_and_the_programs_hook_still_sees_it() {
    std::panic::set_hook(Box::new(|_| {
        SEEN.fetch_add(1, Ordering::SeqCst);
    }));
    assert_eq!(fence(|| 7).unwrap(), 7);
    let fenced = fence(|| -> u32 { panic!("hostile input") });
    assert!(fenced.is_err());
    assert_eq!(SEEN.load(Ordering::SeqCst), 1, "the program's hook ran");
    // A payload read installs no hook of its own either.
    let _ = rankscope_common::payload::decode(b"not a payload");
    let loud = std::panic::catch_unwind(|| panic!("a bug elsewhere"));
    assert!(loud.is_err());
    assert_eq!(SEEN.load(Ordering::SeqCst), 2, "still the program's hook");
}
