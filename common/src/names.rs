//! Interned names: the agent records a stage, metric or event name as a small
//! id, and turns ids back into strings only when it builds the batches.

use rustc_hash::FxHashMap;

/// The id of an interned name.
pub type NameId = u32;

/// Interns strings into [`NameId`]s; one per recording thread.
#[derive(Debug, Default)]
pub struct Names {
    ids: FxHashMap<Box<str>, NameId>,
    names: Vec<Box<str>>,
}

impl Names {
    /// The id of `name`; allocates only the first time a name is seen.
    #[inline]
    pub fn intern(&mut self, name: &str) -> NameId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        self.insert(name)
    }

    #[cold]
    #[inline(never)]
    fn insert(&mut self, name: &str) -> NameId {
        let id = self.names.len() as NameId;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    /// The name of `id`. Ids come from [`Names::intern`] of the same set.
    pub fn name(&self, id: NameId) -> &str {
        &self.names[id as usize]
    }

    /// How many distinct names are interned.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no name is interned yet.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_its_id() {
        let mut names = Names::default();
        let decode = names.intern("decode");
        assert_eq!(names.intern("encode"), decode + 1);
        assert_eq!(names.intern("decode"), decode);
        assert_eq!(names.name(decode), "decode");
        assert_eq!(names.len(), 2);
    }
}
