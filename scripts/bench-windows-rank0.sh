#!/usr/bin/env bash
# What rank 0 spends, idle, on the ranks apart from its folder: a job of N
# ranks under `rankscope launch`, steps of about 10 ms and no window asked
# for, laid out two ways: each rank writing under a folder of its own as one
# node (every rank keeps a mirror connection to rank 0's listener), and as
# simulated nodes of 8 ranks (`launch --nodes`), each node writing under a
# folder of its own (each node's ranks keep theirs to its leader, which
# relays). After the ranks settle, rank 0's CPU time (user + system, from
# /proc/<pid>/stat) over SECONDS, its thread count, and the connections its
# listener holds (/proc/net/tcp), at each size in SIZES.
# Run it in two checkouts to compare builds.
#
# usage: scripts/bench-windows-rank0.sh [SECONDS] [SIZES]
#        (default 10, "16 64 256")
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
seconds=${1:-10}
sizes=${2:-16 64 256}
cargo build --release -q -p rankscope-cli -p rankscope-tests --bin rankscope --bin agent_only_rank
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export RANKSCOPE_TOKEN="bench-rank0-$$-$RANDOM"
ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }


printf '| ranks apart | layout | rank 0 CPU over %s s, s | rank 0 threads | connections at rank 0 |\n|---|---|---|---|---|\n' "$seconds"
for ranks in $sizes; do
    for layout in ranks nodes; do
        out="$work/$ranks-$layout"
        mkdir -p "$out"
        master_port=$(free_port)
        if [ "$layout" = ranks ]; then
            nodes=1
            folder='RANKSCOPE_OUTPUT_DIR="$0/$RANK" exec "$@"'
        else
            nodes=$((ranks / 8))
            folder='RANKSCOPE_OUTPUT_DIR="$0/node-$GROUP_RANK" exec "$@"'
        fi
        RANKSCOPE_OUTPUT_DIR="$out" RANKSCOPE_GPU_SOURCE=none RANKSCOPE_COLLECT_HOST=false \
            target/release/rankscope launch -n "$ranks" --nodes "$nodes" --master-port "$master_port" -- \
            sh -c "$folder" "$out" \
            target/release/agent_only_rank --steps 1000000 >"$out.log" 2>&1 &
        job=$!
        live=""
        while [ -z "$live" ]; do
            sleep 0.2
            live=$(find "$out" -path '*/control/live' 2>/dev/null | head -n 1 || true)
        done
        # every rank's session started and its mirror connected
        sleep 5
        # rank 0's pid, from the file it keeps while its session runs
        pid=$(awk '{ print $2 }' "$(find "$out"/0 "$out"/node-0 -path '*/control/live' 2>/dev/null | head -n 1)")
        before=$(cpu_ticks "$pid")
        sleep "$seconds"
        after=$(cpu_ticks "$pid")
        threads=$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status")
        held=$(connections_to $((master_port + 1)))
        printf '| %s | %s | %.2f | %s | %s |\n' "$ranks" \
            "$([ "$layout" = ranks ] && echo "a folder per rank" || echo "nodes of 8, a folder per node")" \
            "$(echo "($after - $before) / $ticks" | bc -l)" "$threads" "$held"
        kill -TERM "$job" 2>/dev/null || true
        wait "$job" 2>/dev/null || true
    done
done
