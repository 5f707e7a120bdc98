#!/usr/bin/env bash
# Fuzzes the payload decoder with cargo-fuzz (libFuzzer) for $1 seconds
# (default 300). Not part of CI: run it after changing the payload format.
# cargo-fuzz needs nightly compiler flags; RUSTC_BOOTSTRAP lets the stable
# toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")/../common"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
mkdir -p fuzz/corpus/decode
# Seed with the captured payload of every format version.
cp tests/data/*.rsp fuzz/corpus/decode/ 2>/dev/null || true
RUSTC_BOOTSTRAP=1 cargo fuzz run decode fuzz/corpus/decode -- \
    -max_total_time="${1:-300}" -rss_limit_mb=4096
