# Sourced by the GPU checks of the Python package (gpu-check-python.sh,
# gpu-check-verdict.sh) with the check's name as $1: sets $python
# (PYTHON, else python3), stops unless torch sees a CUDA GPU, and installs
# the package from the wheel $WHEEL when set (a machine without Rust), else
# builds it from python/ with pip (needs cargo).
python=${PYTHON:-python3}
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "$1: torch sees no CUDA GPU here" >&2
    exit 1
fi
if [ -n "${WHEEL:-}" ]; then
    site=$(mktemp -d)
    "$python" -m pip install -q --no-index --no-deps --target "$site" "$WHEEL"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
else
    "$python" -m pip install -q ./python
fi
