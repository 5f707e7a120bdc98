#!/usr/bin/env bash
# `rankscope import` against Holistic Trace Analysis (HTA: TraceAnalysis,
# then the temporal breakdown, the communication/computation overlap and
# the kernel breakdown; scripts/hta_figures.py), on the same traces in the
# same run:
#   - 2 ranks of a real trace (tests/data/kineto/hta-sampled, HTA's own);
#   - 8 and 64 ranks of large traces, at least 100 MB of JSON per rank,
#     made by repeating the real trace's steps on a shifted clock
#     (scripts/make_large_traces.py).
# Wall time is the median of RUNS (1 for the large sets); peak memory is
# the whole process tree's (scripts/peak_rss.py: HTA parses in a pool of
# processes). HTA at 64 ranks is skipped unless HTA64=1 (it needs more
# memory than this 2-core, 24 GiB machine has to spare). Then the cost of
# one window's reduction on a rank: a 100 MB trace read into a running
# session (agent/examples/kernel_window.rs, the call the Python package
# makes when a window closes), median of RUNS.
#
# usage: scripts/bench-import.sh [RUNS]   (default 3; needs target/test-venv
# from scripts/test.sh, with HolisticTraceAnalysis and the rankscope package)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
runs=${1:-3}
work=target/bench-import
venv=target/test-venv
python=$venv/bin/python
cargo build --release -q -p rankscope-cli
mkdir -p "$work"

# The median wall time and peak of N runs of a command.
measure() {
    local n=$1; shift
    local walls=() peaks=() wall peak
    for _ in $(seq "$n"); do
        read -r wall peak < <("$python" scripts/peak_rss.py "$@")
        walls+=("$wall") peaks+=("$peak")
    done
    echo "$(printf '%s\n' "${walls[@]}" | median) $(printf '%s\n' "${peaks[@]}" | median)"
}
row() {
    local ranks=$1 dir=$2 n=$3 hta=$4
    local mb wall peak hwall hpeak
    mb=$(du -sm --apparent-size "$dir" | cut -f1)
    read -r wall peak < <(measure "$n" target/release/rankscope import "$dir" --out "$work/out")
    if [ "$hta" = 1 ]; then
        read -r hwall hpeak < <(measure "$n" "$python" scripts/hta_figures.py "$dir")
        awk -v r="$ranks" -v m="$mb" -v w="$wall" -v p="$peak" -v hw="$hwall" -v hp="$hpeak" \
            'BEGIN { printf "| %d | %d | %.2f | %.0f | %.2f | %.0f | %.0fx | %.0fx |\n",
                     r, m, w, p / 1024, hw, hp / 1024, hw / w, hp / p }'
    else
        awk -v r="$ranks" -v m="$mb" -v w="$wall" -v p="$peak" \
            'BEGIN { printf "| %d | %d | %.2f | %.0f | not run | not run | | |\n", r, m, w, p / 1024 }'
    fi
}

printf '| ranks | JSON MB | rankscope s | rankscope peak MiB | HTA s | HTA peak MiB | time HTA / rankscope | memory HTA / rankscope |\n'
printf '|---|---|---|---|---|---|---|---|\n'
row 2 tests/data/kineto/hta-sampled "$runs" 1
for ranks in 8 64; do
    dir=$work/$ranks
    if [ ! -f "$dir/rank-$((ranks - 1)).json" ]; then
        rm -rf "$dir"
        "$python" scripts/make_large_traces.py tests/data/kineto/hta-sampled "$dir" --ranks "$ranks" --mb 100
    fi
    hta=1
    [ "$ranks" -lt 64 ] || [ "${HTA64:-0}" = 1 ] || hta=0
    row "$ranks" "$dir" 1 "$hta"
done

# A 100 MB trace stamped an hour from now: inside any session this script
# starts, so that its rows are kept, not counted as before the session.
window=$work/window
rm -rf "$window"
"$python" scripts/make_large_traces.py tests/data/kineto/hta-sampled "$window" --ranks 1 --mb 100 \
    --start-us "$(( ($(date +%s) + 3600) * 1000000 ))"
echo
echo "One window's reduction on a rank (Profiler::add_kernel_trace, what the Python package calls):"
cargo run --release -q -p rankscope --example kernel_window -- "$window/rank-0.json" "$runs"
