//! Printing errors: each error says what went wrong at its level and leaves
//! the cause to `source()`, so a chain is printed once, outermost first.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

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

/// Runs `f`, turning a panic into `Err`: the last fence around code that
/// reads untrusted input, should the checks before it miss something (a
/// hostile payload is refused with an error, not a crash of rank 0). The
/// readers validate their input rather than rely on it: a program built
/// with `panic = "abort"` has no such fence. No panic hook is installed:
/// the program's own hook sees a panic here, as any other. Under the
/// fuzzer (feature `fuzzing`) the panic goes through, as a finding.
pub fn fence<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    if cfg!(feature = "fuzzing") {
        return Ok(f());
    }
    catch_unwind(AssertUnwindSafe(f))
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
