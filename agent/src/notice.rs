//! Notices: what the agent tells the user on standard error. Each is written
//! with one `write` call, so that the lines of ranks sharing a terminal or
//! pipe do not interleave mid-line.

use std::fmt;
use std::io::Write;

/// Writes `rankscope: <message>` and a newline to standard error in one piece.
pub(crate) fn write(message: fmt::Arguments<'_>) {
    let line = format!("rankscope: {message}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// `notice!("rank {}: ...", rank)`: a [`write`] of the formatted message.
macro_rules! notice {
    ($($arg:tt)*) => {
        $crate::notice::write(format_args!($($arg)*))
    };
}
pub(crate) use notice;
