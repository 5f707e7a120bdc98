#!/usr/bin/env bash
# Windows of a running job: the time from `rankscope trigger --wait` to the
# window's report at 4, 16 and 64 ranks on this machine, under `rankscope
# launch` (real rank processes gathering over TCP; the window through the
# session directory). Each rank runs steps of about 10 ms (the workspace
# tests' rank program, tests/src/bin/agent_only_rank.rs); the window covers
# 10 steps after rank 0's lead of 2. Shown: the trigger's wall time, the
# window's own length (report.json's window.duration_s), and the rest —
# planning, the last rank's write, rank 0's gather and report. The median of
# RUNS triggers per size, one job per size; in the same job, in turn, the
# same trigger sent to rank 0's TCP listener (`rankscope trigger ENDPOINT`,
# the job's token in RANKSCOPE_TOKEN) instead of the control folder; and
# in a second job, each rank writing under a folder of its own, so that
# the plans and window payloads travel over rank 0's listener.
#
# usage: scripts/bench-windows.sh [RUNS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
runs=${1:-3}
cargo build --release -q -p rankscope-cli -p rankscope-tests --bin rankscope --bin agent_only_rank
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT


export RANKSCOPE_TOKEN="bench-windows-$$-$RANDOM"

# One job of `ranks` ranks; with layout `apart`, each rank writes under a
# folder of its own (as on nodes without a shared file system: the window
# files travel over rank 0's listener). Prints the job's pid; rank 0's
# session directory is then under "$out/0" (apart) or "$out".
start_job() {
    local ranks=$1 layout=$2 out=$3 master_port=$4
    local rank_program=(target/release/agent_only_rank --steps 1000000)
    if [ "$layout" = apart ]; then
        # RANK is set by `rankscope launch` for each rank.
        rank_program=(sh -c 'RANKSCOPE_OUTPUT_DIR="$0/$RANK" exec "$@"' "$out" "${rank_program[@]}")
    fi
    RANKSCOPE_OUTPUT_DIR="$out" RANKSCOPE_GPU_SOURCE=none RANKSCOPE_COLLECT_HOST=false \
        target/release/rankscope launch -n "$ranks" --master-port "$master_port" -- \
        "${rank_program[@]}" >"$out.log" 2>&1 &
    echo $!
}

printf '| ranks | trigger to report s | window open s | the rest s | over the endpoint: trigger to report s | the rest s | ranks apart (files over TCP): trigger to report s | the rest s |\n|---|---|---|---|---|---|---|---|\n'
for ranks in 4 16 64; do
    row="| $ranks"
    for layout in shared apart; do
        out="$work/$ranks-$layout"
        mkdir -p "$out"
        master_port=$(free_port)
        endpoint="127.0.0.1:$((master_port + 1))"
        job=$(start_job "$ranks" "$layout" "$out" "$master_port")
        home="$out"
        [ "$layout" = apart ] && home="$out/0"
        dir=""
        while [ -z "$dir" ]; do
            sleep 0.2
            dir=$(find "$home" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | head -n 1)
        done
        # Every rank in its session: rank 0 answers only once its own started.
        sleep 2
        ways=(dir endpoint)
        [ "$layout" = apart ] && ways=(dir)
        for way in "${ways[@]}"; do
            : >"$work/totals-$way" && : >"$work/opens-$way" && : >"$work/rests-$way"
        done
        for run in $(seq "$runs"); do
            for way in "${ways[@]}"; do
                case $way in
                    dir) target=(--dir "$dir") ;;
                    endpoint) target=("$endpoint") ;;
                esac
                started=$(date +%s.%N)
                printed=$(target/release/rankscope trigger "${target[@]}" --steps 10 --wait --timeout 120)
                ended=$(date +%s.%N)
                report="$(echo "$printed" | tail -n 1)/report.json"
                read -r open reporting < <(python3 -c "import json,sys; r = json.load(open(sys.argv[1])); print(r['window']['duration_s'], len(r['session']['ranks_reporting']))" "$report")
                [ "$reporting" = "$ranks" ] || echo "window of $ranks ranks ($layout, $way): $reporting reporting" >&2
                total=$(echo "$ended - $started" | bc -l)
                echo "$total" >>"$work/totals-$way"
                echo "$open" >>"$work/opens-$way"
                echo "$total - $open" | bc -l >>"$work/rests-$way"
                # The report is written; the next request waits for nothing.
                sleep 0.5
            done
        done
        kill -TERM "$job" 2>/dev/null || true
        wait "$job" 2>/dev/null || true
        if [ "$layout" = shared ]; then
            row="$row | $(printf '%.2f | %.2f | %.2f | %.2f | %.2f' \
                "$(median <"$work/totals-dir")" "$(median <"$work/opens-dir")" "$(median <"$work/rests-dir")" \
                "$(median <"$work/totals-endpoint")" "$(median <"$work/rests-endpoint")")"
        else
            row="$row | $(printf '%.2f | %.2f' "$(median <"$work/totals-dir")" "$(median <"$work/rests-dir")")"
        fi
    done
    echo "$row |"
done
