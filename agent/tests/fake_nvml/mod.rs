//! Builds the fake NVML library (`fake_nvml.c` beside this file) once per
//! test process, with the system C compiler.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rankscope::{Config, Profiler};
use rankscope_common::config::GpuSourceKind;

/// A configuration that samples every fake GPU every 10 ms, host off,
/// flushes off (the readings stay where the live state counts them),
/// writing under `out`.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn config(out: &Path) -> Config {
    Config {
        output_dir: out.to_path_buf(),
        gpu_source: GpuSourceKind::Nvml,
        nvml_library: Some(library()),
        gpu_devices: Some("all".into()),
        gpu_interval_s: 0.01,
        collect_host: false,
        flush_interval_s: 0.0,
        ..Config::default()
    }
}
use std::process::Command;

/// Waits until the running session holds `rows` GPU readings (one per
/// device read), as its live state counts them: a test waits for the
/// readings it needs, not for a time a loaded machine may not keep to.
/// Fails after a minute.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn wait_for_gpu_rows(profiler: &Profiler, rows: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held = profiler
            .live_state()
            .rows
            .iter()
            .find(|(table, _, _)| *table == "gpu_samples")
            .map_or(0, |(_, held, _)| *held);
        if held >= rows {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{held} of {rows} GPU readings after a minute"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
use std::sync::OnceLock;

/// The path of the fake `libnvidia-ml.so`, built on first use.
pub fn library() -> PathBuf {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            let source =
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake_nvml/fake_nvml.c");
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fake_nvml");
            std::fs::create_dir_all(&dir).expect("creating the fake NVML build directory");
            let library = dir.join(format!("libnvidia-ml-fake-{}.so", std::process::id()));
            let status = Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
                .arg(&library)
                .arg(&source)
                .status()
                .expect("running cc (scripts/setup.sh installs it)");
            assert!(status.success(), "compiling {}", source.display());
            library
        })
        .clone()
}
