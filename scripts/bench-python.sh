#!/usr/bin/env bash
# The Python package's stage cost (scripts/bench_python_stage.py) on the
# package as `pip install ./python` builds it (Cargo.toml's wheel profile),
# in the test environment (torch there gives record_function to compare
# with).
#
# usage: scripts/bench-python.sh [ITERATIONS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/test-venv
if ! "$venv/bin/python" -c 'import maturin, torch' >/dev/null 2>&1; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q maturin torch numpy
fi
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/pip" install -q --no-build-isolation --no-deps \
    --force-reinstall ./python
"$venv/bin/python" scripts/bench_python_stage.py "$@"
