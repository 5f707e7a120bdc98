//! Interned names: the agent records a stage, metric or event name as a small
//! id, and turns ids back into strings only when it builds the batches.

use rustc_hash::FxHashMap;

/// The id of an interned name.
pub type NameId = u32;

/// The name every name past a [`Names`] limit is recorded as.
pub const OTHER: &str = "(other)";

/// The longest name kept, bytes; a longer one is cut (at a character
/// boundary), so that names cost bounded memory whatever their length.
pub const MAX_NAME_BYTES: usize = 1024;

/// Interns strings into [`NameId`]s; one per recording thread. Holds at most
/// `limit` distinct names: past it, a new name is folded into [`OTHER`] and
/// counted, so that a program inventing names cannot grow it without bound.
#[derive(Debug)]
pub struct Names {
    ids: FxHashMap<Box<str>, NameId>,
    names: Vec<Box<str>>,
    limit: usize,
    folded: u64,
}

impl Default for Names {
    /// A set with no practical limit.
    fn default() -> Self {
        Self::with_limit(usize::MAX)
    }
}

impl Names {
    /// A set of at most `limit` distinct names (and [`OTHER`]).
    pub fn with_limit(limit: usize) -> Self {
        Names {
            ids: FxHashMap::default(),
            names: Vec::new(),
            limit,
            folded: 0,
        }
    }

    /// The id of `name`; allocates only the first time a name is seen.
    #[inline]
    pub fn intern(&mut self, name: &str) -> NameId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        self.insert(name)
    }

    /// The id of `name` if it was interned (as itself, cut to
    /// [`MAX_NAME_BYTES`], or — once the set is full — as [`OTHER`]);
    /// interns nothing.
    pub fn get(&self, name: &str) -> Option<NameId> {
        let found = self.ids.get(name).or_else(|| self.ids.get(cut(name)));
        match found {
            Some(&id) => Some(id),
            None if self.names.len() >= self.limit => self.ids.get(OTHER).copied(),
            None => None,
        }
    }

    #[cold]
    #[inline(never)]
    fn insert(&mut self, name: &str) -> NameId {
        let name = cut(name);
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let name = if self.names.len() < self.limit {
            name
        } else {
            self.folded += 1;
            if let Some(&other) = self.ids.get(OTHER) {
                return other;
            }
            OTHER
        };
        let id = self.names.len() as NameId;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    /// How many times a name past the limit was folded into [`OTHER`];
    /// resets the count.
    pub fn take_folded(&mut self) -> u64 {
        std::mem::take(&mut self.folded)
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

/// `name` cut to at most [`MAX_NAME_BYTES`] at a character boundary.
pub fn cut(name: &str) -> &str {
    cut_to(name, MAX_NAME_BYTES)
}

/// `text` cut to at most `max` bytes at a character boundary.
pub fn cut_to(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let end = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    &text[..end]
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

    #[test]
    fn names_past_the_limit_fold_into_other_and_are_counted() {
        let mut names = Names::with_limit(2);
        let a = names.intern("a");
        names.intern("b");
        let c = names.intern("c");
        let d = names.intern("d");
        assert_eq!(c, d);
        assert_eq!(names.name(c), OTHER);
        assert_eq!(names.intern("a"), a, "known names keep their id");
        assert_eq!(names.len(), 3);
        assert_eq!(names.take_folded(), 2);
        assert_eq!(names.take_folded(), 0);
        assert_eq!(names.get("a"), Some(a));
        assert_eq!(
            names.get("never"),
            Some(c),
            "a full set's unknown names are (other)"
        );
    }

    #[test]
    fn a_lookup_interns_nothing_and_long_names_are_cut() {
        let mut names = Names::with_limit(10);
        assert_eq!(names.get("x"), None);
        assert!(names.is_empty());
        let long = "é".repeat(MAX_NAME_BYTES);
        let id = names.intern(&long);
        assert_eq!(names.name(id).len(), MAX_NAME_BYTES);
        assert_eq!(names.intern(&long), id);
        assert_eq!(names.get(&long), Some(id));
    }
}
