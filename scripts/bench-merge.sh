#!/usr/bin/env bash
# Rank 0's cost in a two-level gather at 1,024, 4,096 and 16,384 ranks,
# 8 ranks to a node, against today's one level on the same ranks in the same
# run. The two-level side: coordinator/examples/gen_node_digests.rs builds
# each node's digest as its leader would (and prints a leader's time for its
# 8 ranks), and coordinator/examples/merge_nodes.rs is rank 0: every node
# digest read, decoded and merged, the job analysed (`merge`), then with the
# report files written (`with files`: report.json, report.html, summary.txt,
# stages.csv). The one-level side: `rankscope aggregate --report-only` over
# the spill files of the same ranks (coordinator/examples/gen_payloads.rs:
# the same payloads), which writes the same files. Wall time is the median
# of RUNS; peak memory is the process's maximum resident set.
#
# usage: scripts/bench-merge.sh [RUNS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
runs=${1:-3}
work=target/bench-merge

cargo build --release -q -p rankscope-cli
cargo build --release -q -p rankscope-coordinator --example gen_payloads \
    --example gen_node_digests --example merge_nodes
mkdir -p "$work"


# The median wall time and peak resident memory (KiB) of RUNS runs of the
# command given.
measure() {
    local walls=() peaks=() wall peak
    for _ in $(seq "$runs"); do
        /usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null
        read -r wall peak <"$work/time"
        walls+=("$wall") peaks+=("$peak")
    done
    echo "$(printf '%s\n' "${walls[@]}" | median) $(printf '%s\n' "${peaks[@]}" | median)"
}

printf '| ranks | nodes | node digests MB | leader (8 ranks) median ms | two-level merge s | peak MiB | with files s | peak MiB | one level s | peak MiB | one level / two level |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
for ranks in 1024 4096 16384; do
    dir=$work/$ranks
    rm -rf "$dir"
    leader_ms=$(target/release/examples/gen_node_digests "$dir/nodes" "$ranks" 8 |
        sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
    target/release/examples/gen_payloads "$dir/spill" "$ranks"
    digests=$(find "$dir/nodes" -name '*.rsnd' -printf '%s\n' | awk '{ s += $1 } END { print s }')
    read -r merge merge_kb < <(measure target/release/examples/merge_nodes "$dir/nodes")
    read -r files files_kb < <(measure target/release/examples/merge_nodes "$dir/nodes" \
        --write "$dir/two-level")
    read -r one one_kb < <(measure target/release/rankscope aggregate --reports-dir "$dir/spill" \
        --output "$dir/one-level" --report-only)
    awk -v r="$ranks" -v d="$digests" -v l="$leader_ms" -v m="$merge" -v mk="$merge_kb" \
        -v f="$files" -v fk="$files_kb" -v o="$one" -v ok="$one_kb" \
        'BEGIN { printf "| %d | %d | %.1f | %s | %.2f | %.0f | %.2f | %.0f | %.2f | %.0f | %.1f× |\n",
                 r, r / 8, d / 1e6, l, m, mk / 1024, f, fk / 1024, o, ok / 1024, o / f }'
    rm -rf "$dir"
done
