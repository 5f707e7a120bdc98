#!/usr/bin/env bash
# On a machine with a CUDA GPU and torch: the verdict on a real job, as a
# new user meets it (issue 33). examples/python/cp_attention.py as 4
# torchrun ranks sharing the GPU, all_gather over gloo on CUDA tensors,
# torch.profiler windows on CUDA set by variables, every rank's first step
# slower; once with rank 3 holding 3x the query chunk, once balanced.
# scripts/gpu_check_verdict.py then checks each report: the slow job's
# verdict names rank 3, `attention`, the all_gather and a slower kernel; the
# balanced job's blames no rank; the torch.profiler windows' starts inside
# the steps are short (the package set the profiler up before the first
# step), and the profiler's own time is in the overhead and the events;
# each report's time account (the job's and each rank's, with its GPU
# split) is printed, and checked to add up with the findings' costs within
# it. Prints what it found; exits 1 on a failed check.
#
# usage: scripts/gpu-check-verdict.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/gpu-check-verdict}
source scripts/gpu-python-setup.sh gpu-check-verdict
rm -rf "$out"
export RANKSCOPE_TORCH_PROFILER_WAIT=2 RANKSCOPE_TORCH_PROFILER_WARMUP=1
export RANKSCOPE_TORCH_PROFILER_ACTIVE=3 RANKSCOPE_TORCH_PROFILER_ACTIVITIES=cpu,cuda
run() {
    local name=$1
    shift
    echo "== $name: torchrun --nproc_per_node=4 examples/python/cp_attention.py $*"
    "$python" -m torch.distributed.run --standalone --nproc_per_node=4 \
        examples/python/cp_attention.py --backend gloo --tokens 2048 --dim 256 \
        --warmup-ms 300 --output-dir "$out/$name" "$@" >"$out/$name.log" 2>&1 ||
        { tail -n 40 "$out/$name.log"; return 1; }
}
mkdir -p "$out"
status=0
run slow --slow-rank 3 --factor 3 || status=1
run balanced || status=1
"$python" scripts/gpu_check_verdict.py "$out" || status=1
exit "$status"
