"""On a machine with a CUDA GPU and torch: the Python package on real CUDA
tensors. Prints what it finds, and exits 1 on a check that fails.

- CUDA-event stage timing: a stage that queues GPU work and returns at
  once has a small host time and a GPU time near the work's own (timed
  separately with a synchronised host clock); a host-only stage gets no
  GPU time of note; the report shows both side by side.
- `gpu_timing: sync` gives GPU times close to the events'.
- The GPU torch uses is the one sampled (UUID in the report = torch's).
- memory_snapshot reads torch's allocator.
- The cost of a stage with CUDA events against one without.

usage: python scripts/gpu_check_python.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import torch

import rankscope

failures: List[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def report(outcome: rankscope.Outcome) -> Dict[str, Any]:
    assert outcome.report_json is not None
    return json.loads(Path(outcome.report_json).read_text())


def stage(rep: Dict[str, Any], name: str) -> Dict[str, Any]:
    return [s for s in rep["stages"] if s["name"] == name][0]


def queue_work(a: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        a = a @ a
        a = a / a.norm()
    return a


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-check-out")
    torch.cuda.set_device(0)
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__}, {props.name}, uuid {props.uuid}")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    queue_work(a, 3)
    torch.cuda.synchronize()

    # The work's own time, synchronised on the host.
    n = 40
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    queue_work(a, n)
    torch.cuda.synchronize()
    work_ms = (time.perf_counter() - t0) * 1e3
    print(f"{n} bf16 8192^3 products, synchronised host time: {work_ms:.2f} ms")

    results = {}
    for mode in ("events", "sync"):
        prof = rankscope.Profiler(rankscope.Config(output_dir=out / mode, gpu_timing=mode))
        with prof.session(f"gpu-{mode}") as session:
            prof.memory_snapshot("before")
            for _ in range(5):
                started = time.perf_counter()
                with prof.stage("matmul"):
                    queue_work(a, n)
                host_ms = (time.perf_counter() - started) * 1e3
                with prof.stage("host_only"):
                    time.sleep(0.01)
            torch.cuda.synchronize()
            prof.memory_snapshot("after")
        rep = report(session.outcome)
        results[mode] = rep
        matmul, host_only = stage(rep, "matmul"), stage(rep, "host_only")
        gpu_ms = matmul["gpu_s"]["avg"] / 5 * 1e3
        host_stage_ms = matmul["total_s"]["avg"] / 5 * 1e3
        print(f"[{mode}] matmul per call: host {host_stage_ms:.2f} ms, GPU {gpu_ms:.2f} ms "
              f"(last call's host time {host_ms:.2f} ms); host_only GPU "
              f"{host_only['gpu_s']['avg'] / 5 * 1e3:.3f} ms per call")
        check(0.8 * work_ms <= gpu_ms <= 1.25 * work_ms,
              f"[{mode}] GPU time per matmul call ({gpu_ms:.2f} ms) is the work's ({work_ms:.2f} ms)")
        if mode == "events":
            check(host_stage_ms < 0.5 * gpu_ms,
                  f"[events] the host does not wait: host {host_stage_ms:.2f} ms < half the GPU's")
        host_only_gpu_ms = host_only["gpu_s"]["avg"] / 5 * 1e3
        if mode == "events":
            check(host_only_gpu_ms < 1.0, "[events] a host-only stage has ~no GPU time")
        else:
            # Synchronised host time: the stage's 10 ms sleep counts.
            check(9.0 < host_only_gpu_ms < 20.0, "[sync] a host-only stage's time is its host time")
        print(session.outcome.summary)

        gpus = rep["ranks"][0]["gpus"]
        uuids = [g["uuid"] for g in gpus]
        check(rep["session"]["gpu_source"] == "nvml", f"[{mode}] GPU data from NVML")
        check(len(gpus) == 1 and str(props.uuid) in uuids[0],
              f"[{mode}] the GPU sampled is torch's: {uuids} vs {props.uuid}")
        summary = rep["gpus"][0] if rep["gpus"] else {}
        print(f"[{mode}] GPU summary: {json.dumps(summary)[:600]}")
        check(bool(summary.get("memory_peak_mb")), f"[{mode}] NVML memory readings present")

        raw = Path(session.outcome.session_dir) / "raw" / "memory_snapshots.arrow"
        import pyarrow.ipc

        snapshots = pyarrow.ipc.open_file(raw).read_all().to_pylist()
        print(f"[{mode}] memory snapshots: {snapshots}")
        check(any(s["source"] == "torch" and (s["allocated_bytes"] or 0) >= a.numel() * 2 for s in snapshots),
              f"[{mode}] memory_snapshot read torch's allocator (>= the 128 MiB tensor)")

    # Cost per block with CUDA events and without.
    for mode in ("events", "off"):
        prof = rankscope.Profiler(rankscope.Config(output_dir=out / f"cost-{mode}", gpu_timing=mode,
                                                   max_data_points=1_000_000))
        with prof.session(f"cost-{mode}"):
            x = prof.stage("x")
            blocks = 20_000
            t0 = time.perf_counter_ns()
            for _ in range(blocks):
                with x:
                    pass
            per_block = (time.perf_counter_ns() - t0) / blocks
        print(f"stage cost with gpu_timing={mode}: {per_block:.0f} ns per block")

    print("FAILED: " + "; ".join(failures) if failures else "all GPU checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
