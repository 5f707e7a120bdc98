//! `SIGUSR1` while a session runs: rank 0's asks for a window; the other
//! ranks' is taken too (a scheduler may signal every rank) and ignored.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use signal_hook::consts::SIGUSR1;
use signal_hook::SigId;

use crate::notice::notice;

/// Whether a session of this process took `SIGUSR1` (its handler stays
/// installed once registered): a later session takes it again.
static SIGUSR1_TAKEN: AtomicBool = AtomicBool::new(false);

/// `SIGUSR1` taken while the session runs: a flag its handler sets.
pub(super) struct Sigusr1 {
    pub(super) received: Arc<AtomicBool>,
    id: SigId,
}

impl Sigusr1 {
    /// Takes `SIGUSR1` where its action is the default (which would end
    /// the process); a program's own handler is left alone.
    pub(super) fn take() -> Option<Sigusr1> {
        let ours = SIGUSR1_TAKEN.load(Ordering::Relaxed);
        if !ours && !crate::signals::has_default_action(SIGUSR1) {
            return None;
        }
        let received = Arc::new(AtomicBool::new(false));
        match signal_hook::flag::register(SIGUSR1, Arc::clone(&received)) {
            Ok(id) => {
                SIGUSR1_TAKEN.store(true, Ordering::Relaxed);
                Some(Sigusr1 { received, id })
            }
            Err(e) => {
                notice!("SIGUSR1 will not open windows: {e}");
                None
            }
        }
    }
}

impl Drop for Sigusr1 {
    fn drop(&mut self) {
        // Its handler stays installed, doing nothing: SIGUSR1 no longer
        // ends the process once a session has taken it.
        signal_hook::low_level::unregister(self.id);
    }
}
