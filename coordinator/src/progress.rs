//! How far long work got: `aggregate` and `import` say when each phase
//! begins and as each item (a rank's file, a trace) is done. The command
//! line draws a bar on a terminal; a program that calls the library passes
//! [`Silent`], or its own [`Progress`].

/// Where long work reports its progress. Called from several threads.
pub trait Progress: Sync {
    /// A phase begins: what it does, over `total` items.
    fn begin(&self, what: &str, total: u64);
    /// `n` more items of the phase are done.
    fn advance(&self, n: u64);
}

/// Progress nobody watches.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn begin(&self, _what: &str, _total: u64) {}
    fn advance(&self, _n: u64) {}
}
