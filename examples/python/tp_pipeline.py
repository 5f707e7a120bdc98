"""A simulated tensor-parallel text-to-video pipeline, profiled by rankscope.

Every rank encodes the prompt, denoises the latents step by step (in
lockstep with the other ranks when torch.distributed can join them) and
decodes them; one rank (``--straggler``) decodes 40 % slower, and rank 0's
report names it.

    torchrun --nproc_per_node=4 examples/python/tp_pipeline.py
    mpirun -n 4 python examples/python/tp_pipeline.py
    rankscope launch -n 4 -- python examples/python/tp_pipeline.py

torch is optional: with it (and torchrun's variables) the ranks meet at a
gloo all-reduce after each step, as tensor-parallel ranks do, and a CUDA
GPU, if torch sees one, does the work; without it the work is simulated
with sleeps.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import rankscope


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="denoising steps")
    parser.add_argument("--blocks", type=int, default=2, help="blocks of frames")
    parser.add_argument("--frames", type=int, default=16, help="frames per block")
    parser.add_argument("--straggler", type=int, default=2, help="the rank that decodes slowly (-1: none)")
    parser.add_argument("--step-ms", type=float, default=20.0, help="time of one step")
    parser.add_argument("--decode-ms", type=float, default=40.0, help="time of the decode (the straggler's: 1.4x)")
    parser.add_argument("--output-dir", default=os.environ.get("RANKSCOPE_OUTPUT_DIR", "profiling_reports"))
    return parser.parse_args()


class Collective:
    """A gloo all-reduce after each step when torch.distributed can join
    the ranks (torchrun's variables), else nothing."""

    def __init__(self) -> None:
        self.dist = None
        if int(os.environ.get("WORLD_SIZE", "1")) < 2 or "MASTER_ADDR" not in os.environ:
            return
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            return
        dist.init_process_group("gloo")
        self.dist, self.torch = dist, torch

    def step(self) -> None:
        if self.dist is not None:
            self.dist.all_reduce(self.torch.ones(1))

    def close(self) -> None:
        if self.dist is not None:
            self.dist.destroy_process_group()


class Work:
    """What a step costs: a matrix product on a CUDA GPU when torch has one,
    else a sleep."""

    def __init__(self) -> None:
        self.torch = None
        try:
            import torch

            if torch.cuda.is_available():
                local = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
                torch.cuda.set_device(local)
                self.torch = torch
                self.a = torch.randn(2048, 2048, device="cuda")
        except ImportError:
            pass

    def run(self, ms: float) -> None:
        if self.torch is None:
            time.sleep(ms / 1e3)
            return
        for _ in range(max(1, int(ms / 2))):
            self.a = (self.a @ self.a).tanh()
        # As a collective or a copy to the host would: the step ends when
        # its GPU work does.
        self.torch.cuda.synchronize()


def main() -> int:
    args = parse_args()
    collective = Collective()
    work = Work()
    prof = rankscope.Profiler(rankscope.Config.from_env().replace(output_dir=args.output_dir))
    rank = prof.rank
    slow = 1.4 if rank == args.straggler else 1.0

    with prof.session("t2v", tags={"mode": f"tp{prof.world_size}"}) as session:
        prof.record_model_parameters("transformer", 1_300_000_000)
        prof.memory_snapshot("after_load")
        with prof.stage("text_encoding", metadata={"prompt_len": 77}):
            work.run(10)
        denoise = prof.stage("denoise_step")
        for block in range(args.blocks):
            started = time.perf_counter()
            with prof.stage("block", metadata={"index": block}):
                for step in range(args.steps):
                    step_started = time.perf_counter()
                    with denoise:
                        work.run(args.step_ms)
                        collective.step()
                    prof.record_diffusion_step(
                        step=step,
                        timestep=999.0 * (1 - step / args.steps),
                        block_size=args.frames,
                        computation_time_ms=(time.perf_counter() - step_started) * 1e3,
                        guidance_scale=5.0,
                    )
            prof.record_block_computation(
                block_index=block,
                block_size=args.frames,
                computation_time_ms=(time.perf_counter() - started) * 1e3,
            )
        with prof.stage("vae_decode"):
            work.run(args.decode_ms * slow)
        prof.memory_snapshot("after_decode")
        prof.add_event("done", {"blocks": args.blocks})

    outcome = session.outcome
    if outcome is not None and outcome.summary is not None:
        print(outcome.summary)
        print(f"report: {outcome.report_html}")
    collective.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
