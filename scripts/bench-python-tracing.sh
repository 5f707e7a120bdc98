#!/usr/bin/env bash
# Python function tracing's cost against VizTracer's, in the same run
# (scripts/bench_python_tracing.py), on the package as `pip install
# ./python` builds it (Cargo.toml's wheel profile), in the test environment
# (torch there for the torch program), with VizTracer from PyPI.
#
# usage: scripts/bench-python-tracing.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/test-venv
if ! "$venv/bin/python" -c 'import maturin, torch' >/dev/null 2>&1; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q maturin torch numpy
fi
"$venv/bin/python" -c 'import viztracer' >/dev/null 2>&1 || "$venv/bin/pip" install -q viztracer
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/pip" install -q --no-build-isolation --no-deps \
    --force-reinstall ./python
"$venv/bin/python" --version
"$venv/bin/python" -c 'import viztracer; print("viztracer", viztracer.__version__)'
"$venv/bin/python" scripts/bench_python_tracing.py "$@"
