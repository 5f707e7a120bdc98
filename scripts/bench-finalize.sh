#!/usr/bin/env bash
# Finalize time (gather + analysis + report) with 10-minute-sized payloads:
# under mpirun, MPI against the shared directory (2-16 ranks); under
# `rankscope launch`, TCP against the directory (16 and 64 ranks); and 64
# ranks as 8 simulated nodes of 8 (`rankscope launch --nodes 8`) over TCP,
# one level against two (`gather_levels`). The median of $1 runs (default
# 3) each; $2 picks a part (`mpi`, `launch`, `levels`; default all).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
part="${2:-all}"
cargo build --release --quiet -p rankscope --features mpi --example finalize_bench
cargo build --release --quiet -p rankscope-cli
bench=target/release/examples/finalize_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One measurement: the launcher's command line, then the transport.
measure() {
    local transport=$1; shift
    local times=() bytes=0 line
    for _ in $(seq "$runs"); do
        line=$(RANKSCOPE_OUTPUT_DIR="$out" RANKSCOPE_TRANSPORT="$transport" \
            RANKSCOPE_GATHER_TIMEOUT_S=300 "$@" | grep 'finalize_ms' | sed 's/^\[rank 0\] //')
        times+=("$(echo "$line" | awk '{print $2}')")
        bytes=$(echo "$line" | awk '{print $4}')
    done
    printf '%s\n' "${times[@]}" | sort -n | awk -v b="$bytes" '{a[NR]=$1} END {printf "%12s %14s\n", a[int((NR+1)/2)], b}'
}

printf '%-9s %-6s %-10s %12s %14s\n' launcher ranks transport finalize_ms payload_bytes
if [[ $part == all || $part == mpi ]]; then
    for ranks in 2 4 8 16; do
        for transport in mpi dir; do
            printf '%-9s %-6s %-10s ' mpirun "$ranks" "$transport"
            measure "$transport" mpirun -n "$ranks" --oversubscribe "$bench"
        done
    done
fi
if [[ $part == all || $part == launch ]]; then
    for ranks in 16 64; do
        for transport in tcp dir; do
            printf '%-9s %-6s %-10s ' launch "$ranks" "$transport"
            measure "$transport" target/release/rankscope launch -n "$ranks" -- "$bench"
        done
    done
fi
if [[ $part == all || $part == levels ]]; then
    for levels in 1 2; do
        printf '%-9s %-6s %-10s ' "8 nodes" 64 "tcp ${levels}-level"
        RANKSCOPE_GATHER_LEVELS=$levels measure tcp \
            target/release/rankscope launch --nodes 8 -n 64 -- "$bench"
    done
fi
