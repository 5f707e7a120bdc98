//! Names shared across ranks' digests: each distinct kernel, operator or
//! stage name held once, however many ranks name it (an import of many
//! ranks' traces holds one copy of each name, not one per rank).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

/// The distinct names seen so far; shared by the threads that digest.
#[derive(Debug, Default)]
pub struct SharedNames(Mutex<HashSet<Arc<str>>>);

impl SharedNames {
    /// `name`, as the one shared copy.
    pub fn get(&self, name: &str) -> Arc<str> {
        let mut names = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = names.get(name) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(name);
        names.insert(Arc::clone(&shared));
        shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_asked_for_twice_is_one_copy() {
        let names = SharedNames::default();
        let first = names.get("gemm");
        assert!(Arc::ptr_eq(&first, &names.get("gemm")));
        assert!(!Arc::ptr_eq(&first, &names.get("conv")));
    }
}
