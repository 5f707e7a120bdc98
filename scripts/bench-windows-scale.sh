#!/usr/bin/env bash
# Windows at scale, through node leaders: the time from `rankscope trigger
# --wait` to the window's report for jobs of SIZES ranks under `rankscope
# launch --nodes` (simulated nodes of 8 consecutive ranks, each node writing
# under a folder of its own, as nodes without a shared file system do: the
# plans reach each node's ranks through its leader, the statuses come back
# through it, and the window payloads travel to rank 0 over TCP). Each rank
# runs steps of about 10 ms (tests/src/bin/agent_only_rank.rs); the window
# covers 10 steps after rank 0's lead. Shown per size: the median of RUNS
# triggers' wall time, the window's own length (report.json's
# window.duration_s), the ranks in its report, and rank 0's threads and the
# connections its listener holds while the job runs.
#
# usage: scripts/bench-windows-scale.sh [RUNS] [SIZES]   (default 3, "64 256 1024")
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
runs=${1:-3}
sizes=${2:-64 256 1024}
cargo build --release -q -p rankscope-cli -p rankscope-tests --bin rankscope --bin agent_only_rank
work=$(mktemp -d)
trap 'pkill -TERM -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT

export RANKSCOPE_TOKEN="bench-windows-scale-$$-$RANDOM"

printf '| ranks | nodes | trigger to report s | window open s | the rest s | ranks in the report | rank 0 threads | connections at rank 0 |\n|---|---|---|---|---|---|---|---|\n'
for ranks in $sizes; do
    nodes=$((ranks / 8))
    out="$work/$ranks"
    mkdir -p "$out"
    master_port=$(free_port)
    RANKSCOPE_OUTPUT_DIR="$out" RANKSCOPE_GPU_SOURCE=none RANKSCOPE_COLLECT_HOST=false \
        RANKSCOPE_GATHER_TIMEOUT_S=120 \
        target/release/rankscope launch -n "$ranks" --nodes "$nodes" --master-port "$master_port" -- \
        sh -c 'RANKSCOPE_OUTPUT_DIR="$0/node-$GROUP_RANK" exec "$@"' "$out" \
        target/release/agent_only_rank --steps 1000000 >"$out.log" 2>&1 &
    job=$!
    live=""
    while [ -z "$live" ]; do
        sleep 0.5
        live=$(find "$out/node-0" -path '*/control/live' 2>/dev/null | head -n 1 || true)
    done
    dir=$(dirname "$(dirname "$live")")
    pid=$(awk '{ print $2 }' "$live")
    # Every rank in its session and its mirror linked: the leaders' and
    # node 0's ranks reach rank 0 within seconds; wait as long again.
    sleep $((10 + ranks / 64))
    : >"$work/totals" && : >"$work/opens" && : >"$work/rests" && : >"$work/reporting"
    for run in $(seq "$runs"); do
        started=$(date +%s.%N)
        printed=$(target/release/rankscope trigger --dir "$dir" --steps 10 --wait --timeout 300)
        ended=$(date +%s.%N)
        report="$(echo "$printed" | tail -n 1)/report.json"
        read -r open reporting < <(python3 -c "import json,sys; r = json.load(open(sys.argv[1])); print(r['window']['duration_s'], len(r['session']['ranks_reporting']))" "$report")
        total=$(echo "$ended - $started" | bc -l)
        echo "$total" >>"$work/totals"
        echo "$open" >>"$work/opens"
        echo "$total - $open" | bc -l >>"$work/rests"
        echo "$reporting" >>"$work/reporting"
        sleep 1
    done
    threads=$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status")
    held=$(connections_to $((master_port + 1)))
    printf '| %s | %s | %.2f | %.2f | %.2f | %s | %s | %s |\n' "$ranks" "$nodes" \
        "$(median <"$work/totals")" "$(median <"$work/opens")" "$(median <"$work/rests")" \
        "$(sort -n "$work/reporting" | head -n 1)" "$threads" "$held"
    kill -TERM "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
done
