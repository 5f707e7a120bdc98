"""The Python API of one rank, end to end through real sessions and files."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, List, Tuple

import pyarrow.ipc
import pytest

import rankscope
from conftest import report_of, stage_of


def test_stages_nest_and_a_kept_stage_object_is_reused(prof: rankscope.Profiler) -> None:
    with prof.session("nest", tags={"mode": "tp1", "steps": 3}) as session:
        with prof.stage("generate", metadata={"prompt_len": 77}):
            denoise = prof.stage("denoise")
            for _ in range(3):
                with denoise:
                    with prof.stage("attention"):
                        pass
        prof.start("decode")
        assert prof.stop("decode")
        assert not prof.stop("decode"), "nothing left open"
    report = report_of(session.outcome)
    assert report["session"]["tags"] == {"mode": "tp1", "steps": "3"}
    assert stage_of(report, "denoise")["count"] == 3
    assert stage_of(report, "denoise")["parent"] == "generate"
    assert stage_of(report, "attention")["parent"] == "denoise"
    assert stage_of(report, "generate")["parent"] is None
    assert stage_of(report, "decode")["count"] == 1
    assert sum(s["share_pct"] for s in report["stages"]) <= 100.0 + 1e-9
    assert session.outcome.ranks_reporting == [0]
    assert session.outcome.ranks_missing == []
    assert "denoise" in prof.get_summary()


def test_an_exception_inside_a_stage_propagates_and_the_stage_is_recorded(
    prof: rankscope.Profiler,
) -> None:
    with pytest.raises(KeyError, match="missing"):
        with prof.session("fails") as session:
            with prof.stage("outer"):
                with prof.stage("load"):
                    raise KeyError("missing")
    report = report_of(session.outcome)
    assert stage_of(report, "load")["count"] == 1
    assert stage_of(report, "load")["parent"] == "outer"
    assert stage_of(report, "outer")["count"] == 1


def test_decorators_name_their_stages(prof: rankscope.Profiler) -> None:
    @prof.profile_function
    def encode(x: int) -> int:
        return x + 1

    @prof.profile_function("vae_decode", metadata={"tiles": 4})
    def decode(x: int) -> int:
        return x * 2

    class Model:
        @prof.profile_method
        def forward(self, x: int) -> int:
            return x

        @prof.profile_method("custom_name")
        def backward(self, x: int) -> int:
            return x

    class Bigger(Model):
        pass

    @prof.profile_session("decorated", tags={"by": "decorator"})
    def main() -> int:
        assert encode(1) == 2 and decode(2) == 4
        Model().forward(1)
        Bigger().forward(2)
        Bigger().forward(3)
        Model().backward(1)
        return 7

    assert main() == 7
    assert encode.__name__ == "encode", "functools.wraps keeps the name"
    session_dirs = list(Path(prof.config.output_dir).glob("decorated-*"))
    assert len(session_dirs) == 1
    report = json.loads((session_dirs[0] / "report.json").read_text())
    names = {s["name"]: s["count"] for s in report["stages"]}
    qualname_of_encode = encode.__qualname__
    assert names[qualname_of_encode] == 1
    assert names["vae_decode"] == 1
    assert names["Model.forward"] == 1
    assert names["Bigger.forward"] == 2
    assert names["custom_name"] == 1
    assert report["session"]["tags"] == {"by": "decorator"}


def test_records_reach_their_tables(prof: rankscope.Profiler, tmp_path: Path) -> None:
    with prof.session("records") as session:
        prof.record_diffusion_step(step=0, timestep=999.0, block_size=16,
                                   computation_time_ms=41.0, guidance_scale=5.0)
        prof.record_diffusion_step(step=1, computation_time_ms=40.0)
        prof.record_block_computation(block_index=0, block_size=16,
                                      computation_time_ms=170.0, memory_usage_mb=812.5)
        prof.record_model_parameters("transformer", 1_300_000_000)
        prof.record_metric("tokens", 4096.0)
        prof.record_throughput(64.0, seconds=2.0)
        prof.add_event("milestone", {"progress": 0.5, "path": tmp_path, "nested": [1, (2, 3)]})
        prof.add_event("bare")
        prof.memory_snapshot("given", allocated=1 << 20, reserved=2 << 20, max_allocated=3 << 20)
    report = report_of(session.outcome)
    rows = {r["rank"]: r for r in report["ranks"]}[0]["rows"]
    assert rows["diffusion_steps"] == 2
    assert rows["blocks"] == 1
    assert rows["model_parameters"] == 1
    assert rows["metrics"] == 5, "three of the program's (a metric, throughput's two), two of its cost"
    assert rows["events"] == 2
    assert rows["memory_snapshots"] == 1
    assert report["diffusion"]["model_parameters"]["transformer"] == 1_300_000_000

    raw = Path(session.outcome.session_dir) / "raw"
    metrics = pyarrow.ipc.open_file(raw / "metrics.arrow").read_all().to_pylist()
    own = [(m["section"], m["name"]) for m in metrics if m["section"] != "rankscope_overhead"]
    assert own == [("custom", "tokens"), ("throughput", "items"), ("throughput", "items_per_s")]
    assert [m["name"] for m in metrics if m["section"] == "rankscope_overhead"] == [
        "stage_ns_per_call", "flush_ms"], "the profiler's own cost (no sampler in this test)"
    events = pyarrow.ipc.open_file(raw / "events.arrow").read_all().to_pylist()
    payload = [e for e in events if e["name"] == "milestone"][0]["payload"]
    assert json.loads(payload) == {"progress": 0.5, "path": str(tmp_path), "nested": [1, [2, 3]]}
    snapshots = pyarrow.ipc.open_file(raw / "memory_snapshots.arrow").read_all().to_pylist()
    assert snapshots[0]["allocated_bytes"] == 1 << 20
    assert snapshots[0]["max_allocated_bytes"] == 3 << 20


def test_a_disabled_profiler_records_nothing_and_writes_nothing(tmp_path: Path) -> None:
    prof = rankscope.Profiler(rankscope.Config(enabled=False, output_dir=tmp_path / "out"))
    assert not prof.enabled
    assert prof.config is None
    with prof.session("off") as session:
        with prof.stage("x"):
            pass
        kept = prof.stage("y")
        with kept:
            pass
        prof.record_metric("m", 1.0)
    assert session.outcome.session_dir is None
    assert session.outcome.files == []
    assert not (tmp_path / "out").exists()
    assert prof.get_summary() is None
    assert prof.get_current_metrics()["enabled"] is False


def test_rankscope_enabled_0_turns_the_profiler_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANKSCOPE_ENABLED", "0")
    monkeypatch.setenv("RANKSCOPE_OUTPUT_DIR", str(tmp_path / "out"))
    assert not rankscope.Profiler().enabled
    assert not rankscope.Profiler.from_env().enabled


def test_current_metrics_show_the_open_stages_and_rows(prof: rankscope.Profiler) -> None:
    with prof.session("live"):
        for _ in range(5):
            with prof.stage("step"):
                pass
        with prof.stage("outer"):
            live = prof.get_current_metrics()
    assert live["session"] == "live"
    assert live["open_stages"] == ["outer"]
    assert live["rows"]["stages"] == 5
    assert live["dropped"]["stages"] == 0
    assert live["elapsed_s"] > 0
    assert (live["rank"], live["world_size"]) == (0, 1)
    assert prof.get_current_metrics()["session"] is None, "finished"


def test_one_stage_object_entered_on_two_threads_records_both(prof: rankscope.Profiler) -> None:
    shared = prof.stage("work")
    inside = threading.Barrier(2)

    def run() -> None:
        with shared:
            inside.wait()  # both threads are inside the stage at once

    with prof.session("threads") as session:
        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert stage_of(report_of(session.outcome), "work")["count"] == 2


class Recording:
    """A GPU timer that records what the stages ask of it: the interface
    the CUDA-event timer implements (begin, end, resolve)."""

    def __init__(self, prof: rankscope.Profiler) -> None:
        self.prof = prof
        self.calls: List[Tuple[str, Any]] = []
        self.resolved = False

    def begin(self) -> int:
        self.calls.append(("begin", None))
        return len(self.calls)

    def end(self, name: str, handle: int) -> None:
        self.calls.append(("end", (name, handle)))
        self.prof.record_stage_gpu_time(name, 3.0)

    def resolve(self) -> None:
        self.resolved = True


def test_a_gpu_timer_times_each_stage_and_the_report_shows_gpu_beside_host_time(
    prof: rankscope.Profiler,
) -> None:
    with prof.session("gpu") as session:
        timer = Recording(prof)
        prof._set_gpu_timer(timer)
        decode = prof.stage("decode")
        for _ in range(2):
            with decode:
                pass
    assert timer.resolved, "the timer is resolved when the session ends"
    assert prof._gpu_timer() is None, "and cleared"
    assert timer.calls == [("begin", None), ("end", ("decode", 1)),
                           ("begin", None), ("end", ("decode", 3))]
    stage = stage_of(report_of(session.outcome), "decode")
    assert stage["gpu_s"]["avg"] == pytest.approx(0.006)
    assert "GPU time per stage" in prof.get_summary()


def test_gpu_timing_is_off_without_cuda(prof: rankscope.Profiler) -> None:
    with prof.session("no-cuda"):
        # torch may be importable here, CUDA is not: no timer is set.
        assert prof._gpu_timer() is None


def test_stage_metadata_of_any_type_is_kept_as_text(prof: rankscope.Profiler) -> None:
    class Shape:
        def __str__(self) -> str:
            return "Shape(2, 3)"

    nested: List[Any] = []
    nested.append(nested)  # a list that holds itself
    with prof.session("meta") as session:
        with prof.stage("a", metadata={"shape": Shape(), "nan": float("nan"), "big": 1 << 70}):
            pass
        with prof.stage("b", metadata={"loop": nested}):
            pass
    assert stage_of(report_of(session.outcome), "b")["count"] == 1


def test_a_session_twice_is_refused_with_a_clear_error(prof: rankscope.Profiler) -> None:
    with prof.session("first"):
        with pytest.raises(rankscope.SessionError, match="already running"):
            prof.session("second")


def test_a_flush_writes_a_part_now_and_the_session_goes_on(tmp_path: Path) -> None:
    # No periodic flush: the parts are the test's own.
    prof = rankscope.Profiler(rankscope.Config(output_dir=tmp_path / "out", gpu_source="none",
                                               collect_host=False, flush_interval_s=0))
    session = prof.session("flushed")
    assert session.flush() is False, "nothing recorded yet"
    with prof.stage("before"):
        pass
    assert session.flush() is True
    parts = [p for p in Path(session.dir).iterdir() if p.suffix == ".part"]
    assert len(parts) == 1, parts
    assert session.flush() is False, "nothing new since"
    with prof.stage("after"):
        pass
    outcome = session.finish()
    assert session.flush() is False, "finished"
    report = report_of(outcome)
    assert sorted(s["name"] for s in report["stages"]) == ["after", "before"]
    assert not any(p.suffix == ".part" for p in Path(outcome.session_dir).iterdir())


@pytest.mark.parametrize("explicit", [False, True], ids=["diffusion_steps", "prof_step"])
def test_rolling_windows_each_get_a_report_of_their_steps(tmp_path: Path, explicit: bool) -> None:
    prof = rankscope.Profiler(rankscope.Config(output_dir=tmp_path / "out", gpu_source="none",
                                               collect_host=False, window_every_steps=3))
    session = prof.session("windows")
    for step in range(7):
        with prof.stage("denoise"):
            pass
        # A program that calls prof.step() counts its steps there, once;
        # one that does not counts its diffusion steps.
        prof.record_diffusion_step(step, computation_time_ms=1.0)
        if explicit:
            prof.step()
    outcome = session.finish()
    session_dir = Path(outcome.session_dir)
    for index, steps in [(1, 3), (2, 3), (3, 1)]:
        window = json.loads((session_dir / f"window-{index}" / "report.json").read_text())
        assert window["window"]["index"] == index
        assert window["window"]["first_step"] == 3 * (index - 1)
        assert stage_of(window, "denoise")["count"] == steps, index
        assert window["diffusion"]["steps"]["count"] == steps, index
    assert window["window"]["ranks_cut_short"] == [0], "the session ended in window 3"
    assert not (session_dir / "window-4").exists()
    report = report_of(outcome)
    assert report["window"] is None
    assert stage_of(report, "denoise")["count"] == 7


def test_finish_returns_the_same_outcome_twice(prof: rankscope.Profiler) -> None:
    session = prof.session("twice")
    first = session.finish()
    assert session.finish() is first
    assert first.report_html is not None and Path(first.report_html).exists()
    assert "Outcome(session_dir=" in repr(first)


def test_config_keys_round_trip_and_pickle() -> None:
    config = rankscope.Config(preset="production", output_dir="/tmp/x", gather_timeout_s=5)
    assert config.gather_timeout_s == 5.0
    assert config.gpu_interval_s == 2.0, "the production preset's default"
    assert config.to_dict()["output_dir"] == "/tmp/x"
    assert pickle.loads(pickle.dumps(config)) == config
    changed = config.replace(gather_timeout_s=9)
    assert changed.gather_timeout_s == 9.0 and changed.preset == "production"
    assert changed.gpu_interval_s == 2.0
    assert "gpu_timing" in rankscope.Config.keys()
    with pytest.raises(AttributeError, match="no setting `nope`"):
        config.nope


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"outptu_dir": "x"}, "configuration key `outptu_dir`: no such setting; did you mean `output_dir`"),
        ({"gather_timeout_s": "soon"}, "configuration key `gather_timeout_s`: invalid type: string"),
        ({"gather_timeout_s": object()}, "configuration key `gather_timeout_s`: a value of type object"),
        ({"enabled": 3}, "configuration key `enabled`: invalid type: integer"),
        ({"gather_timeout_s": -1}, "`gather_timeout_s` = -1 is outside"),
        ({"gpu_timing": "sometimes"}, "configuration key `gpu_timing`: unknown variant `sometimes`"),
        ({"preset": "fast"}, "configuration key `preset`: unknown variant `fast`"),
    ],
)
def test_bad_configuration_keys_are_named(keys: dict, message: str) -> None:
    with pytest.raises(rankscope.ConfigError) as raised:
        rankscope.Config(**keys)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_yaml_configuration_and_its_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(f"output_dir: {tmp_path / 'out'}\ngather_timeout_s: 7\ngpu_source: none\n")
    prof = rankscope.Profiler.from_yaml(good)
    assert isinstance(prof, rankscope.Profiler)
    assert prof.config.gather_timeout_s == 7.0
    monkeypatch.setenv("RANKSCOPE_GATHER_TIMEOUT_S", "9")
    assert rankscope.Profiler.from_yaml(good).config.gather_timeout_s == 9.0, "variables win"
    monkeypatch.delenv("RANKSCOPE_GATHER_TIMEOUT_S")

    broken = tmp_path / "broken.yaml"
    broken.write_text("output_dir: [unclosed\n")
    with pytest.raises(rankscope.ConfigError, match="broken.yaml"):
        rankscope.Profiler.from_yaml(broken)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("gather_timeout: 5\n")
    with pytest.raises(rankscope.ConfigError, match="unknown field `gather_timeout`"):
        rankscope.Profiler.from_yaml(unknown)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("gather_timeout_s: soon\n")
    with pytest.raises(rankscope.ConfigError, match="wrong.yaml"):
        rankscope.Profiler.from_yaml(wrong)
    with pytest.raises(rankscope.ConfigError, match="cannot read configuration file"):
        rankscope.Profiler.from_yaml(tmp_path / "absent.yaml")


def test_a_bad_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSCOPE_GATHER_TIMEOUT_S", "soon")
    with pytest.raises(rankscope.ConfigError, match="RANKSCOPE_GATHER_TIMEOUT_S"):
        rankscope.Profiler()


def test_stage_objects_are_shared_by_name_unless_they_carry_metadata(
    prof: rankscope.Profiler,
) -> None:
    assert prof.stage("decode") is prof.stage("decode")
    assert prof.stage("decode") is not prof.stage("encode")
    assert prof.stage("decode", metadata={"i": 1}) is not prof.stage("decode", metadata={"i": 1})
    with pytest.raises(TypeError):
        prof.stage(42)  # type: ignore[arg-type]
    # A shared object nests in itself: leaving ends the innermost call.
    with prof.session("recursive") as session:
        def depth(n: int) -> None:
            with prof.stage("recurse"):
                if n:
                    depth(n - 1)

        depth(3)
    assert stage_of(report_of(session.outcome), "recurse")["count"] == 4
    raw = Path(session.outcome.session_dir) / "raw" / "stages.arrow"
    depths = sorted(row["depth"] for row in pyarrow.ipc.open_file(raw).read_all().to_pylist())
    assert depths == [0, 1, 2, 3]


def test_torch_profiler_windows_off_import_no_torch(tmp_path: Path) -> None:
    """Without windows configured, a session never imports torch."""
    code = (
        "import sys, rankscope\n"
        f"prof = rankscope.Profiler(rankscope.Config(output_dir={str(tmp_path)!r}, gpu_source='none',"
        " collect_host=False))\n"
        "with prof.session('no-torch'):\n"
        "    prof.step()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_torch_profiler_windows_without_torch_warn_and_record_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None in sys.modules makes `import torch` raise ImportError.
    monkeypatch.setitem(sys.modules, "torch", None)
    prof = rankscope.Profiler(rankscope.Config(
        output_dir=tmp_path, gpu_source="none", collect_host=False, torch_profiler_active=2))
    with pytest.warns(RuntimeWarning, match="torch_profiler_active is 2 but torch cannot be imported"):
        session = prof.session("no-torch")
    with prof.stage("work"):
        prof.step()
    report = report_of(session.finish())
    assert report["kernel_traces"] == []
    assert stage_of(report, "work")["count"] == 1


def test_torch_profiler_windows_on_cpu_reach_the_report(tmp_path: Path) -> None:
    """A real torch.profiler window on this process (CPU activities): its
    operators in the report, the window's steps counted by prof.step(); a
    window still open at the session's end is read as it stands."""
    import torch

    config = rankscope.Config(output_dir=tmp_path, gpu_source="none", collect_host=False,
                              torch_profiler_wait=0, torch_profiler_warmup=1,
                              torch_profiler_active=2, torch_profiler_repeat=2,
                              torch_profiler_activities="cpu")
    prof = rankscope.Profiler(config)
    x = torch.randn(32, 32)
    with prof.session("windows") as session:
        # torch's schedule: step 0 warms up, 1–2 are window 1; 3 warms up,
        # 4–5 are window 2, still open when the session ends after step 4.
        for _ in range(5):
            with prof.stage("step"):
                torch.mm(x, x)
            prof.step()
    report = report_of(session.outcome)
    mm = [op for op in report["cpu_ops"] if op["name"] == "aten::mm"]
    assert mm and mm[0]["calls"] == 3, report["cpu_ops"]
    assert report["kernel_traces"][0]["rank"] == 0


