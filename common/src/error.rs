//! Printing errors: each error says what went wrong at its level and leaves
//! the cause to `source()`, so a chain is printed once, outermost first.

use std::fmt;

/// Displays an error and its chain of sources: `outer: cause: root cause`.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
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
}
