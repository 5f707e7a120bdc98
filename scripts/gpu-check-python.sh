#!/usr/bin/env bash
# On a machine with a CUDA GPU and torch: the Python package on real CUDA
# tensors (scripts/gpu_check_python.py: CUDA-event stage times against the
# work's own, sync mode, the GPU sampled = torch's, allocator snapshots, the
# cost of events), then the example pipeline under torchrun with 2 ranks on
# the GPU, then torch.profiler windows on real kernels
# (scripts/gpu_check_kernels.py, whose kept traces land in OUT_DIR/kernels). The package is installed from the wheel $WHEEL when set
# (a machine without Rust), else built from python/ with pip (needs cargo).
#
# usage: scripts/gpu-check-python.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/gpu-check-python}
source scripts/gpu-python-setup.sh gpu-check-python
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L
status=0
"$python" scripts/gpu_check_python.py "$out" || status=1
echo "== torchrun --nproc_per_node=2 examples/python/tp_pipeline.py (one GPU, shared)"
"$python" -m torch.distributed.run --standalone --nproc_per_node=2 \
    examples/python/tp_pipeline.py --output-dir "$out/torchrun" --straggler 1 || status=1
"$python" scripts/gpu_check_kernels.py "$out/kernels" || status=1
exit "$status"
