#!/usr/bin/env bash
# Aggregation at scale: `rankscope aggregate` over synthetic jobs of 64, 256
# and 1024 ranks (coordinator/examples/gen_payloads.rs: 30 stage names,
# 2,000 stages, 100 diffusion steps, 10 events, 300 GPU and 150 host
# readings per rank), against DuckDB
# computing the per-stage statistics from the same stage rows read from CSV
# and from Parquet. `aggregate --report-only` (the statistics and the files
# rendered from them) is what compares with DuckDB's query; `aggregate`
# with all files adds the second pass that writes trace.json.gz and raw/.
# Wall time is the median of RUNS; peak memory is the process's maximum
# resident set.
#
# usage: scripts/bench-aggregate.sh [RUNS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
runs=${1:-3}
work=target/bench-aggregate
venv=target/bench-venv

cargo build --release -q -p rankscope-cli
cargo build --release -q -p rankscope-coordinator --example gen_payloads
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q duckdb pyarrow
fi


printf '| ranks | payload MB | report only s | peak MiB | peak / payload | all files s | peak MiB | peak / payload | DuckDB CSV s | DuckDB Parquet s | report only / Parquet |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
# The median wall time and peak resident memory of RUNS aggregations of
# $dir with the extra arguments given.
measure() {
    local walls=() peaks=() wall peak
    for _ in $(seq "$runs"); do
        rm -rf "$dir/out"
        /usr/bin/time -f '%e %M' -o "$work/time" \
            target/release/rankscope aggregate --reports-dir "$dir" --output "$dir/out" "$@" >/dev/null
        read -r wall peak <"$work/time"
        walls+=("$wall") peaks+=("$peak")
    done
    echo "$(printf '%s\n' "${walls[@]}" | median) $(printf '%s\n' "${peaks[@]}" | median)"
}
for ranks in 64 256 1024; do
    dir=$work/$ranks
    rm -rf "$dir"
    target/release/examples/gen_payloads "$dir" "$ranks"
    "$venv/bin/python" -c "
import pyarrow.csv, pyarrow.parquet
pyarrow.parquet.write_table(pyarrow.csv.read_csv('$dir/stage_rows.csv'), '$dir/stages.parquet')"
    payload=$(find "$dir" -name '*.rsp' -printf '%s\n' | awk '{ s += $1 } END { print s }')
    read -r wall peak_kb < <(measure --report-only)
    read -r all_wall all_peak_kb < <(measure)
    read -r _ duck_csv _ duck_parquet _ _ < <("$venv/bin/python" scripts/bench_duckdb.py \
        "$dir/stage_rows.csv" "$dir/stages.parquet" "$runs")
    awk -v r="$ranks" -v p="$payload" -v w="$wall" -v k="$peak_kb" -v aw="$all_wall" \
        -v ak="$all_peak_kb" -v c="$duck_csv" -v q="$duck_parquet" \
        'BEGIN { printf "| %d | %.1f | %.2f | %.0f | %.2f | %.2f | %.0f | %.2f | %.3f | %.3f | %.1f |\n",
                 r, p / 1e6, w, k / 1024, k * 1024 / p, aw, ak / 1024, ak * 1024 / p, c, q, w / q }'
done
