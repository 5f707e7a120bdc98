//! Printing errors: each error says what went wrong at its level and leaves
//! the cause to `source()`, so a chain is printed once, outermost first.

use std::cell::Cell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

/// Displays an error and its chain of sources: `outer: cause: root cause`.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    /// A cause that an error of another crate already put in its own
    /// message (some do both) is not repeated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut previous = self.0.to_string();
        f.write_str(&previous)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !previous.ends_with(&text) {
                write!(f, ": {text}")?;
            }
            previous = text;
            source = cause.source();
        }
        Ok(())
    }
}

thread_local! {
    /// Whether a panic on this thread is expected and caught: no message.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, turning a panic into `Err` without the panic message and
/// backtrace the panic hook would print: the last fence around code that
/// reads untrusted input (a hostile payload that made the Arrow reader panic
/// is refused with a clear error, not a trace). The hook installed on first
/// use wraps the one before it, which still sees every other panic.
pub fn catch_quietly<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    // Under the fuzzer (feature `fuzzing`) a panic here is a finding, not
    // a refusal.
    if cfg!(feature = "fuzzing") {
        return Ok(f());
    }
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|quiet| quiet.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|quiet| quiet.set(was));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading {path}")]
    struct Outer {
        path: &'static str,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn each_cause_once() {
        let error = Outer {
            path: "/nonexistent",
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(
            Chain(&error).to_string(),
            "reading /nonexistent: entity not found"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("loading failed: {0}")]
    struct Both(#[source] std::io::Error);

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let error = Both(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(
            Chain(&error).to_string(),
            "loading failed: entity not found"
        );
    }
}
