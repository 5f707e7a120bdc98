//! What one torch.profiler window's reduction costs a rank: the time
//! `Profiler::add_kernel_trace` takes to read a trace into a running
//! session's tables (what the Python package calls when a window closes),
//! median of RUNS. Used by `scripts/bench-import.sh`.
//!
//! usage: kernel_window TRACE [RUNS]

use std::path::PathBuf;
use std::time::Instant;

use rankscope::{Config, Profiler, RankEnv};
use rankscope_common::config::GpuSourceKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let trace = PathBuf::from(args.next().ok_or("usage: kernel_window TRACE [RUNS]")?);
    let runs: usize = args.next().map_or(Ok(3), |r| r.parse())?;
    let mut seconds = Vec::new();
    let mut kept = None;
    for _ in 0..runs {
        let out = tempfile::tempdir()?;
        let config = Config {
            output_dir: out.path().to_path_buf(),
            collect_host: false,
            gpu_source: GpuSourceKind::None,
            ..Config::default()
        };
        let profiler = Profiler::with_rank_env(config, RankEnv::single());
        let session = profiler.session("kernel-window", &[])?;
        let start = Instant::now();
        kept = Some(profiler.add_kernel_trace(&trace, 1)?);
        seconds.push(start.elapsed().as_secs_f64());
        session.finish()?;
    }
    seconds.sort_by(f64::total_cmp);
    let megabytes = std::fs::metadata(&trace)?.len() as f64 / 1e6;
    let median = seconds[seconds.len() / 2];
    println!(
        "{median:.2} s for {megabytes:.0} MB ({:.2} s per 100 MB), median of {runs}; kept {kept:?}",
        median / megabytes * 100.0
    );
    Ok(())
}
