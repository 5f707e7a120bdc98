#!/usr/bin/env bash
# Finalize time (gather + analysis + report) under mpirun for 2, 4, 8 and 16
# ranks with 10-minute-sized payloads, over MPI and through the shared
# directory, in the same run; the median of $1 runs (default 3) each.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
cargo build --release --quiet -p rankscope --features mpi --example finalize_bench
bench=target/release/examples/finalize_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-6s %-10s %12s %14s\n' ranks transport finalize_ms payload_bytes
for ranks in 2 4 8 16; do
    for transport in mpi dir; do
        times=()
        bytes=0
        for _ in $(seq "$runs"); do
            line=$(RANKSCOPE_OUTPUT_DIR="$out" RANKSCOPE_TRANSPORT="$transport" \
                mpirun -n "$ranks" --oversubscribe "$bench" | grep '^finalize_ms')
            times+=("$(echo "$line" | awk '{print $2}')")
            bytes=$(echo "$line" | awk '{print $4}')
        done
        median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
        printf '%-6s %-10s %12s %14s\n' "$ranks" "$transport" "$median" "$bytes"
    done
done
