#!/usr/bin/env bash
# The Python package's stage cost (scripts/bench_python_stage.py) on the
# package as `pip install ./python` builds it (Cargo.toml's wheel profile),
# in the test environment (torch there gives record_function to compare
# with).
#
# usage: scripts/bench-python.sh [ITERATIONS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
install_wheel_in_test_venv
"$venv/bin/python" scripts/bench_python_stage.py "$@"
