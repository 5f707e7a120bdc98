#!/usr/bin/env bash
# What rank 0 spends, idle, on the ranks apart from its folder: a job of N
# ranks under `rankscope launch`, each writing under a folder of its own (as
# on nodes without a shared file system, so every rank keeps a mirror
# connection to rank 0's listener), steps of about 10 ms and no window asked
# for. After the ranks settle, rank 0's CPU time (user + system, from
# /proc/<pid>/stat) over SECONDS, and its thread count, at 16 and 64 ranks.
# Run it in two checkouts to compare builds.
#
# usage: scripts/bench-windows-rank0.sh [SECONDS]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
cargo build --release -q -p rankscope-cli -p rankscope-tests --bin rankscope --bin agent_only_rank
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export RANKSCOPE_TOKEN="bench-rank0-$$-$RANDOM"
ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

printf '| ranks apart | rank 0 CPU over %s s, s | rank 0 threads |\n|---|---|---|\n' "$seconds"
for ranks in 16 64; do
    out="$work/$ranks"
    mkdir -p "$out"
    RANKSCOPE_OUTPUT_DIR="$out" RANKSCOPE_GPU_SOURCE=none RANKSCOPE_COLLECT_HOST=false \
        target/release/rankscope launch -n "$ranks" --master-port "$(free_port)" -- \
        sh -c 'RANKSCOPE_OUTPUT_DIR="$0/$RANK" exec "$@"' "$out" \
        target/release/agent_only_rank --steps 1000000 >"$out.log" 2>&1 &
    job=$!
    live=""
    while [ -z "$live" ]; do
        sleep 0.2
        live=$(find "$out/0" -path '*/control/live' 2>/dev/null | head -n 1 || true)
    done
    # rank 0's pid, from the file it keeps while its session runs
    pid=$(awk '{ print $2 }' "$live")
    # every rank's session started and its mirror connected
    sleep 5
    before=$(cpu_ticks "$pid")
    sleep "$seconds"
    after=$(cpu_ticks "$pid")
    threads=$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status")
    printf '| %s | %.2f | %s |\n' "$ranks" "$(echo "($after - $before) / $ticks" | bc -l)" "$threads"
    kill -TERM "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
done
