#!/usr/bin/env bash
# Memory over many windows: 4 ranks under `rankscope launch` run STEPS steps
# of about 10 ms (tests/src/bin/agent_only_rank.rs), once with a rolling
# window every 50 steps and once without windows, in the same run. Every
# second the largest resident set of the rank processes is read from /proc;
# shown: the largest in the first and in the last 5 s of each job, and the
# windows written.
#
# usage: scripts/bench-windows-memory.sh [STEPS]   (default 3000: ~30 s)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-3000}
cargo build --release -q -p rankscope-cli -p rankscope-tests --bin rankscope --bin agent_only_rank
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The largest VmRSS (KiB) of the running agent_only_rank processes.
ranks_rss() {
    local max=0 pid rss
    for pid in $(pgrep -f 'target/release/agent_only_rank' || true); do
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
        [ "${rss:-0}" -gt "$max" ] && max=$rss
    done
    echo "$max"
}

run() {
    local name=$1 every=$2 out="$work/$1"
    mkdir -p "$out"
    RANKSCOPE_OUTPUT_DIR="$out" RANKSCOPE_GPU_SOURCE=none RANKSCOPE_WINDOW_EVERY_STEPS="$every" \
        target/release/rankscope launch -n 4 -- \
        target/release/agent_only_rank --steps "$steps" >"$work/$name.log" 2>&1 &
    local job=$! samples="$work/$name.rss"
    : >"$samples"
    while kill -0 "$job" 2>/dev/null; do
        ranks_rss >>"$samples"
        sleep 1
    done
    wait "$job" || true
    local first last windows
    first=$(awk 'NF && $1 > 0' "$samples" | head -n 5 | sort -n | tail -n 1)
    last=$(awk 'NF && $1 > 0' "$samples" | tail -n 5 | sort -n | tail -n 1)
    windows=$(find "$out" -mindepth 2 -maxdepth 2 -type d -name 'window-*' | wc -l)
    printf '| %s | %s | %s | %s | %s |\n' "$name" "$windows" "$((first / 1024))" "$((last / 1024))" \
        "$(wc -l <"$samples")"
}

printf '| job | windows | rank RSS, first 5 s, MiB | rank RSS, last 5 s, MiB | seconds |\n|---|---|---|---|---|\n'
run "a window every 50 steps" 50
run "no windows" 0
