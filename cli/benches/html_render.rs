//! The report page's time to render in headless Chromium: from navigation
//! until every chart has finished drawing (the page's `data-charts`), for
//! each `report.html` given, the best of three loads. Run by
//! `scripts/bench-html.sh`, which makes the reports.
//!
//! usage: html_render PAGE...

use std::path::PathBuf;
use std::time::{Duration, Instant};

#[allow(dead_code)] // the tests' driver; this uses a part of it
#[path = "../tests/support/browser.rs"]
mod browser;

use browser::Browser;

/// True once every chart has drawn (set by the page's script).
const CHARTS_READY: &str = "document.body && document.body.getAttribute('data-charts') === 'ready'";

fn main() {
    let pages: Vec<PathBuf> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .map(PathBuf::from)
        .collect();
    for page in pages {
        let best = (0..3)
            .map(|_| {
                let mut browser = Browser::launch(1400);
                let started = Instant::now();
                browser.open(&page, CHARTS_READY);
                started.elapsed()
            })
            .min()
            .unwrap_or(Duration::ZERO);
        println!("{}\t{:.2} s", page.display(), best.as_secs_f64());
    }
}
