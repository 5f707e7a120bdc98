#!/usr/bin/env bash
# Fuzzes the payload decoder with cargo-fuzz (libFuzzer) for $1 seconds
# (default 300). Not part of CI: run it after changing the payload format.
# $2 picks the target: `decode` (default) takes whole payloads; `stream`
# takes one table's Arrow IPC stream, which mutated payloads rarely reach
# (their checksum and compression fail first).
# cargo-fuzz needs nightly compiler flags; RUSTC_BOOTSTRAP lets the stable
# toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")/../common"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
target=${2:-decode}
mkdir -p "fuzz/corpus/$target"
case "$target" in
decode) # Seed with the captured payload of every format version.
    cp tests/data/*.rsp fuzz/corpus/decode/ ;;
stream) # Seed with a stream of every table, as the payload writes them.
    cargo run -q -p rankscope-common --example stream_seeds -- fuzz/corpus/stream ;;
*) echo "usage: scripts/fuzz.sh [SECONDS] [decode|stream]" >&2; exit 2 ;;
esac
RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "fuzz/corpus/$target" -- \
    -max_total_time="${1:-300}" -rss_limit_mb=4096