def test_torch_profiler_trace_dir_keeps_each_windows_trace(tmp_path: Path) -> None:
    """With torch_profiler_trace_dir set, each window's trace stays there,
    gzipped and named by rank and window, as well as reaching the report."""
    import gzip

    import torch

    traces = tmp_path / "traces"
    config = rankscope.Config(output_dir=tmp_path / "out", gpu_source="none", collect_host=False,
                              torch_profiler_wait=0, torch_profiler_warmup=0,
                              torch_profiler_active=1, torch_profiler_repeat=2,
                              torch_profiler_activities="cpu", torch_profiler_trace_dir=traces)
    prof = rankscope.Profiler(config)
    x = torch.randn(16, 16)
    with prof.session("kept") as session:
        for _ in range(3):
            torch.mm(x, x)
            prof.step()
    assert sorted(p.name for p in traces.iterdir()) == [
        "rank0-window1.pt.trace.json.gz", "rank0-window2.pt.trace.json.gz"]
    trace = json.loads(gzip.decompress((traces / "rank0-window1.pt.trace.json.gz").read_bytes()))
    assert any(e.get("name") == "aten::mm" for e in trace["traceEvents"])
    mm = [op for op in report_of(session.outcome)["cpu_ops"] if op["name"] == "aten::mm"]
    assert mm and mm[0]["calls"] == 2, "one call in each window reached the report"


