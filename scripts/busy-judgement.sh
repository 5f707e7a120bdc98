#!/usr/bin/env bash
# The judgement's known-answer tests on a loaded machine: two busy loops
# per core beside them, RUNS times each, and how often each passed. The
# tests: the Rust lockstep jobs at a real barrier (tests/tests/judgement.rs),
# the generated known-answer jobs and the real H200 run (the time account),
# the demo's report and page (cli/tests/demo.rs, cli/tests/html.rs), and
# the Python jobs over real gloo collectives (python/tests, the verdict's
# and torch.profiler windows' tests). Run scripts/test.sh once first (it
# builds what these need and installs the test venv).
#
# usage: scripts/busy-judgement.sh [RUNS]   (default 3)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
venv=target/test-venv
cargo build -q --workspace --all-targets || exit 1

loops=()
for _ in $(seq $(( $(nproc) * 2 ))); do
    ( while :; do :; done ) &
    loops+=("$!")
done
trap 'kill "${loops[@]}" 2>/dev/null' EXIT
echo "busy loops: ${#loops[@]} on $(nproc) cores"

# name | command
tests=(
    "rust lockstep jobs|cargo test -q -p rankscope-tests --test judgement"
    "generated jobs and the real H200 run|cargo test -q -p rankscope-coordinator --test judgement --test fixtures"
    "demo report|cargo test -q -p rankscope-cli --test demo four_ranks_with_a_straggler"
    "demo page|cargo test -q -p rankscope-cli --test html the_demo_report_opens_offline"
    "python cp jobs|$venv/bin/python -m pytest -q -p no:cacheprovider python/tests/test_multiprocess.py -k verdict_names_the_rank_the_others_wait_for or balanced_real_job or communication_bound or tiny_operators"
    "python torch.profiler windows|$venv/bin/python -m pytest -q -p no:cacheprovider python/tests/test_multiprocess.py -k slow_op_and_the_wait"
)
printf '| test | passed | of |\n|---|---|---|\n' >target/busy-judgement.md
for entry in "${tests[@]}"; do
    name=${entry%%|*}
    command=${entry#*|}
    passed=0
    for run in $(seq "$runs"); do
        if [[ $command == *pytest* ]]; then
            # -k takes its expression as one argument.
            expression=${command#*-k }
            ${command%% -k *} -k "$expression" >"target/busy-$run.log" 2>&1
        else
            $command >"target/busy-$run.log" 2>&1
        fi
        if [ $? -eq 0 ]; then
            passed=$((passed + 1))
        else
            echo "$name: run $run failed (target/busy-$name-$run.log)"
            cp "target/busy-$run.log" "target/busy-$name-$run.log"
        fi
    done
    echo "$name: $passed of $runs"
    printf '| %s | %d | %d |\n' "$name" "$passed" "$runs" >>target/busy-judgement.md
done
cat target/busy-judgement.md
