//! Names shared across ranks' digests: each distinct kernel, operator or
//! stage name held once, however many ranks name it (an import of many
//! ranks' traces holds one copy of each name, not one per rank), within a
//! budget of name bytes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

/// The distinct names seen so far, and the bytes they take; shared by the
/// threads that digest.
#[derive(Debug)]
pub struct SharedNames {
    held: Mutex<(HashSet<Arc<str>>, usize)>,
    budget: usize,
}

impl Default for SharedNames {
    /// Names without a budget: for digests whose inputs are bounded
    /// already (a rank's own payload).
    fn default() -> Self {
        SharedNames::within(usize::MAX)
    }
}

impl SharedNames {
    /// Names taking at most `budget` bytes in all.
    pub fn within(budget: usize) -> Self {
        SharedNames {
            held: Mutex::default(),
            budget,
        }
    }

    /// `name`, as the one shared copy; `None` for a new name past the
    /// budget.
    pub fn get(&self, name: &str) -> Option<Arc<str>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let (names, bytes) = &mut *held;
        if !names.contains(name) {
            if bytes.saturating_add(name.len()) > self.budget {
                return None;
            }
            *bytes += name.len();
        }
        Some(interned(names, name))
    }

    /// The name that stands for the names of `category` past the budget.
    pub fn past_budget(&self, category: &str) -> Arc<str> {
        let name = format!("[{category} names past the name budget]");
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        interned(&mut held.0, &name)
    }
}

/// The copy of `name` in `names`, put there if it is not yet.
fn interned(names: &mut HashSet<Arc<str>>, name: &str) -> Arc<str> {
    if let Some(shared) = names.get(name) {
        return Arc::clone(shared);
    }
    let shared: Arc<str> = Arc::from(name);
    names.insert(Arc::clone(&shared));
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_asked_for_twice_is_one_copy() {
        let names = SharedNames::default();
        let first = names.get("gemm").unwrap();
        assert!(Arc::ptr_eq(&first, &names.get("gemm").unwrap()));
        assert!(!Arc::ptr_eq(&first, &names.get("conv").unwrap()));
    }

    /// Past the budget a new name is refused; one held already is still
    /// given, and so is the name standing for those past it.
    #[test]
    fn names_past_the_budget_are_refused_and_stood_for() {
        let names = SharedNames::within(8);
        assert!(names.get("gemm").is_some());
        assert!(names.get("conv").is_some());
        assert!(names.get("nccl").is_none());
        assert!(names.get("gemm").is_some());
        let past = names.past_budget("compute");
        assert_eq!(&*past, "[compute names past the name budget]");
        assert!(Arc::ptr_eq(&past, &names.past_budget("compute")));
    }
}
