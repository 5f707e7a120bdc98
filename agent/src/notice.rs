//! Notices: what the agent tells the user on standard error. Each is written
//! with one `write` call, so that the lines of ranks sharing a terminal or
//! pipe do not interleave mid-line.

use std::fmt;
use std::io::Write;

use rankscope_common::text::terminal;

/// Writes `rankscope: <message>` and a newline to standard error in one
/// piece, with anything that could drive the terminal made harmless (a
/// notice can quote a session id, a tag or a device name).
pub(crate) fn write(message: fmt::Arguments<'_>) {
    let line = format!("rankscope: {}\n", terminal(&message.to_string()));
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// `notice!("rank {}: ...", rank)`: a [`write`] of the formatted message.
macro_rules! notice {
    ($($arg:tt)*) => {
        $crate::notice::write(format_args!($($arg)*))
    };
}
pub(crate) use notice;
