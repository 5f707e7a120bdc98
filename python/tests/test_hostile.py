"""Hostile input and misuse: each test is a finding of a review that broke
an earlier build (a Rust panic, a hang, a deadlock, a lost session, wrong
durations), kept so that it stays fixed."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any, Dict, List

import pytest

import rankscope
from conftest import report_of, stage_of


def test_a_mapping_changed_while_it_is_read_raises_no_panic(prof: rankscope.Profiler) -> None:
    class Grows:
        def __init__(self, owner: Dict[str, Any]) -> None:
            self.owner = owner

        def __str__(self) -> str:
            self.owner[f"new{len(self.owner)}"] = 1  # changes the dict being read
            return "grows"

    with prof.session("mutating") as session:
        metadata: Dict[str, Any] = {}
        metadata["a"] = Grows(metadata)
        metadata["b"] = 2
        with prof.stage("x", metadata=metadata):
            pass
        payload: Dict[str, Any] = {}
        payload["a"] = Grows(payload)
        prof.add_event("e", payload)
    assert stage_of(report_of(session.outcome), "x")["count"] == 1


def test_a_list_holding_itself_twice_is_cut_quickly(prof: rankscope.Profiler) -> None:
    loop: List[Any] = []
    loop.append(loop)
    loop.append(loop)  # 2**32 paths through 32 levels
    started = time.monotonic()
    with prof.session("loops"):
        with prof.stage("x", metadata={"loop": loop}):
            pass
        prof.add_event("e", loop)
    # Not a timing window: without the cut this takes hours.
    assert time.monotonic() - started < 60


def test_non_dict_mappings_are_kept_as_objects(prof: rankscope.Profiler, tmp_path: Path) -> None:
    import collections
    import types

    import pyarrow.ipc

    with prof.session("mappings", tags=types.MappingProxyType({"mode": "tp2"})) as session:
        prof.add_event("e", collections.ChainMap({"a": 1}, {"b": 2}))
    raw = Path(session.outcome.session_dir) / "raw" / "events.arrow"
    events = pyarrow.ipc.open_file(raw).read_all().to_pylist()
    import json

    assert json.loads(events[0]["payload"]) == {"a": 1, "b": 2}
    assert report_of(session.outcome)["session"]["tags"] == {"mode": "tp2"}


def test_strings_that_are_not_unicode_keep_their_valid_part(prof: rankscope.Profiler) -> None:
    broken = b"run-\xff".decode("utf-8", "surrogateescape")
    with prof.session("surrogates") as session:
        with prof.stage(broken, metadata={"path": broken}):
            pass
    names = [s["name"] for s in report_of(session.outcome)["stages"]]
    assert len(names) == 1 and names[0].startswith("run-\ufffd"), names


def test_a_timer_that_calls_back_into_the_profiler_does_not_deadlock(
    prof: rankscope.Profiler,
) -> None:
    class Reentrant:
        def begin(self) -> None:
            return None

        def end(self, name: str, handle: Any) -> None:
            pass

        def resolve(self) -> None:
            prof._gpu_timer()  # takes the profiler's timer lock

    finished = threading.Event()

    def run() -> None:
        with prof.session("reentrant"):
            prof._set_gpu_timer(Reentrant())
        finished.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert finished.wait(60), "finish() hung on its own lock"


def test_a_failing_gpu_timer_costs_the_gpu_times_not_the_session(
    prof: rankscope.Profiler,
) -> None:
    class Broken:
        def begin(self) -> int:
            return 1

        def end(self, name: str, handle: Any) -> None:
            raise RuntimeError("CUDA error: an illegal memory access")

        def resolve(self) -> None:
            raise RuntimeError("CUDA error: an illegal memory access")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyError):
            with prof.session("broken") as session:
                prof._set_gpu_timer(Broken())
                with prof.stage("x"):
                    raise KeyError("the user's own error, not the timer's")
    assert stage_of(report_of(session.outcome), "x")["count"] == 1
    messages = [str(w.message) for w in caught]
    assert any("GPU time of stage \"x\" lost" in m for m in messages), messages
    assert any("GPU times are lost" in m for m in messages), messages


def test_a_stage_refused_as_too_deep_does_not_end_an_outer_call(tmp_path: Path) -> None:
    prof = rankscope.Profiler(rankscope.Config(output_dir=tmp_path, gpu_source="none",
                                               collect_host=False, max_open_stages=2))

    def recurse(n: int) -> None:
        with prof.stage("recurse"):
            if n:
                recurse(n - 1)
            else:
                time.sleep(0.05)

    with prof.session("deep") as session:
        recurse(4)  # 5 calls deep, 2 may be open
    stage = stage_of(report_of(session.outcome), "recurse")
    assert stage["count"] == 2
    # Both kept calls span the sleep at the bottom.
    assert stage["per_call_ms"]["min"] >= 50.0


def test_stop_after_the_session_ended_clears_the_open_stage(tmp_path: Path) -> None:
    prof = rankscope.Profiler(rankscope.Config(output_dir=tmp_path, gpu_source="none",
                                               collect_host=False))
    with prof.session("first"):
        prof.start("left_open")
    assert prof.stop("left_open"), "the stage is still open, and ends"
    with prof.session("second"):
        assert prof.get_current_metrics()["open_stages"] == []


def test_replacing_the_preset_is_refused_and_the_token_is_not_shown() -> None:
    config = rankscope.Config(token="s3cret")
    with pytest.raises(rankscope.ConfigError, match="make a new Config"):
        config.replace(preset="production")
    assert "s3cret" not in repr(config)
    assert config.token == "s3cret"
    assert (config == "not a config") is False
    assert config.__eq__("not a config") is NotImplemented


@pytest.mark.parametrize(
    "value, message",
    [(float("nan"), "not a finite number"), (float("inf"), "not a finite number"),
     (2**70, "64-bit range")],
)
def test_numbers_no_setting_can_hold_are_named(value: Any, message: str) -> None:
    with pytest.raises(rankscope.ConfigError, match=message):
        rankscope.Config(gather_timeout_s=value)


def test_rankscope_enabled_0_reads_no_launcher_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSCOPE_ENABLED", "0")
    monkeypatch.setenv("RANK", "not a number")
    assert not rankscope.Profiler().enabled


def test_coroutines_are_timed_each_on_its_own(prof: rankscope.Profiler) -> None:
    @prof.profile_function("request")
    async def request(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    async def main() -> List[float]:
        return await asyncio.gather(request(0.3), request(0.05))

    import inspect

    assert inspect.iscoroutinefunction(request)
    with prof.session("async") as session:
        assert asyncio.run(main()) == [0.3, 0.05]
    stage = stage_of(report_of(session.outcome), "request")
    assert stage["count"] == 2
    assert stage["per_call_ms"]["max"] >= 300.0
    assert 50.0 <= stage["per_call_ms"]["min"] < 300.0


def test_generator_functions_are_refused_by_the_decorators(prof: rankscope.Profiler) -> None:
    with pytest.raises(TypeError, match="generator function"):

        @prof.profile_function
        def numbers() -> Any:
            yield 1


def test_session_start_releases_the_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rank whose peers are late waits at the rendezvous; other Python
    # threads run meanwhile. Rank 1 of 2 over TCP, with no rank 0: it waits
    # out the 2 s timeout, then falls back to the shared directory.
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "9", "RANKSCOPE_SESSION_ID": "lonely",
                        "RANKSCOPE_GATHER_TIMEOUT_S": "2"}.items():
        monkeypatch.setenv(name, value)
    prof = rankscope.Profiler(rankscope.Config.from_env().replace(
        output_dir=str(tmp_path), gpu_source="none", collect_host=False))
    ticks: List[int] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    ticker = threading.Thread(target=tick)
    ticker.start()
    started = time.monotonic()
    try:
        session = prof.session("late")
    except rankscope.SessionError:
        session = None
    waited = time.monotonic() - started
    stop.set()
    ticker.join()
    assert waited >= 1.0, "the rendezvous waited for rank 0"
    assert len(ticks) >= 10, f"the other thread ran {len(ticks)} times in {waited:.1f} s"
    if session is not None:
        session.finish()


def test_a_profiler_with_a_gpu_timer_is_freed(tmp_path: Path) -> None:
    from rankscope import _torch

    class FakeCuda:
        def is_initialized(self) -> bool:
            return False

    class FakeTorch:
        cuda = FakeCuda()

    prof = rankscope.Profiler(rankscope.Config(output_dir=tmp_path, gpu_source="none"))
    prof._set_gpu_timer(_torch.CudaEventTimer(FakeTorch(), prof, 100))
    alive = weakref.ref(prof)
    del prof
    gc.collect()
    assert alive() is None, "the timer holds its profiler weakly"


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_forked_child_leaves_the_parents_session_alone(tmp_path: Path) -> None:
    prof = rankscope.Profiler(rankscope.Config(output_dir=tmp_path, gpu_source="simulated",
                                               collect_host=True, gather_timeout_s=5))
    session = prof.session("forked")
    with prof.stage("parent_before"):
        pass
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its flush and finish are refused, its exit is clean
        said = [f"dir={session.dir}"]
        for call in (session.flush, session.finish):
            try:
                call()
                said.append(f"{call.__name__} went through")
            except rankscope.SessionError as e:
                said.append(str(e))
        os.write(write, "|".join(said).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child_said = os.read(read, 4096).decode().split("|")
    assert status == 0
    assert child_said[0] == "dir=None", child_said
    assert all("is a fork of the rank process" in m for m in child_said[1:]), child_said
    assert len(child_said) == 3, child_said
    with prof.stage("parent_after"):
        pass
    outcome = session.finish()
    names = {s["name"] for s in report_of(outcome)["stages"]}
    assert names == {"parent_before", "parent_after"}


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_forked_child_dies_of_sigterm(tmp_path: Path) -> None:
    import signal

    prof = rankscope.Profiler(rankscope.Config(output_dir=tmp_path, gpu_source="none",
                                               collect_host=False))
    with prof.session("signals"):  # the stop-signal watcher is on from here
        pid = os.fork()
        if pid == 0:  # the child has the handler, not the watcher's thread
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)
            os._exit(42)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
