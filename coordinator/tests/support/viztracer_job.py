"""A two-rank torch.distributed (gloo) job traced by VizTracer on every rank,
for `rankscope import`: each step tokenizes (planted 4x slower on rank 1),
then all-reduces and meets at a barrier. Run under torchrun:
`viztracer_job.py OUT_DIR [--kineto]`.
Writes OUT_DIR/viztracer_rank<N>.json and, with --kineto, a torch.profiler
trace of the same steps, OUT_DIR/kineto_rank<N>.pt.trace.json."""

import os
import sys
import time

import torch
import torch.distributed as dist
from viztracer import VizTracer

STEPS = 12


def tokenize(rank: int) -> None:
    time.sleep(0.008 if rank == 1 else 0.002)


def step(rank: int) -> None:
    tokenize(rank)
    tensor = torch.ones(16)
    dist.all_reduce(tensor)
    dist.barrier()


def main() -> None:
    out = sys.argv[1]
    kineto = "--kineto" in sys.argv
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    tracer = VizTracer(
        output_file=os.path.join(out, f"viztracer_rank{rank}.json"),
        ignore_c_function=True,
        verbose=0,
    )
    profiler = (
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        if kineto
        else None
    )
    if profiler is not None:
        profiler.start()
    tracer.start()
    for _ in range(STEPS):
        step(rank)
    tracer.stop()
    if profiler is not None:
        profiler.stop()
        profiler.export_chrome_trace(os.path.join(out, f"kineto_rank{rank}.pt.trace.json"))
    tracer.save()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
