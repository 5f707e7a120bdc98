#!/usr/bin/env bash
# Windows of a running job: the time from `rankscope trigger --wait` to the
# window's report at 4, 16 and 64 ranks on this machine, under `rankscope
# launch` (real rank processes gathering over TCP; the window through the
# session directory). Each rank runs steps of about 10 ms (the workspace
# tests' rank program, tests/src/bin/agent_only_rank.rs); the window covers
# 10 steps after rank 0's lead of 2. Shown: the trigger's wall time, the
# window's own length (report.json's window.duration_s), and the rest —
# planning, the last rank's write, rank 0's gather and report. The median of
# RUNS triggers per size, one job per size.
#
# usage: scripts/bench-windows.sh [RUNS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cargo build --release -q -p rankscope-cli -p rankscope-tests --bin rankscope --bin agent_only_rank
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '| ranks | trigger to report s | window open s | the rest s |\n|---|---|---|---|\n'
for ranks in 4 16 64; do
    out="$work/$ranks"
    mkdir -p "$out"
    RANKSCOPE_OUTPUT_DIR="$out" RANKSCOPE_GPU_SOURCE=none RANKSCOPE_COLLECT_HOST=false \
        target/release/rankscope launch -n "$ranks" -- \
        target/release/agent_only_rank --steps 1000000 >"$work/job-$ranks.log" 2>&1 &
    job=$!
    dir=""
    while [ -z "$dir" ]; do
        sleep 0.2
        dir=$(find "$out" -mindepth 1 -maxdepth 1 -type d | head -n 1)
    done
    # Every rank in its session: rank 0 answers only once its own started.
    sleep 2
    : >"$work/totals" && : >"$work/opens" && : >"$work/rests"
    for run in $(seq "$runs"); do
        started=$(date +%s.%N)
        printed=$(target/release/rankscope trigger --dir "$dir" --steps 10 --wait --timeout 120)
        ended=$(date +%s.%N)
        report="$(echo "$printed" | tail -n 1)/report.json"
        open=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['window']['duration_s'])" "$report")
        total=$(echo "$ended - $started" | bc -l)
        echo "$total" >>"$work/totals"
        echo "$open" >>"$work/opens"
        echo "$total - $open" | bc -l >>"$work/rests"
        # The report is written; the next request waits for nothing.
        sleep 0.5
    done
    kill -TERM "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
    printf '| %s | %.2f | %.2f | %.2f |\n' "$ranks" \
        "$(median <"$work/totals")" "$(median <"$work/opens")" "$(median <"$work/rests")"
done
