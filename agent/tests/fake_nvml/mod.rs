//! Builds the fake NVML library (`fake_nvml.c` beside this file) once per
//! test process, with the system C compiler.

use std::path::{Path, PathBuf};

use rankscope::Config;
use rankscope_common::config::GpuSourceKind;

/// A configuration that samples every fake GPU every 10 ms, host off,
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
        ..Config::default()
    }
}
use std::process::Command;
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
