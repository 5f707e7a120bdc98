"""Python function tracing (``python_tracing``) on one rank, end to end:
the calls a program makes, counted and nested as it made them, in
report.json, raw/ and the merged trace."""

from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pyarrow.ipc

import rankscope
from conftest import report_of


def leaf() -> None:
    pass


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def numbers() -> Iterator[int]:
    for i in range(3):
        yield i


def boom() -> None:
    raise ValueError("planted")


def catcher() -> None:
    try:
        boom()
    except ValueError:
        pass


def sleeper() -> None:
    time.sleep(0.05)


def parent() -> None:
    sleeper()
    leaf()


def worker() -> None:
    for _ in range(5):
        leaf()


def traced(tmp_path: Path, **keys: Any) -> rankscope.Profiler:
    config = rankscope.Config(
        output_dir=tmp_path / "out", gpu_source="none", collect_host=False,
        python_tracing="session", **keys)
    return rankscope.Profiler(config)


def program(prof: rankscope.Profiler) -> rankscope.Session:
    with prof.session("traced") as session:
        for _ in range(10):
            leaf()
        fib(10)
        list(numbers())
        catcher()
        parent()
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    return session


def functions_of(report: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {f["name"].rsplit(".", 1)[-1]: f for f in report["python_functions"]
            if f["name"].startswith(__name__ + ".")}


def test_calls_are_counted_nested_and_timed_as_the_program_made_them(tmp_path: Path) -> None:
    session = program(traced(tmp_path))
    report = report_of(session.outcome)
    functions = functions_of(report)
    assert functions["leaf"]["calls"] == 10 + 1 + 5, "main thread, parent, the new thread"
    assert functions["fib"]["calls"] == 177, "fib(10) calls itself 176 times"
    assert functions["fib"]["total_s"] == functions["fib"]["self_s"], "recursion counted once"
    assert functions["numbers"]["calls"] == 4, "a generator: each resumption, and its end"
    assert functions["boom"]["calls"] == 1 and functions["catcher"]["calls"] == 1
    # The planted sleep is sleeper's own time, inside parent's total.
    assert functions["sleeper"]["self_s"] >= 0.05
    assert functions["parent"]["total_s"] >= 0.05 > functions["parent"]["self_s"]
    assert functions["parent"]["file"].endswith("test_python_tracing.py")
    assert functions["parent"]["line"] == parent.__code__.co_firstlineno
    assert functions["worker"]["calls"] == 1, "a thread started after the session began"
    assert not any(f["name"].startswith("rankscope.") for f in report["python_functions"])
    assert functions["sleeper"]["min_rank"] == functions["sleeper"]["max_rank"] == 0
    summary = session.outcome.summary or ""
    assert "Python functions across ranks" in summary and f"{__name__}.sleeper" in summary

    # Each call kept, nested in its caller, in raw/ and on the merged trace.
    session_dir = session.outcome.session_dir
    assert session_dir is not None
    calls = pyarrow.ipc.open_file(session_dir / "raw" / "python_calls.arrow").read_all()
    rows = [r for r in calls.to_pylist() if r["name"] == f"{__name__}.sleeper"]
    assert len(rows) == 1 and rows[0]["depth"] == 1
    (outer,) = [r for r in calls.to_pylist() if r["name"] == f"{__name__}.parent"]
    assert outer["start_ns"] <= rows[0]["start_ns"] <= rows[0]["end_ns"] <= outer["end_ns"]
    with gzip.open(session_dir / "trace.json.gz") as f:
        events: List[Dict[str, Any]] = json.load(f)["traceEvents"]
    slices = [e for e in events if e.get("cat") == "python"]
    assert any(e["name"] == f"{__name__}.sleeper" and e["dur"] >= 50_000 for e in slices)
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert any(t.startswith("Python, thread") for t in tracks)


def test_filters_choose_what_is_traced_and_the_depth_limit_holds(tmp_path: Path) -> None:
    session = program(traced(
        tmp_path, python_tracing_include=__name__,
        python_tracing_exclude=f"{__name__}.boom", python_tracing_max_depth=3))
    report = report_of(session.outcome)
    functions = functions_of(report)
    assert "boom" not in functions and "catcher" in functions
    assert all(f["name"].startswith(__name__ + ".") for f in report["python_functions"]), \
        "only the included module"
    assert functions["fib"]["calls"] == 1 + 2 + 4, "fib's first three levels"


def test_a_thread_started_before_the_session_is_traced_where_sys_monitoring_is(
    tmp_path: Path,
) -> None:
    """sys.monitoring (3.12+) reaches every thread of the interpreter; the C
    profile hook of earlier versions only the session's thread and threads
    started after it."""
    running = threading.Event()
    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            worker()
            running.set()

    thread = threading.Thread(target=spin)
    thread.start()
    running.wait()
    prof = traced(tmp_path)
    with prof.session("earlier-thread") as session:
        time.sleep(0.05)
    done.set()
    thread.join()
    functions = functions_of(report_of(session.outcome))
    assert ("worker" in functions) == (sys.version_info >= (3, 12)), functions.keys()


def test_a_profiler_finishing_leaves_the_tracing_another_took_over(tmp_path: Path) -> None:
    first = traced(tmp_path / "first")
    second = traced(tmp_path / "second")
    with first.session("first") as first_session:
        with second.session("second") as second_session:
            # The first session ends while the second's tracing runs.
            first_session.finish()
            for _ in range(3):
                leaf()
    assert functions_of(report_of(second_session.outcome))["leaf"]["calls"] == 3
    assert "leaf" not in functions_of(report_of(first_session.outcome))


def test_a_session_without_tracing_records_no_function(tmp_path: Path) -> None:
    prof = rankscope.Profiler(rankscope.Config(
        output_dir=tmp_path / "out", gpu_source="none", collect_host=False))
    session = program(prof)
    assert report_of(session.outcome)["python_functions"] == []


def test_hostile_function_names_are_inert_in_every_output(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script>\x1b[31m\n" + "x" * 10_000

    def template() -> None:
        time.sleep(0.001)

    code = template.__code__.replace(co_name=hostile, co_qualname=hostile)
    named = type(template)(code, globals())
    prof = traced(tmp_path)
    with prof.session("hostile") as session:
        named()
    report = report_of(session.outcome)
    (function,) = [f for f in report["python_functions"] if "alert" in f["name"]]
    assert function["calls"] == 1
    assert session.outcome.report_html is not None
    html = session.outcome.report_html.read_text()
    assert "<script>alert(1)" not in html
    summary = session.outcome.summary or ""
    assert "\x1b" not in summary and "<script>alert(1)</script>\n" not in summary


def c_caller() -> int:
    time.sleep(0.03)
    return len([1, 2, 3]) + sum(range(4))


def test_c_functions_are_traced_when_asked_and_their_time_leaves_the_caller(
    tmp_path: Path,
) -> None:
    """``python_tracing_c_functions``: the builtins a function calls are
    functions of their own (``time.sleep``'s time no longer its caller's
    own), named by module; without it, none is traced."""
    def run(**keys: Any) -> Dict[str, Dict[str, Any]]:
        prof = traced(tmp_path / str(len(keys)), **keys)
        with prof.session("c") as session:
            for _ in range(3):
                c_caller()
            [].append(1)
            with prof.stage("own"):
                pass
        return {f["name"]: f for f in report_of(session.outcome)["python_functions"]}

    with_c = run(python_tracing_c_functions=True)
    assert with_c["time.sleep"]["calls"] == 3, sorted(with_c)
    assert with_c["time.sleep"]["self_s"] >= 0.09
    assert with_c["builtins.len"]["calls"] == 3
    assert with_c["list.append"]["calls"] >= 1, "a method of a builtin type"
    caller = with_c[f"{__name__}.c_caller"]
    assert caller["calls"] == 3
    assert caller["total_s"] >= 0.09 > caller["self_s"], "the sleep is time.sleep's own"
    assert with_c["time.sleep"]["file"] == "" and with_c["time.sleep"]["line"] == 0
    own = [name for name in with_c if name.startswith(("rankscope", "Profiler.", "Stage."))]
    assert not own, "rankscope's own methods are never traced"

    without = run()
    assert not any(name in without for name in ("time.sleep", "builtins.len", "list.append"))
    assert without[f"{__name__}.c_caller"]["self_s"] >= 0.09, "the sleep is the caller's own"


def test_windows_mode_with_rolling_windows_traces_the_session_once(tmp_path: Path) -> None:
    """``python_tracing: windows`` with rolling windows, which cover every
    step, traces the whole session; each call's totals land in exactly one
    window's report (the windows' flushes split them) and every call is in
    the session's. (A window asked for with ``rankscope trigger --python``,
    traced on its own: test_multiprocess.py.)"""
    prof = rankscope.Profiler(rankscope.Config(
        output_dir=tmp_path / "out", gpu_source="none", collect_host=False,
        window_every_steps=3, python_tracing="windows"))
    session = prof.session("windows")
    before_any_step()
    for _ in range(7):
        windowed_work()
        prof.step()
    outcome = session.finish()
    session_dir = Path(outcome.session_dir)

    def calls_in(report: Dict[str, Any], name: str) -> int:
        return sum(f["calls"] for f in report["python_functions"] if f["name"].endswith(name))

    windows = [json.loads((session_dir / f"window-{index}" / "report.json").read_text())
               for index in (1, 2, 3)]
    assert sum(calls_in(w, "windowed_work") for w in windows) == 7
    report = json.loads((session_dir / "report.json").read_text())
    assert calls_in(report, "windowed_work") == 7
    assert calls_in(report, "before_any_step") == 1


def before_any_step() -> None:
    pass


def windowed_work() -> None:
    time.sleep(0.001)
