#!/usr/bin/env bash
# The Python function tracing tests on CPython 3.12 (sys.monitoring), where
# pyenv has it: CI's machine has CPython 3.11 alone (the C profile hook),
# so this runs by hand. Uses the package the test environment holds (run
# scripts/test.sh, or `pip install ./python` there, first), by PYTHONPATH.
#
# usage: scripts/test-python312.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python312=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 | tail -n 1)
venv=target/py312-venv
[ -x "$venv/bin/python" ] || "$python312" -m venv "$venv"
"$venv/bin/python" -c 'import pytest, pyarrow' >/dev/null 2>&1 || "$venv/bin/pip" install -q pytest pyarrow
site=target/py312-site
rm -rf "$site" && mkdir -p "$site"
cp -r "$(target/test-venv/bin/python -c 'import os, rankscope; print(os.path.dirname(rankscope.__file__))')" "$site/"
PYTHONPATH="$PWD/$site" "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests/test_python_tracing.py
