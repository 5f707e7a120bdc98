#!/usr/bin/env bash
# The report at 1,024, 4,096 and 16,384 ranks: its files' sizes and the
# page's time to render in headless Chromium (cli/benches/html_render.rs:
# navigation until every chart has drawn, the best of three loads).
# Synthetic ranks from coordinator/examples/gen_payloads.rs (2,000 stages,
# 300 GPU and 150 host readings each, 8 ranks a host), aggregated with
# `rankscope aggregate --report-only` (release build). With AGGREGATE_WITH
# set, that binary aggregates instead (an earlier build, to compare).
#
# usage: scripts/bench-html.sh [RANKS...]   (default 1024 4096 16384)
set -euo pipefail
cd "$(dirname "$0")/.."
work=target/bench-html
cargo build --release -q -p rankscope-cli
cargo build --release -q -p rankscope-coordinator --example gen_payloads
cargo bench -q -p rankscope-cli --bench html_render --no-run 2>/dev/null
rankscope=${AGGREGATE_WITH:-target/release/rankscope}
mkdir -p "$work"
printf '| ranks | summary.txt | report.json | report.html | render s |\n|---|---|---|---|---|\n'
for ranks in "${@:-1024 4096 16384}"; do
    for n in $ranks; do
        dir="$work/ranks-$n"
        if [ ! -d "$dir" ]; then
            target/release/examples/gen_payloads "$dir" "$n" >/dev/null
        fi
        rm -f "$dir"/report.* "$dir"/summary.txt "$dir"/stages.csv
        "$rankscope" aggregate --report-only --reports-dir "$dir" >/dev/null
        render=$(cargo bench -q -p rankscope-cli --bench html_render -- "$PWD/$dir/report.html" | cut -f2)
        size() { du -h --apparent-size "$dir/$1" | cut -f1; }
        printf '| %s | %s lines, %s | %s | %s | %s |\n' "$n" "$(wc -l <"$dir/summary.txt")" \
            "$(size summary.txt)" "$(size report.json)" "$(size report.html)" "$render"
    done
done
