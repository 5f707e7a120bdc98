#!/usr/bin/env bash
# Runs every check and test of the workspace, after installing what they need.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
# A virtual environment under target/ (the tests find it there): pyarrow for
# the tests that read raw/ as a Python user would; maturin, pytest, mypy and
# torch (the CPU path runs torchrun and gloo) for the Python package;
# HolisticTraceAnalysis, whose figures `rankscope import` must agree with;
# viztracer, whose traces `rankscope import` reads and whose cost its
# Python tracing is measured against.
venv=target/test-venv
python_packages=(pyarrow numpy torch maturin pytest mypy HolisticTraceAnalysis viztracer)
if ! "$venv/bin/python" -c 'import pyarrow, numpy, torch, maturin, pytest, mypy, hta, viztracer' >/dev/null 2>&1; then
    echo "== python3 -m venv $venv; pip install ${python_packages[*]}"
    # PyPI's torch for Linux brings CUDA's libraries (about 6 GB installed):
    # say how much room there is, so a full disk reads as what it is.
    df -h . | tail -n 1 | awk '{print "   free space here: " $4}'
    python3 -m venv "$venv"
    # No pip cache: nothing is kept outside the checkout, and a second copy
    # of every wheel would double the space the install needs.
    "$venv/bin/pip" install -q --no-cache-dir "${python_packages[@]}"
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
echo "== cargo doc (warnings are errors: broken or private links)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked
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
echo "== Miri: the MPI send buffer, the event log and a payload's round trip (scripts/miri.sh)"
scripts/miri.sh 2>&1 | tee -a "$log"
miri_status=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || status=$miri_status
echo "== Python package: pip install ./python, stub and type checks, pytest"
# The rankscope CLI that the launch test runs (cargo test built it already).
python_status=0
cargo build -p rankscope-cli --locked || python_status=1
# The dev profile shares the dependencies cargo test just built.
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/pip" install -q --no-build-isolation --no-deps \
    --force-reinstall --config-settings=build-args=--profile=dev ./python || python_status=1
# A wheel with the MPI transport, for the test under mpirun.
rm -rf target/python-mpi
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/pip" wheel -q --no-build-isolation --no-deps \
    -w target/python-mpi --config-settings=build-args="--features mpi --profile=dev" ./python \
    || python_status=1
"$venv/bin/python" -m mypy.stubtest rankscope --allowlist python/stubtest-allowlist.txt \
    || python_status=1
"$venv/bin/python" -m mypy --strict python/rankscope examples/python || python_status=1
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests 2>&1 | tee target/pytest-output.log
[ "${PIPESTATUS[0]}" -eq 0 ] || python_status=1
[ "$status" -ne 0 ] || status=$python_status
set -e
# One closing line for the whole run: cargo's last line is whichever test
# binary happened to run last.
passed=$(grep -Eo '^test result: .* ([0-9]+) passed' "$log" | grep -Eo '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -Eo '^test result: .* ([0-9]+) failed' "$log" | grep -Eo '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')
# pytest's closing line: "N passed, M failed, K errors in S s".
pytest_count() {
    tail -n 1 target/pytest-output.log |
        awk -v word="$1" '{ for (i = 2; i <= NF; i++) if ($i ~ "^" word) s += $(i - 1) } END { print s + 0 }'
}
passed=$((passed + $(pytest_count passed)))
failed=$((failed + $(pytest_count failed) + $(pytest_count error)))
echo "tests: ${passed} passed, ${failed} failed"
exit "$status"