def _single_process_group() -> Any:
    """torch.distributed over gloo with a world of this process alone."""
    import socket

    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    return dist


def test_collectives_are_recorded_on_the_host_and_torch_is_left_as_it_was(tmp_path: Path) -> None:
    import torch

    dist = _single_process_group()
    try:
        original = dist.all_reduce
        prof = rankscope.Profiler(rankscope.Config(output_dir=tmp_path, gpu_source="none",
                                                   collect_host=False))
        with prof.session("collectives") as session:
            assert dist.all_reduce is not original
            dist.all_reduce(torch.ones(4))
            dist.broadcast(torch.ones(2, dtype=torch.float64), src=0)
        assert dist.all_reduce is original, "the original is back after the session"
        report = report_of(session.outcome)
        rows = {c["kind"]: c for c in report["collectives"]}
        assert rows["all_reduce"]["calls"] == 1 and rows["all_reduce"]["bytes"] == 16
        assert rows["broadcast"]["bytes"] == 16
        # One rank: nothing to compare with, and said so.
        assert rows["all_reduce"]["compared"] == 0 and rows["all_reduce"]["wait_s"] is None
        assert report["kernel_traces"] == []

        off = rankscope.Profiler(rankscope.Config(output_dir=tmp_path / "off", gpu_source="none",
                                                  collect_host=False, record_collectives=False))
        with off.session("untouched") as untouched:
            assert dist.all_reduce is original
            dist.all_reduce(torch.ones(4))
        assert report_of(untouched.outcome)["collectives"] == []
    finally:
        dist.destroy_process_group()
