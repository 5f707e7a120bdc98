//! Stage names made once and used for many stages: each remembers its id
//! in the threads that use it, so that beginning a stage needs no hashing.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use rankscope_common::names::NameId;

/// A stage name made once and used for many stages, as a binding or a hot
/// loop holds it ([`Profiler::begin`](crate::Profiler::begin)). Names are
/// interned per thread; this one remembers its id in the first 8 threads
/// that use it in the process's life (their slots are never given back,
/// even when the threads exit), so that beginning a stage there needs no
/// hashing of the name. Later threads find it in their own map of names
/// by text.
#[derive(Debug)]
pub struct StageName {
    name: Cow<'static, str>,
    interned: Slots,
}

/// Where a [`StageName`] remembers its ids: `buffer id << 32 | name id`, or
/// [`StageName::UNSET`]. Each slot is written once, by one of the first
/// thread buffers to intern the name, in order; after that, threads only
/// read them. A thread past them finds the name in its own cache of names
/// by text (a hash, no lock, no write others see). (Not aligned to a cache
/// line: a `StageName` lives in Python objects too, which the interpreter
/// aligns to 16 bytes.)
#[derive(Debug)]
struct Slots([AtomicU64; StageName::SLOTS]);

impl StageName {
    const UNSET: u64 = u64::MAX;
    /// Thread buffers a name remembers its id in.
    const SLOTS: usize = 8;

    /// A stage name.
    pub fn new(name: &str) -> Self {
        StageName {
            name: Cow::Owned(name.to_string()),
            interned: Slots([const { AtomicU64::new(Self::UNSET) }; Self::SLOTS]),
        }
    }

    /// A stage name known when compiling, for a `static` (what
    /// [`stage!`](crate::stage!) makes at each call site).
    pub const fn from_static(name: &'static str) -> Self {
        StageName {
            name: Cow::Borrowed(name),
            interned: Slots([const { AtomicU64::new(Self::UNSET) }; Self::SLOTS]),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The name's id in thread buffer `buffer`, interned there by `intern`
    /// on first use (which also says whether the id may be kept).
    #[inline(always)]
    pub(crate) fn id_in(&self, buffer: u32, intern: impl FnOnce(&str) -> (NameId, bool)) -> NameId {
        for slot in &self.interned.0 {
            match slot.load(Ordering::Relaxed) {
                Self::UNSET => break,
                cached if (cached >> 32) as u32 == buffer => return cached as NameId,
                _ => {}
            }
        }
        self.intern_in(buffer, intern)
    }

    #[cold]
    #[inline(never)]
    fn intern_in(&self, buffer: u32, intern: impl FnOnce(&str) -> (NameId, bool)) -> NameId {
        let (id, keep) = intern(&self.name);
        if !keep {
            return id;
        }
        let cached = u64::from(buffer) << 32 | u64::from(id);
        // The first free slot, read before a write is tried (threads past
        // the slots write none); one taken at once by another thread is
        // passed over, so the filled ones stay in front.
        for slot in &self.interned.0 {
            if slot.load(Ordering::Relaxed) == Self::UNSET
                && slot
                    .compare_exchange(Self::UNSET, cached, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_name_remembers_its_id_in_each_of_its_first_buffers() {
        let name = StageName::new("decode");
        let interned = Cell::new(0);
        let intern = |id: NameId, keep: bool| {
            let interned = &interned;
            move |text: &str| {
                assert_eq!(text, "decode");
                interned.set(interned.get() + 1);
                (id, keep)
            }
        };
        let buffers = StageName::SLOTS as u32 + 2;
        for _ in 0..2 {
            for buffer in 0..buffers {
                assert_eq!(name.id_in(buffer, intern(buffer + 100, true)), buffer + 100);
            }
        }
        assert_eq!(
            interned.get(),
            buffers + 2,
            "once per buffer, and again for the two past the slots"
        );
        // An id not to keep (a name folded into `(other)`) is asked for at
        // each use.
        let folded = StageName::new("decode");
        folded.id_in(0, intern(1, false));
        folded.id_in(0, intern(1, false));
        assert_eq!(interned.get(), buffers + 4);
    }
}
