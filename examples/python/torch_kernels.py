"""A tensor-parallel step loop in real torch, with torch.profiler windows
on every rank driven by rankscope (no torch.profiler code here).

Each step runs ``attention`` (matrix products, then a ``load_kv``
operation: a ``record_function`` span around a wait standing for a cache
fetch) and an ``all_reduce`` across the ranks over gloo (NCCL when the
ranks use CUDA GPUs); on one rank (``--straggler``) ``load_kv`` takes four
times as long, so the others wait for it in the all-reduce. Set the windows with the
``RANKSCOPE_TORCH_PROFILER_*`` variables:

    RANKSCOPE_TORCH_PROFILER_ACTIVE=3 torchrun --nproc_per_node=4 examples/python/torch_kernels.py

Rank 0's report then has each rank's CPU operators (and, on GPUs, kernels
and GPU time), the collectives split into waiting and the rest, and the
straggler named with its slow operator.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist

import rankscope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--straggler", type=int, default=2, help="the slow rank (-1: none)")
    parser.add_argument("--size", type=int, default=128, help="matrix size")
    parser.add_argument("--products", type=int, default=4, help="products per step")
    parser.add_argument("--load-ms", type=float, default=20.0, help="load_kv's wait (the straggler's: 4x)")
    parser.add_argument("--backend", help="torch.distributed's backend (default: nccl with CUDA, else gloo)")
    parser.add_argument("--output-dir", default=os.environ.get("RANKSCOPE_OUTPUT_DIR", "profiling_reports"))
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group(args.backend or ("nccl" if cuda else "gloo"))
    rank = dist.get_rank()
    # Ranks share the GPUs there are (gloo runs on CUDA tensors; NCCL needs one GPU per rank).
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(rank)
    x = torch.randn(args.size, args.size, device=device)
    load_s = args.load_ms / 1000 * (4 if rank == args.straggler else 1)

    prof = rankscope.Profiler(rankscope.Config.from_env().replace(output_dir=args.output_dir))
    with prof.session("torch-kernels", tags={"parallel": "tp"}):
        for _ in range(args.steps):
            with prof.stage("attention"):
                y = x
                for _ in range(args.products):
                    y = torch.tanh(y @ x) * 0.5
                with torch.profiler.record_function("load_kv"):
                    time.sleep(load_s)
            with prof.stage("all_reduce"):
                dist.all_reduce(y)
                if cuda:
                    torch.cuda.synchronize()
            prof.step()
    dist.destroy_process_group()
    if rank == 0 and prof.get_summary():
        print(prof.get_summary())


if __name__ == "__main__":
    main()
