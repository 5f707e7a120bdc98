#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds what it needs, samples the real
# GPUs through NVML for 10 s (or $1 seconds) and prints every field read, the
# time one NVML reading took and the GPU table of the report.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q libnvidia-ml.so; then
    echo "gpu-check: no NVIDIA driver on this machine (no nvidia-smi, no libnvidia-ml.so)" >&2
    exit 1
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "gpu-check: cargo not found; install Rust (rustup) first" >&2
    exit 1
fi
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L
cargo run --release --quiet -p rankscope --example gpu_check -- "${1:-10}"
