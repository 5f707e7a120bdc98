"""On a machine with a CUDA GPU and torch: torch.profiler windows driven by
rankscope, on real CUDA kernels. Prints what it finds, and exits 1 on a
check that fails.

- examples/python/torch_kernels.py under torchrun, 2 ranks on the GPU(s)
  over gloo (CUDA tensors), rank 1 the straggler, windows set by
  variables alone: every rank's kernels reach rank 0's report with GPU
  time split as HTA splits it, the matrix products are compute kernels
  attributed to the `attention` stage, the all-reduce is told as waiting
  for rank 1, and each window's trace is kept (`torch_profiler_trace_dir`)
  for `rankscope import` and HTA to read afterwards.
- The same example on 1 rank over NCCL: the run completes with its
  window read, and what the trace says of NCCL is printed.
- A window asked for while the job runs, with torch.profiler (what
  `rankscope trigger --torch` writes into the session's control folder):
  2 ranks over gloo on CUDA, no scheduled windows; the window's report has
  both ranks' kernels, the matrix products the top compute kernel.

usage: python scripts/gpu_check_kernels.py OUT_DIR
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "python" / "torch_kernels.py"
failures: List[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def run_example(out: Path, nproc: int, backend: str, straggler: int) -> Dict[str, Any]:
    """The example under torchrun with 3-step windows; rank 0's report."""
    env = dict(os.environ, RANKSCOPE_TORCH_PROFILER_WAIT="1", RANKSCOPE_TORCH_PROFILER_WARMUP="1",
               RANKSCOPE_TORCH_PROFILER_ACTIVE="3",
               RANKSCOPE_TORCH_PROFILER_TRACE_DIR=str(out / "traces"),
               RANKSCOPE_GATHER_TIMEOUT_S="120")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", str(EXAMPLE), "--backend", backend,
               "--size", "4096", "--products", "8", "--steps", "8",
               "--straggler", str(straggler), "--output-dir", str(out / "report")]
    print("== " + " ".join(command[2:]), flush=True)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400)
    (out / "stdout.txt").write_text(done.stdout + "\n---- stderr\n" + done.stderr)
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", flush=True)
    check(done.returncode == 0, f"torchrun {nproc} rank(s) over {backend} exits 0")
    reports = list((out / "report").glob("torch-kernels-*/report.json"))
    check(len(reports) == 1, "rank 0 wrote one report")
    return json.loads(reports[0].read_text()) if reports else {}


def check_gloo(rep: Dict[str, Any], out: Path) -> None:
    check(rep.get("session", {}).get("ranks_reporting") == [0, 1], "both ranks report")
    traces = rep.get("kernel_traces", [])
    check([t["rank"] for t in traces] == [0, 1] and all(t["gpu_activities"] > 0 for t in traces),
          f"both ranks' windows carry GPU activities: {[(t['rank'], t['gpu_activities']) for t in traces]}")
    for g in rep.get("gpu_time", []):
        print(f"      gpu_time rank {g['rank']} gpu {g['gpu']}: window {g['window_s']:.3f} s, "
              f"compute {g['compute_pct']:.1f} %, non-compute {g['non_compute_pct']:.1f} %, "
              f"idle {g['idle_pct']:.1f} %, memory {g['memory_s']:.4f} s")
    gpu_time = rep.get("gpu_time", [])
    check(sorted(g["rank"] for g in gpu_time) == [0, 1]
          and all(g["compute_s"] > 0 and g["gpu"] is not None for g in gpu_time),
          "GPU time per rank with compute kernels, on a named device")
    check(all(abs(g["idle_pct"] + g["compute_pct"] + g["non_compute_pct"] - 100) < 0.5 for g in gpu_time),
          "idle + compute + non-compute = 100 % of each window")
    kernels = rep.get("kernels", [])
    for k in kernels[:8]:
        print(f"      kernel {k['category']:<13} {k['calls']:>5} calls {k['total_s'] * 1e3:9.3f} ms  {k['name'][:90]}")
    top = kernels[0] if kernels else {}
    check(top.get("category") == "compute" and top.get("calls", 0) >= 2 * 3 * 8,
          "the largest kernel is the matrix product, a compute kernel, 8 per step on each rank")
    stage = {s["name"]: s for s in rep.get("stage_kernels", [])}
    print(f"      stage_kernels: {[(n, round(s['total_s'], 4)) for n, s in stage.items()]}")
    check("attention" in stage and stage["attention"]["total_s"] >= top.get("total_s", 1) * 0.99,
          "the products' GPU time is attributed to the stage that launched them (`attention`)")
    collectives = {c["rank"]: c for c in rep.get("collectives", []) if c["kind"] == "all_reduce"}
    print(f"      all_reduce: {json.dumps(collectives)}")
    check(sorted(collectives) == [0, 1] and collectives[1].get("last_to_arrive") is not None
          and collectives[1]["last_to_arrive"] >= 6,
          "rank 1 (the straggler) is last to arrive at the all-reduce")
    check(bool(collectives) and (collectives.get(0, {}).get("wait_s") or 0)
          > (collectives.get(1, {}).get("wait_s") or 0),
          "rank 0 waits longer in the all-reduce than rank 1")
    slow = [k for k in rep.get("kernel_stragglers", []) if k["kernel"] == "load_kv"]
    check([k["rank"] for k in slow] == [1], f"load_kv is named slow on rank 1: {slow}")
    timeline = list((out / "report").glob("torch-kernels-*/trace.json.gz"))
    events = json.loads(gzip.decompress(timeline[0].read_bytes()))["traceEvents"] if timeline else []
    tracks = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    print(f"      timeline tracks: {sorted(t for t in tracks if not t.startswith('main'))[:12]}")
    check(any(t.startswith("CPU operators, thread") for t in tracks)
          and any(e.get("cat") == "cpu_op" and e.get("name") == "aten::mm" for e in events),
          "the CPU operators are on the timeline, beside the GPU streams")
    check(any(t.startswith("GPU 0 stream") for t in tracks), "the GPU stream's track is on the timeline")
    kept = sorted(p.name for p in (out / "traces").glob("*.pt.trace.json.gz"))
    check(kept == ["rank0-window1.pt.trace.json.gz", "rank1-window1.pt.trace.json.gz"],
          f"each rank's window trace kept: {kept}")


