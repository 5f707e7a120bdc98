#!/usr/bin/env bash
# Python function tracing's cost against VizTracer's, in the same run
# (scripts/bench_python_tracing.py), on the package as `pip install
# ./python` builds it (Cargo.toml's wheel profile): in the test environment
# (CPython 3.11: the C profile hook; torch there for the torch program),
# then, where pyenv has CPython 3.12, in a venv of its own beside it
# (sys.monitoring; the same build, by PYTHONPATH; no torch).
#
# usage: scripts/bench-python-tracing.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
install_wheel_in_test_venv
"$venv/bin/python" -c 'import viztracer' >/dev/null 2>&1 || "$venv/bin/pip" install -q viztracer
run() {
    "$1" -c 'import sys, viztracer; print("## Python", sys.version.split()[0], "· viztracer", viztracer.__version__)'
    "$1" scripts/bench_python_tracing.py "${@:2}"
}
run "$venv/bin/python" "$@"
# pyenv's shim answers only where the version is selected: its own path.
python312=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | tail -n 1 || true)
if [ -n "$python312" ]; then
    venv312=target/py312-venv
    [ -x "$venv312/bin/python" ] || "$python312" -m venv "$venv312"
    "$venv312/bin/python" -c 'import viztracer' >/dev/null 2>&1 || "$venv312/bin/pip" install -q viztracer
    site=target/py312-site
    rm -rf "$site" && mkdir -p "$site"
    cp -r "$("$venv/bin/python" -c 'import os, rankscope; print(os.path.dirname(rankscope.__file__))')" "$site/"
    PYTHONPATH="$PWD/$site" run "$venv312/bin/python" "$@"
else
    echo "## no CPython 3.12 here: sys.monitoring not measured"
fi
