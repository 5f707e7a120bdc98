"""A context-parallel DiT step in real torch: each rank attends its chunk
of the query to the whole sequence, gathered from every rank with
``dist.all_gather`` (gloo on CPU; NCCL where each rank has a GPU).

Each step runs ``attention`` (the projections, then ``cp_all_gather``
around the all-gather, then the attention itself) and ``mlp``. A rank given
``--slow-rank`` holds ``--factor`` times the others' query chunk, so the
others wait for it in the all-gather; ``--stall-rank`` sleeps once in
``mlp`` at ``--stall-step``; ``--warmup-ms`` makes every rank's first step
longer, as a compile or a cache fill does; ``--gpu-ms`` has ``attention``
wait that long for its kernels each step (a sleep, on a machine without a
GPU; the slow rank's ``--factor`` times as long); ``--gather-mb`` gathers that
many more megabytes per rank in the all-gather (a communication-bound step);
``--tiny-ops`` runs that many tiny operators in a ``tiny_ops`` stage each step
(launch overhead: host work per operator), and ``--no-gather`` leaves the
all-gather out (each rank on its own). Run with torch.profiler windows
with the ``RANKSCOPE_TORCH_PROFILER_*`` variables:

    torchrun --nproc_per_node=4 examples/python/cp_attention.py --slow-rank 3

The report's verdict names the slow rank, `attention`, and the all-gather
it arrives last at; a balanced job's names no rank.
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
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=256, help="query tokens per rank")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--slow-rank", type=int, default=-1, help="the rank with a larger chunk")
    parser.add_argument("--factor", type=float, default=3.0, help="its chunk over the others'")
    parser.add_argument("--stall-rank", type=int, default=-1)
    parser.add_argument("--stall-step", type=int, default=7)
    parser.add_argument("--stall-ms", type=float, default=400.0)
    parser.add_argument("--warmup-ms", type=float, default=0.0)
    parser.add_argument("--gpu-ms", type=float, default=0.0,
                        help="attention's wait for its kernels per step (a sleep without a GPU)")
    parser.add_argument("--gather-mb", type=float, default=0.0,
                        help="more data each rank contributes to the all-gather, MB")
    parser.add_argument("--tiny-ops", type=int, default=0,
                        help="tiny operators a step in a `tiny_ops` stage")
    parser.add_argument("--no-gather", action="store_true", help="no all-gather: rank-local")
    parser.add_argument("--backend", help="default: nccl with CUDA, else gloo")
    parser.add_argument("--output-dir", default=os.environ.get("RANKSCOPE_OUTPUT_DIR", "profiling_reports"))
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group(args.backend or ("nccl" if cuda else "gloo"))
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        # One core a rank: ranks share the machine's cores fairly.
        torch.set_num_threads(1)
    torch.manual_seed(rank)
    factor = args.factor if rank == args.slow_rank else 1.0
    tokens = int(args.tokens * factor)
    kernels_s = args.gpu_ms / 1000 * factor
    x = torch.randn(tokens, args.dim, device=device)
    w_qkv = torch.randn(args.dim, 3 * args.dim, device=device) / args.dim**0.5
    w_mlp = torch.randn(args.dim, 4 * args.dim, device=device) / args.dim**0.5
    # Every rank contributes the same key/value chunk size to the gather.
    kv_tokens = args.tokens
    extra = torch.ones(int(args.gather_mb * 2**20 / 4), device=device) if args.gather_mb else None
    scalar = torch.zeros(1, device=device)

    prof = rankscope.Profiler(rankscope.Config.from_env().replace(output_dir=args.output_dir))
    with prof.session("cp-attention", tags={"parallel": f"cp{world}"}):
        for step in range(args.steps):
            with prof.stage("step"):
                with prof.stage("attention"):
                    if step == 0 and args.warmup_ms > 0:
                        time.sleep(args.warmup_ms / 1000)
                    qkv = x @ w_qkv
                    d = args.dim
                    q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
                    kv = torch.cat([k[:kv_tokens], v[:kv_tokens]], dim=1).contiguous()
                    if args.no_gather:
                        gathered = [kv] * world
                    else:
                        with prof.stage("cp_all_gather"):
                            gathered = [torch.empty_like(kv) for _ in range(world)]
                            dist.all_gather(gathered, kv)
                            if extra is not None:
                                dist.all_gather([torch.empty_like(extra) for _ in range(world)], extra)
                    all_kv = torch.cat(gathered)
                    keys, values = all_kv[:, :d], all_kv[:, d:]
                    for _ in range(8):
                        y = torch.softmax(q @ keys.T / d**0.5, dim=-1) @ values
                    if cuda:
                        torch.cuda.synchronize()
                    elif kernels_s > 0:
                        time.sleep(kernels_s)
                if args.tiny_ops:
                    with prof.stage("tiny_ops"):
                        for _ in range(args.tiny_ops):
                            scalar.add_(1.0)
                with prof.stage("mlp"):
                    if rank == args.stall_rank and step == args.stall_step:
                        time.sleep(args.stall_ms / 1000)
                    y = torch.relu(y @ w_mlp)
                    if cuda:
                        torch.cuda.synchronize()
            prof.step()
    dist.destroy_process_group()
    if rank == 0 and prof.get_summary():
        print(prof.get_summary())


if __name__ == "__main__":
    main()