def check_nccl(rep: Dict[str, Any]) -> None:
    traces = rep.get("kernel_traces", [])
    check(len(traces) == 1 and traces[0]["gpu_activities"] > 0, "the NCCL rank's window carries GPU activities")
    comm = [k for k in rep.get("kernels", []) if k["category"] == "communication"]
    print(f"      communication kernels: {[(k['name'][:60], k['calls']) for k in comm]}")
    print(f"      collectives: {rep.get('collectives')}")
    check(any(c["kind"] == "all_reduce" for c in rep.get("collectives", [])),
          "the all-reduce over NCCL is recorded")


def check_triggered(out: Path) -> None:
    """A --torch window asked for mid-run; its report's kernels."""
    import secrets
    import time
    env = dict(os.environ, RANKSCOPE_GATHER_TIMEOUT_S="120")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", str(EXAMPLE), "--backend", "gloo", "--size", "4096",
               "--products", "8", "--steps", "200", "--straggler", "1",
               "--output-dir", str(out / "report")]
    print("== " + " ".join(command[2:]) + "  (a --torch window asked for mid-run)", flush=True)
    job = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    deadline = time.monotonic() + 300
    live: List[Path] = []
    while not live and job.poll() is None and time.monotonic() < deadline:
        live = list((out / "report").glob("torch-kernels-*/control/live"))
        time.sleep(0.1)
    check(bool(live), "rank 0 says its session runs (control/live)")
    if not live:
        job.kill()
        return
    session = live[0].parent.parent
    nonce = secrets.token_hex(16)
    request = session / "control" / f".request-{nonce}.tmp"
    request.write_text(json.dumps({"nonce": nonce, "steps": 5, "delay_steps": 0,
                                   "trigger": "command", "torch": True}))
    request.rename(session / "control" / f"request-{nonce}.json")
    report_path = session / "window-1" / "report.json"
    while not report_path.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    output, _ = job.communicate(timeout=300)
    (out / "stdout.txt").write_text(output)
    print(output[-2000:], flush=True)
    check(job.returncode == 0, "the job runs on and exits 0")
    check(report_path.exists(), "the window's report is written")
    if not report_path.exists():
        return
    rep = json.loads(report_path.read_text())
    check(rep.get("window", {}).get("steps") == 5, f"the window covers 5 steps: {rep.get('window')}")
    traces = rep.get("kernel_traces", [])
    check([t["rank"] for t in traces] == [0, 1] and all(t["gpu_activities"] > 0 for t in traces),
          f"both ranks' GPU activities in the window: {traces}")
    kernels = rep.get("kernels", [])
    top = kernels[0] if kernels else {}
    print(f"   window's top kernel: {top.get('name', '')[:80]} ({top.get('category')}, "
          f"{top.get('calls')} calls)", flush=True)
    check(top.get("category") == "compute", "the matrix products are the top compute kernel")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-check-kernels")
    out.mkdir(parents=True, exist_ok=True)
    check_gloo(run_example(out / "gloo", 2, "gloo", 1), out / "gloo")
    check_nccl(run_example(out / "nccl", 1, "nccl", -1))
    check_triggered(out / "triggered")
    print(f"{len(failures)} check(s) failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
