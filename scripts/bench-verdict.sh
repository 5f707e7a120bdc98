#!/usr/bin/env bash
# Rank 0's time and memory with the verdict's analysis (steady state, waits,
# events, the ranking) against the build before it, at 16,384 ranks (or
# RANKS), in the same run, the two builds taking turns. BASE is a checkout
# of the build before (default: a worktree of 91802c5 under /tmp/base),
# built here into its own target folder.
#
# Measured, median of RUNS, /usr/bin/time:
# - one level: `rankscope aggregate --report-only` over the same spill files
#   (coordinator/examples/gen_payloads.rs of this tree: the aggregation
#   benchmark's ranks), without and with a collective call per step
#   (`--collectives`);
# - two levels: each build's `merge_nodes` over node digests its own
#   `gen_node_digests` made (the digest format differs) of the same ranks.
#
# usage: scripts/bench-verdict.sh [RUNS] [RANKS]   (defaults 3, 16384)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
runs=${1:-3}
ranks=${2:-16384}
base=${BASE:-/tmp/base}
base_target=${BASE_TARGET:-/tmp/base-target}
work=target/bench-verdict

if [ ! -d "$base" ]; then
    git worktree add -f "$base" 91802c5 >/dev/null
fi
examples=(--example gen_payloads --example gen_node_digests --example merge_nodes)
cargo build --release -q -p rankscope-cli
cargo build --release -q -p rankscope-coordinator "${examples[@]}"
(cd "$base" && CARGO_TARGET_DIR=$base_target cargo build --release -q -p rankscope-cli &&
    CARGO_TARGET_DIR=$base_target cargo build --release -q -p rankscope-coordinator "${examples[@]}")
rm -rf "$work"
mkdir -p "$work"


# Runs the "before" and "after" commands RUNS times each, in turn; prints
# the medians: before s, before KiB, after s, after KiB.
turns() {
    local before=$1 after=$2 b_walls=() b_peaks=() a_walls=() a_peaks=() wall peak
    for _ in $(seq "$runs"); do
        /usr/bin/time -f '%e %M' -o "$work/time" bash -c "$before" >/dev/null
        read -r wall peak <"$work/time"
        b_walls+=("$wall") b_peaks+=("$peak")
        /usr/bin/time -f '%e %M' -o "$work/time" bash -c "$after" >/dev/null
        read -r wall peak <"$work/time"
        a_walls+=("$wall") a_peaks+=("$peak")
    done
    echo "$(printf '%s\n' "${b_walls[@]}" | median) $(printf '%s\n' "${b_peaks[@]}" | median)" \
        "$(printf '%s\n' "${a_walls[@]}" | median) $(printf '%s\n' "${a_peaks[@]}" | median)"
}

row() {
    awk -v n="$1" -v bs="$2" -v bk="$3" -v as="$4" -v ak="$5" 'BEGIN {
        printf "| %s | %.2f | %.0f | %.2f | %.0f | %+.1f%% | %+.1f%% |\n",
            n, bs, bk / 1024, as, ak / 1024, (as / bs - 1) * 100, (ak / bk - 1) * 100 }'
}

printf '| %s ranks | before s | before MiB | after s | after MiB | time | memory |\n' "$ranks"
printf '|---|---|---|---|---|---|---|\n'
for collectives in "" --collectives; do
    spill=$work/spill$collectives
    target/release/examples/gen_payloads "$spill" "$ranks" $collectives
    read -r bs bk as ak < <(turns \
        "$base_target/release/rankscope aggregate --reports-dir $spill --output $work/before --report-only" \
        "target/release/rankscope aggregate --reports-dir $spill --output $work/after --report-only")
    row "one level${collectives:+, a collective per step}" "$bs" "$bk" "$as" "$ak"
    rm -rf "$spill"
done
"$base_target/release/examples/gen_node_digests" "$work/nodes-before" "$ranks" 8 >/dev/null
target/release/examples/gen_node_digests "$work/nodes-after" "$ranks" 8 >/dev/null
read -r bs bk as ak < <(turns \
    "$base_target/release/examples/merge_nodes $work/nodes-before" \
    "target/release/examples/merge_nodes $work/nodes-after")
row "two levels (rank 0's merge)" "$bs" "$bk" "$as" "$ak"
rm -rf "$work"
