#!/usr/bin/env bash
# Installs what building and testing rankscope needs on a fresh Debian
# machine: the Rust components and the system packages. Safe to run again.
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found; install Rust with rustup (https://rustup.rs) first" >&2
    exit 1
fi
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        rustup component add "$component"
    fi
done

# System packages: a C compiler (zstd-sys, the fake NVML library of the
# tests); Open MPI and libclang (bindgen) for the MPI transport and its tests;
# Chromium for the tests that open report.html in a real browser.
missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# util-linux's `script`: a terminal for the test of the progress bar.
command -v script >/dev/null 2>&1 || missing+=(bsdutils)
for package in libopenmpi-dev libclang-dev; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
