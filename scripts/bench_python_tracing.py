"""What Python function tracing adds to a program's wall time and memory:
rankscope's (``python_tracing=session``) against VizTracer's, in the same
run, on the same programs, each variant in a process of its own:

- ``calls``: a call-heavy pure-Python program (a recursive function, small
  methods, a generator pipeline), about 280,000 calls;
- ``torch``: a torch module's forward on the CPU, 300 times (where torch
  is installed).

Per program and variant, the median over ROUNDS (interleaved) of the
traced region's wall time, the time to write the result (rankscope's
session finish with its report, VizTracer's save), and the process's peak
RSS. Added time is traced minus untraced. Both tools must count the same
calls of the same functions: the script checks the pure-Python program's
and fails where they differ. VizTracer leaves C functions out
(``ignore_c_function``), as rankscope does.

usage: python scripts/bench_python_tracing.py [ROUNDS]
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

VARIANTS = ("untraced", "rankscope", "viztracer")
PROGRAMS = ("calls", "torch")


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Point:
    def __init__(self, x: int) -> None:
        self.x = x

    def norm(self) -> int:
        return abs(self.x)


def methods(n: int) -> int:
    total = 0
    for i in range(n):
        total += Point(i).norm()
    return total


def numbers(n: int) -> Iterator[int]:
    for i in range(n):
        yield i


def squares(items: Iterator[int]) -> Iterator[int]:
    for x in items:
        yield x * x


def evens(items: Iterator[int]) -> Iterator[int]:
    for x in items:
        if x % 2 == 0:
            yield x


def call_heavy() -> None:
    fib(22)
    methods(50_000)
    sum(evens(squares(numbers(50_000))))


#: The functions whose calls both tools must count alike.
COUNTED = ("fib", "__init__", "norm", "methods", "numbers", "squares", "evens", "call_heavy")


def torch_program() -> Callable[[], None]:
    import torch

    torch.set_num_threads(1)
    layers: List[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    x = torch.randn(64, 256)

    def forward() -> None:
        with torch.no_grad():
            for _ in range(300):
                model(x)

    forward()  # warm, untraced
    return forward


def child(program: str, variant: str, out: Path) -> Dict[str, Any]:
    work = call_heavy if program == "calls" else torch_program()
    counts: Dict[str, int] = {}
    if variant == "untraced":
        started = time.perf_counter()
        work()
        traced_s, written_s = time.perf_counter() - started, 0.0
    elif variant == "rankscope":
        import rankscope

        prof = rankscope.Profiler(rankscope.Config(
            output_dir=out, gpu_source="none", collect_host=False, python_tracing="session",
            max_data_points=1_000_000))
        session = prof.session("bench")
        started = time.perf_counter()
        work()
        stopped = time.perf_counter()
        session.finish()
        traced_s, written_s = stopped - started, time.perf_counter() - stopped
        assert session.outcome is not None and session.outcome.report_json is not None
        report = json.loads(Path(session.outcome.report_json).read_text())
        for f in report["python_functions"]:
            if f["name"].startswith("__main__."):
                counts[f["name"].rsplit(".", 1)[-1]] = f["calls"]
    else:
        from viztracer import VizTracer

        tracer = VizTracer(output_file=str(out / "viztracer.json"), ignore_c_function=True,
                           verbose=0)
        tracer.start()
        started = time.perf_counter()
        work()
        stopped = time.perf_counter()
        tracer.stop()
        tracer.save()
        traced_s, written_s = stopped - started, time.perf_counter() - stopped
        events = json.loads((out / "viztracer.json").read_text())["traceEvents"]
        named = Counter(e["name"].split(" (")[0] for e in events if e.get("ph") == "X")
        counts = {name.rsplit(".", 1)[-1]: n for name, n in named.items()}
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"traced_s": traced_s, "written_s": written_s, "peak_mb": peak_kb / 1024,
            "counts": {k: v for k, v in counts.items() if k in COUNTED}}


def run(program: str, variant: str) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, __file__, "--child", program, variant, out],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{program}/{variant} failed:\n{done.stdout}\n{done.stderr}")
        result: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


def has_torch() -> bool:
    """Asked of another process: an import here would count in the
    children's peak RSS, which Linux carries over fork and exec."""
    done = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, check=False)
    return done.returncode == 0


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    programs = PROGRAMS if has_torch() else ("calls",)
    results: Dict[str, Dict[str, List[Dict[str, Any]]]] = {
        p: {v: [] for v in VARIANTS} for p in programs}
    for _ in range(rounds):
        for program in programs:
            for variant in VARIANTS:
                results[program][variant].append(run(program, variant))
    print("| program | variant | traced region s | added s | write s | peak RSS MB | added vs VizTracer's |")
    print("|---|---|---|---|---|---|---|")
    for program in programs:
        med = {v: {k: statistics.median(r[k] for r in results[program][v])
                   for k in ("traced_s", "written_s", "peak_mb")} for v in VARIANTS}
        base = med["untraced"]["traced_s"]
        viz_added = med["viztracer"]["traced_s"] - base
        for variant in VARIANTS:
            m = med[variant]
            added = m["traced_s"] - base
            ratio = f"{added / viz_added:.2f}x" if variant != "untraced" and viz_added > 0 else ""
            print(f"| {program} | {variant} | {m['traced_s']:.4f} | {added:.4f} | "
                  f"{m['written_s']:.4f} | {m['peak_mb']:.0f} | {ratio} |")
    calls = results["calls"]
    ours, theirs = calls["rankscope"][0]["counts"], calls["viztracer"][0]["counts"]
    print(f"\ncalls counted (pure-Python program): rankscope {dict(sorted(ours.items()))}")
    print(f"                                      VizTracer {dict(sorted(theirs.items()))}")
    if ours != theirs:
        raise SystemExit("the two tools counted different calls")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], Path(sys.argv[4]))))
    else:
        main()
