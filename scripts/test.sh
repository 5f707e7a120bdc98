#!/usr/bin/env bash
# Runs every check and test of the workspace, after installing what they need.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
# pyarrow, for the test that reads raw/ as a Python user would: in a virtual
# environment under target/ (the tests find it there).
venv=target/test-venv
if ! "$venv/bin/python" -c 'import pyarrow' >/dev/null 2>&1; then
    echo "== python3 -m venv $venv; pip install pyarrow"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q pyarrow
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
# The agent without the coordinator (a rank that only gathers) still builds.
cargo clippy -p rankscope --no-default-features --locked -- -D warnings
# With the MPI transport (real Open MPI, installed by setup.sh).
MPI_FEATURES=rankscope/mpi,rankscope-tests/mpi,rankscope-cli/mpi
cargo clippy -p rankscope -p rankscope-tests -p rankscope-cli --features "$MPI_FEATURES" \
    --all-targets --locked -- -D warnings
echo "== cargo test"
mkdir -p target
log=target/test-output.log
set +e
cargo test --workspace --locked 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "== cargo test, MPI transport under real mpirun"
# Open MPI refuses root unless told; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo test -p rankscope-tests -p rankscope-cli --features "$MPI_FEATURES" --locked \
    --test mpi --test mpi_demo 2>&1 | tee -a "$log"
mpi_status=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || status=$mpi_status
set -e
# One closing line for the whole run: cargo's last line is whichever test
# binary happened to run last.
passed=$(grep -Eo '^test result: .* ([0-9]+) passed' "$log" | grep -Eo '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -Eo '^test result: .* ([0-9]+) failed' "$log" | grep -Eo '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')
echo "tests: ${passed} passed, ${failed} failed"
exit "$status"
