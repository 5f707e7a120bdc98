"""The cost of one `with` block timing a stage, in nanoseconds: rankscope's
Python package (the name given each time, a kept stage object, a disabled
profiler) against, in the same run, a pure-Python stage timer of the
Inferix kind and torch.profiler.record_function (when torch is there).

Rounds of each variant are interleaved; each round times ITERATIONS blocks;
the median round is reported, with each variant's ratio to rankscope's.

usage: python scripts/bench_python_stage.py [ITERATIONS] [ROUNDS]
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from typing import Callable, Dict, Iterator, List

import rankscope


class PurePythonTimer:
    """Stage timing as Inferix-style profilers do it in Python."""

    def __init__(self) -> None:
        self.times: Dict[str, List[float]] = defaultdict(list)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[name].append(time.perf_counter() - start)


def per_block_ns(body: Callable[[int], None], iterations: int) -> float:
    start = time.perf_counter_ns()
    body(iterations)
    return (time.perf_counter_ns() - start) / iterations


def main() -> None:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    out = tempfile.mkdtemp()
    # Room for every row: the budget is not what is measured.
    config = rankscope.Config(output_dir=out, gpu_source="none", collect_host=False,
                              max_data_points=10_000_000, flush_interval_s=0)
    prof = rankscope.Profiler(config)
    off = rankscope.Profiler(rankscope.Config(enabled=False))
    pure = PurePythonTimer()

    def named(n: int) -> None:
        stage = prof.stage
        for _ in range(n):
            with stage("x"):
                pass

    def kept(n: int) -> None:
        x = prof.stage("x")
        for _ in range(n):
            with x:
                pass

    def bursts(body: Callable[[int], None]) -> Callable[[int], float]:
        """`body` in bursts of 2,000 blocks, the agent's events paired in
        between (by get_current_metrics, as the sampler thread does at each
        reading): what the recording thread pays when it does not fill its
        event log between two readings. Returns ns per block of the bursts."""

        def timed(n: int) -> float:
            total = 0
            for _ in range(n // 2000):
                start = time.perf_counter_ns()
                body(2000)
                total += time.perf_counter_ns() - start
                prof.get_current_metrics()
            return total / n

        return timed

    def disabled_named(n: int) -> None:
        stage = off.stage
        for _ in range(n):
            with stage("x"):
                pass

    def disabled_kept(n: int) -> None:
        x = off.stage("x")
        for _ in range(n):
            with x:
                pass

    def pure_python(n: int) -> None:
        stage = pure.stage
        for _ in range(n):
            with stage("x"):
                pass

    def empty_loop(n: int) -> None:
        for _ in range(n):
            pass

    variants: Dict[str, Callable[[int], None]] = {
        "rankscope, name given each time": named,
        "rankscope, kept stage object": kept,
        "rankscope disabled, name given each time": disabled_named,
        "rankscope disabled, kept stage object": disabled_kept,
        "pure-Python timer (contextmanager, perf_counter, dict of lists)": pure_python,
        "empty loop (subtracted from none)": empty_loop,
    }
    try:
        import torch

        record_function = torch.profiler.record_function

        def torch_record_function(n: int) -> None:
            for _ in range(n):
                with record_function("x"):
                    pass

        variants[f"torch.profiler.record_function (torch {torch.__version__})"] = torch_record_function
    except ImportError:
        print("torch is not installed: record_function not measured", file=sys.stderr)

    paired_between = {
        "rankscope, name given each time, bursts paired between": bursts(named),
        "rankscope, kept stage object, bursts paired between": bursts(kept),
    }
    results: Dict[str, List[float]] = defaultdict(list)
    with prof.session("bench") as session:
        for _ in range(rounds):
            for name, body in variants.items():
                results[name].append(per_block_ns(body, iterations))
            for name, timed in paired_between.items():
                results[name].append(timed(iterations))
            # Each round's rows are let go, as a long session does: the
            # timer's lists cleared, rankscope's rows written to a part file
            # (what its periodic flushes do), so that the next round records
            # into memory already held, a long job's steady state.
            pure.times.clear()
            session.flush()
    median = {name: statistics.median(values) for name, values in results.items()}
    # The first round recorded into fresh memory: what a session's first
    # rows cost.
    median["rankscope, name given each time, first round (rows into fresh memory)"] = (
        results["rankscope, name given each time"][0])
    reference = median["rankscope, name given each time"]
    print(f"{iterations} blocks per round, median of {rounds} interleaved rounds, Python {sys.version.split()[0]}")
    print("| variant | ns per block | / rankscope (name each time) |")
    print("|---|---|---|")
    for name, ns in median.items():
        print(f"| {name} | {ns:.0f} | {ns / reference:.2f} |")


if __name__ == "__main__":
    main()
