//! The progress bar `aggregate` and `import` draw on a terminal (stderr):
//! the phase, items done of all, the rate and the time left. Nothing is
//! drawn where stderr is not a terminal (a log, a pipe, a test).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rankscope_coordinator::progress::Progress;

/// A bar on stderr, hidden unless stderr is a terminal.
pub struct Bar(ProgressBar);

impl Bar {
    /// The bar for this process's stderr.
    pub fn stderr() -> Bar {
        if !std::io::stderr().is_terminal() {
            return Bar(ProgressBar::hidden());
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{msg:28} [{bar:30}] {human_pos}/{human_len} {per_sec:>10} {eta:>4} left",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(200));
        Bar(bar)
    }
}

impl Progress for Bar {
    fn begin(&self, what: &str, total: u64) {
        self.0.reset();
        self.0.set_length(total);
        self.0.set_message(what.to_string());
    }

    fn advance(&self, n: u64) {
        self.0.inc(n);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        // The command's own output follows on a clean line.
        self.0.finish_and_clear();
    }
}
