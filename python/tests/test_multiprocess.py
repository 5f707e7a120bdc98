"""Real multi-process jobs of Python ranks: the example pipeline under
`rankscope launch` and under real torchrun (torch from PyPI, the CPU path
with the gloo backend). Rank 0's report must name the planted straggler."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from conftest import ROOT

EXAMPLE = ROOT / "examples" / "python" / "tp_pipeline.py"
#: The CLI, built by scripts/test.sh (RANKSCOPE_BIN names another).
RANKSCOPE = Path(os.environ.get("RANKSCOPE_BIN", ROOT / "target" / "debug" / "rankscope"))
#: torchrun of the interpreter running the tests (the test environment's).
TORCHRUN = Path(sys.executable).with_name("torchrun")


def run_job(command: List[str], out: Path, **env: str) -> Dict:
    """Runs a job of 3 ranks whose rank 2 is slow, with `env` added to the
    environment; returns rank 0's report."""
    env = dict(os.environ, RANKSCOPE_GPU_SOURCE="none", RANKSCOPE_GATHER_TIMEOUT_S="60",
               PYTHONUNBUFFERED="1", **env)
    # The straggler decodes 1.4 x 150 ms: 60 ms over the others, far above
    # what a busy 2-core machine adds to a sleep.
    args = ["--output-dir", str(out), "--straggler", "2", "--steps", "4", "--step-ms", "5",
            "--decode-ms", "150"]
    done = subprocess.run(command + args, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    reports = list(out.glob("t2v-*/report.json"))
    assert len(reports) == 1, f"one report: {reports}\n{done.stdout}\n{done.stderr}"
    return json.loads(reports[0].read_text())


def assert_names_rank_2(report: Dict, transport: str) -> None:
    session = report["session"]
    assert session["ranks_reporting"] == [0, 1, 2]
    assert session["ranks_missing"] == []
    assert session["transport"] == transport
    assert session["clock_sync"] == f"{transport}-pingpong"
    stragglers = [(s["rank"], s["stage"]) for s in report["stragglers"]]
    # Other stages may name other ranks: their steps are 5 ms, within noise.
    assert (2, "vae_decode") in stragglers, stragglers
    decode = [s for s in report["stages"] if s["name"] == "vae_decode"][0]
    assert decode["total_s"]["max_rank"] == 2
    denoise = [s for s in report["stages"] if s["name"] == "denoise_step"][0]
    assert denoise["count"] == 3 * 2 * 4, "3 ranks, 2 blocks of 4 steps"
    assert denoise["parent"] == "block"


def test_rankscope_launch_names_the_straggler(tmp_path: Path) -> None:
    assert RANKSCOPE.exists(), f"{RANKSCOPE} is built by scripts/test.sh"
    report = run_job([str(RANKSCOPE), "launch", "-n", "3", "--", sys.executable, str(EXAMPLE)],
                     tmp_path)
    assert report["session"]["launcher"] == "torchrun"
    assert_names_rank_2(report, "tcp")


def test_mpirun_with_the_mpi_build_gathers_over_mpi(tmp_path: Path) -> None:
    wheels = list((ROOT / "target" / "python-mpi").glob("rankscope-*.whl"))
    assert len(wheels) == 1, "scripts/test.sh builds the wheel with the mpi feature"
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(site), str(wheels[0])], check=True)
    # Open MPI refuses root unless told (CI runs as root); --oversubscribe:
    # 3 ranks on a 2-core machine.
    report = run_job(["mpirun", "--oversubscribe", "-n", "3", sys.executable, str(EXAMPLE)],
                     tmp_path / "out", OMPI_ALLOW_RUN_AS_ROOT="1",
                     OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONPATH=str(site))
    session = report["session"]
    assert (session["launcher"], session["transport"]) == ("openmpi", "mpi")
    assert session["clock_sync"] == "mpi-pingpong"
    assert_names_rank_2(report, "mpi")


def test_torchrun_names_the_straggler(tmp_path: Path) -> None:
    assert TORCHRUN.exists(), f"{TORCHRUN}: torch is installed by scripts/test.sh"
    report = run_job([str(TORCHRUN), "--standalone", "--nproc_per_node=3", str(EXAMPLE)], tmp_path)
    assert report["session"]["launcher"] == "torchrun"
    assert report["session"]["run_id"], "torchrun's TORCHELASTIC_RUN_ID identifies the run"
    assert_names_rank_2(report, "tcp")


def test_torchrun_python_tracing_names_the_rank_whose_function_is_slow(tmp_path: Path) -> None:
    """Python function tracing on 4 real torchrun ranks: rank 2's
    ``Work.run`` sleeps 60 ms longer (its slow decode); python_functions[]
    names rank 2 as the one with the most of its own time, and the merged
    trace shows each rank's calls of it."""
    assert TORCHRUN.exists(), f"{TORCHRUN}: torch is installed by scripts/test.sh"
    report = run_job([str(TORCHRUN), "--standalone", "--nproc_per_node=4", str(EXAMPLE)],
                     tmp_path, RANKSCOPE_PYTHON_TRACING="session")
    (run,) = [f for f in report["python_functions"] if f["name"] == "__main__.Work.run"]
    assert run["max_rank"] == 2, run
    assert run["calls"] == 4 * (1 + 2 * 4 + 1), "text encoding, 2 blocks of 4 steps, decode"
    assert run["file"].endswith("tp_pipeline.py")
    assert not any(f["name"].startswith("rankscope.") for f in report["python_functions"])
    # The function is a link of the verdict's chain: rank 2, then where.
    slow = [k for k in report["kernel_stragglers"] if k["category"] == "python_function"]
    assert {(k["rank"], k["kernel"]) for k in slow} == {(2, "__main__.Work.run")}, slow
    assert report["verdict"]["ranks"] == [2], report["verdict"]
    assert report["verdict"]["kernel"] == "__main__.Work.run", report["verdict"]
    (session_dir,) = tmp_path.glob("t2v-*")
    with gzip.open(session_dir / "trace.json.gz") as f:
        events = json.load(f)["traceEvents"]
    ranks_with_calls = {e["pid"] - 1 for e in events
                        if e.get("cat") == "python" and e["name"] == "__main__.Work.run"}
    assert ranks_with_calls == {0, 1, 2, 3}


KERNELS_EXAMPLE = ROOT / "examples" / "python" / "torch_kernels.py"


def run_four_ranks(example: Path, session: str, tmp_path: Path, args: List[str],
                   **env: str) -> Dict:
    """`example` on 4 real torchrun ranks over gloo with `args`, without GPU
    telemetry unless `env` (added to the environment) says; rank 0's report
    of session `session`."""
    assert TORCHRUN.exists(), f"{TORCHRUN}: torch is installed by scripts/test.sh"
    full = {**os.environ, "RANKSCOPE_GPU_SOURCE": "none", "RANKSCOPE_GATHER_TIMEOUT_S": "60",
            "PYTHONUNBUFFERED": "1", **env}
    done = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node=4", str(example),
         "--output-dir", str(tmp_path), *args],
        env=full, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    reports = list(tmp_path.glob(f"{session}-*/report.json"))
    assert len(reports) == 1, reports
    report: Dict = json.loads(reports[0].read_text())
    assert report["session"]["ranks_reporting"] == [0, 1, 2, 3]
    return report


def run_kernels_job(tmp_path: Path, **env: str) -> Dict:
    """examples/python/torch_kernels.py on 4 real torchrun ranks over gloo,
    7 steps, rank 2's load_kv slow; `env` added. Rank 0's report."""
    return run_four_ranks(KERNELS_EXAMPLE, "torch-kernels", tmp_path,
                          ["--steps", "7", "--load-ms", "25"], **env)


def assert_all_reduce_waits_for_rank_2(report: Dict) -> None:
    """Every call of every rank recorded on the host, rank 2 last to
    arrive, the others' time told as waiting for it."""
    collectives = {c["rank"]: c for c in report["collectives"] if c["kind"] == "all_reduce"}
    assert sorted(collectives) == [0, 1, 2, 3]
    assert all(c["calls"] == 7 and c["compared"] == 7 for c in collectives.values()), collectives
    # Of the steady calls (warm-up and the steps the profiler perturbed left
    # out), rank 2 arrives last at nearly all.
    steady = collectives[2]["steady_compared"]
    assert steady >= 3 and collectives[2]["last_to_arrive"] >= steady - 1, collectives
    assert all(collectives[2]["wait_s"] < c["wait_s"] for r, c in collectives.items() if r != 2)
    verdict = report["verdict"]
    assert (verdict["kind"], verdict["ranks"]) == ("straggler", [2]), verdict
    assert (verdict["stage"], verdict["collective"]) == ("attention", "all_reduce"), verdict
    messages = [r["message"] for r in report["recommendations"]]
    assert not any("`all_reduce`" in m and "place to optimise" in m for m in messages), messages


def test_torchrun_collectives_are_split_into_waiting_without_a_window(tmp_path: Path) -> None:
    """No torch.profiler window: the package records each all_reduce on
    the host, and the report splits its time into waiting for rank 2."""
    report = run_kernels_job(tmp_path)
    assert report["kernel_traces"] == [] and report["cpu_ops"] == []
    assert_all_reduce_waits_for_rank_2(report)
    # The process group came first: the ranks shared a secret token through
    # its store, so none derived the public one (and said so).
    notices = [n["message"] for n in report["session"]["notices"]]
    assert not any(n.startswith("no RANKSCOPE_TOKEN") for n in notices), notices


def test_torchrun_torch_profiler_windows_name_the_slow_op_and_the_wait(tmp_path: Path) -> None:
    """Real torch.profiler (CPU activities) on 4 real torchrun ranks over
    gloo, windows set by variables alone: rank 0's report holds every
    rank's operators and collectives on one clock, names rank 2's slow
    `load_kv` with its stage, and tells the all-reduce's time as waiting
    for rank 2, not as work to optimise."""
    report = run_kernels_job(
        tmp_path, RANKSCOPE_TORCH_PROFILER_WAIT="1", RANKSCOPE_TORCH_PROFILER_WARMUP="1",
        RANKSCOPE_TORCH_PROFILER_ACTIVE="3", RANKSCOPE_TORCH_PROFILER_ACTIVITIES="cpu")
    traces = report["kernel_traces"]
    assert [t["rank"] for t in traces] == [0, 1, 2, 3]
    assert all(t["source"] == f"rank {t['rank']}'s torch.profiler windows" for t in traces)

    load = [op for op in report["cpu_ops"] if op["name"] == "load_kv"]
    assert len(load) == 1, [op["name"] for op in report["cpu_ops"]]
    assert (load[0]["calls"], load[0]["max_rank"]) == (4 * 3, 2), "3 steps of 4 ranks in the window"
    assert any(op["name"] == "aten::mm" for op in report["cpu_ops"])
    slow = [k for k in report["kernel_stragglers"] if k["kernel"] == "load_kv"]
    assert [(k["rank"], k["category"]) for k in slow] == [(2, "cpu_op")], report["kernel_stragglers"]
    assert any("stage `attention`" in e for e in slow[0]["evidence"]), slow[0]

    # The window saw 3 of the calls; the host recorded all 7, counted once.
    assert_all_reduce_waits_for_rank_2(report)


#: A rank that runs steps of about 10 ms with a matrix product each, calling
#: prof.step() after each, until its session's folder holds `stop`.
STEPPING_RANK = """
import sys, time
from pathlib import Path
import torch
import rankscope

prof = rankscope.Profiler()
x = torch.randn(64, 64)

def work():
    torch.mm(x, x)
    time.sleep(0.01)

with prof.session("stepping") as session:
    stop = Path(session.dir) / "stop"
    for _ in range(3000):
        with prof.stage("step"):
            work()
        prof.step()
        if stop.exists():
            break
"""


# The stepping ranks share no collective: one may run a second or more
# ahead of rank 0 (its start, torch's import, a loaded machine). Windows
# are planned on rank 0's count of steps; a delay of 100 steps (1 s) keeps
# the window ahead of a rank that started first.
PAST_START_SKEW = ["--delay-steps", "100"]


def test_torchrun_a_trigger_with_torch_captures_the_window_on_every_rank(tmp_path: Path) -> None:
    """`rankscope trigger --torch` from another process while 2 real
    torchrun ranks run: each rank captures exactly the window's steps with
    torch.profiler (CPU activities), and the window's report has both
    ranks' operators; the job goes on. Asked through the session folder,
    then through rank 0's TCP listener with the job's token."""
    assert TORCHRUN.exists() and RANKSCOPE.exists(), "built and installed by scripts/test.sh"
    script = tmp_path / "stepping_rank.py"
    script.write_text(STEPPING_RANK)
    out = tmp_path / "out"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = "a-secret-of-this-job"
    env = dict(os.environ, RANKSCOPE_GPU_SOURCE="none", RANKSCOPE_OUTPUT_DIR=str(out),
               RANKSCOPE_TORCH_PROFILER_ACTIVITIES="cpu", PYTHONUNBUFFERED="1",
               RANKSCOPE_PORT=str(port), RANKSCOPE_TOKEN=token)
    job = subprocess.Popen([str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(script)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        # Rank 0 keeps control/live while its session runs: a trigger is
        # answered from then on.
        while not (sessions := list(out.glob("stepping-*/control/live"))):
            assert time.monotonic() < deadline and job.poll() is None, "no session started"
            time.sleep(0.05)
        session_dir = sessions[0].parent.parent
        trigger = subprocess.run(
            [str(RANKSCOPE), "trigger", "--dir", str(session_dir), "--steps", "5", "--torch",
             *PAST_START_SKEW, "--wait", "--timeout", "120"],
            capture_output=True, text=True, timeout=180)
        assert trigger.returncode == 0, trigger.stdout + trigger.stderr
        assert job.poll() is None, "the job goes on while the window is reported"
        report = json.loads((session_dir / "window-1" / "report.json").read_text())
        remote = subprocess.run(
            [str(RANKSCOPE), "trigger", f"127.0.0.1:{port}", "--steps", "5", "--torch",
             *PAST_START_SKEW, "--wait", "--timeout", "120"],
            capture_output=True, text=True, timeout=180,
            env=dict(os.environ, RANKSCOPE_TOKEN=token))
        assert remote.returncode == 0, remote.stdout + remote.stderr
        assert remote.stdout.strip().endswith("window-2"), remote.stdout
        second = json.loads((session_dir / "window-2" / "report.json").read_text())
        traced = subprocess.run(
            [str(RANKSCOPE), "trigger", "--dir", str(session_dir), "--steps", "5", "--python",
             *PAST_START_SKEW, "--wait", "--timeout", "120"],
            capture_output=True, text=True, timeout=180)
        assert traced.returncode == 0, traced.stdout + traced.stderr
        third = json.loads((session_dir / "window-3" / "report.json").read_text())
    finally:
        (out.glob("stepping-*").__next__() / "stop").touch()
        output, _ = job.communicate(timeout=180)
    assert job.returncode == 0, output
    assert report["window"]["steps"] == 5
    assert report["session"]["ranks_reporting"] == [0, 1]
    assert sorted(t["rank"] for t in report["kernel_traces"]) == [0, 1]
    for window in (report, second):
        mm = [op for op in window["cpu_ops"] if op["name"] == "aten::mm"]
        assert mm and mm[0]["calls"] == 2 * 5, (window["window"], window["cpu_ops"])
        stage = [s for s in window["stages"] if s["name"] == "step"][0]
        assert stage["count"] == 2 * 5
    assert second["session"]["ranks_reporting"] == [0, 1]
    # `--python`: each rank traced its functions in that window alone.
    (work,) = [f for f in third["python_functions"] if f["name"] == "__main__.work"]
    assert work["calls"] == 2 * 5, work
    assert (work["min_rank"], work["max_rank"]) in [(0, 1), (1, 0)], work
    assert not any(f["name"] == "__main__.work" for f in report["python_functions"])
    # And in that window alone: the session's report has its calls, no more.
    whole = json.loads((session_dir / "report.json").read_text())
    (in_session,) = [f for f in whole["python_functions"] if f["name"] == "__main__.work"]
    assert in_session["calls"] == 2 * 5, in_session


CP_EXAMPLE = ROOT / "examples" / "python" / "cp_attention.py"


def run_cp_job(tmp_path: Path, args: List[str], **env: str) -> Dict:
    """examples/python/cp_attention.py on 4 real torchrun ranks over gloo
    with `args`, `env` added; rank 0's report."""
    return run_four_ranks(CP_EXAMPLE, "cp-attention", tmp_path, args, **env)


def warnings_of(report: Dict) -> List[str]:
    return [r["message"] for r in report["recommendations"] if r["severity"] != "info"]


CATEGORIES = ("setup", "warmup", "profiler", "stall", "work", "collective_transfer",
              "collective_wait", "untracked", "teardown")


def assert_account_adds_up(report: Dict) -> Dict:
    """Each rank's time account, and the job's, adds up to its wall time
    (0.1 % or 1 ms), and the findings' costs to the job's at most; returns
    the account."""
    account: Dict = report["time_account"]
    entries = [(f"rank {r['rank']}", r) for r in account["ranks"]] + [("job", account["job"])]
    for who, entry in entries:
        values = [entry["categories"][c] for c in CATEGORIES]
        assert all(v is None or v >= 0 for v in values), (who, entry["categories"])
        total = sum(v for v in values if v is not None)
        assert abs(total - entry["wall_s"]) <= max(1e-3, 1e-3 * entry["wall_s"]), (who, entry)
    wall = account["job"]["wall_s"]
    costs = sum(r["cost_s"] for r in report["recommendations"] if r["cost_s"] is not None)
    assert costs <= wall * (1 + 1e-9), (costs, wall, report["recommendations"])
    return account


def steady_s(categories: Dict) -> float:
    """The steady time of an account's categories: work, transfer, wait."""
    return float(categories["work"] + categories["collective_transfer"]
                 + categories["collective_wait"])


def test_the_verdict_names_the_rank_the_others_wait_for_in_a_real_all_gather(
        tmp_path: Path) -> None:
    """A context-parallel step over real gloo all_gathers: rank 3 holds 3x
    the others' query chunk, and its attention waits 3x as long for its
    (simulated) kernels: 40 ms a step past the others, more than a loaded
    machine's gloo transfer of the gathered keys. Every rank's first step
    is slower (warm-up),
    torch.profiler windows run (their start and stop are the profiler's own
    time), and all four ranks share one simulated GPU that runs hot. The
    verdict names rank 3, `attention`, the all_gather it arrives last at and
    a slower CPU operator; nothing blames the ranks that wait, the shared GPU
    explains nothing, and the all-gather is no place to optimise."""
    report = run_cp_job(
        tmp_path, ["--slow-rank", "3", "--factor", "3", "--warmup-ms", "300", "--gpu-ms", "20"],
        RANKSCOPE_GPU_SOURCE="simulated", RANKSCOPE_SIMULATED_GPUS="1",
        RANKSCOPE_SIMULATED_HOT_RANK="0", RANKSCOPE_TORCH_PROFILER_WAIT="2",
        RANKSCOPE_TORCH_PROFILER_WARMUP="1", RANKSCOPE_TORCH_PROFILER_ACTIVE="3",
        RANKSCOPE_TORCH_PROFILER_ACTIVITIES="cpu")
    verdict = report["verdict"]
    assert (verdict["kind"], verdict["ranks"]) == ("straggler", [3]), verdict
    assert (verdict["stage"], verdict["collective"]) == ("attention", "all_gather"), verdict
    assert verdict["kernel"] and verdict["kernel"].startswith("aten::"), verdict
    assert verdict["cost_pct"] > 1.0, verdict
    assert "GPU 0" not in verdict["sentence"] and not any("GPU 0" in e for e in verdict["evidence"])
    # The ranks that wait are never stragglers for it, nor blamed (one may
    # be slower in its own work on a loaded machine: that is no wait).
    waiting = {(s["rank"], s["stage"]) for s in report["stragglers"] if s["rank"] != 3}
    assert not waiting & {(r, "cp_all_gather") for r in range(3)}, report["stragglers"]
    blamed = [m for m in warnings_of(report) if "holds the job back" in m]
    assert len(blamed) == 1 and blamed[0].startswith("rank 3 "), blamed
    gather = next(s for s in report["stages"] if s["name"] == "cp_all_gather")
    assert gather["wait_s"]["avg"] > 0.5 * gather["total_s"]["avg"], gather
    messages = [r["message"] for r in report["recommendations"]]
    assert not any("`cp_all_gather`" in m and "place to optimise" in m for m in messages), messages
    assert any(m.startswith("ranks 0-3 share GPU 0") for m in messages), messages
    # Warm-up and the profiler's own time are events, apart.
    kinds = {(e["kind"], e["step"]) for e in report["events"]}
    assert ("warmup", 0) in kinds, report["events"]
    assert any(kind == "profiler" for kind, _ in kinds), report["events"]
    assert all(not s["name"].startswith("rankscope:") for s in report["stages"])
    assert any(r["overhead"]["profiler_s"] > 0 for r in report["ranks"]), report["ranks"]
    # The account: the others wait for rank 3 in the all-gather (it waits
    # least); the job's path runs through its extra work, which is the
    # verdict's cost; the profiler's spans are the profiler's.
    account = assert_account_adds_up(report)
    ranks = {r["rank"]: r["categories"] for r in account["ranks"]}
    for rank in (0, 1, 2):
        assert ranks[rank]["collective_wait"] > 2 * ranks[3]["collective_wait"], ranks
    job = account["job"]
    assert job["waited_for"][0]["rank"] == 3, job["waited_for"]
    # Its cost: at least its lateness at the steady all-gathers, a slice of
    # the job's work.
    assert verdict["cost_s"] >= job["waited_for"][0]["delay_s"] - 1e-6, (verdict, job)
    assert verdict["cost_s"] <= job["categories"]["work"] + 1e-6, (verdict, job)
    assert job["categories"]["profiler"] > 0, job


def test_a_balanced_real_job_with_one_stall_blames_no_rank(tmp_path: Path) -> None:
    """The same job balanced, rank 1 stalling 400 ms once in `mlp` at step 7
    and every rank's first step slower: no rank is blamed, the stall is an
    event of rank 1's at step 7, and the ranks that waited for it are not
    stragglers. Small chunks (64 tokens a rank) and 20 ms a step waiting for
    the (simulated) GPU: on a machine loaded past its cores the ranks'
    shares of the CPU differ, which must not make a straggler of a balanced
    job."""
    report = run_cp_job(tmp_path, ["--stall-rank", "1", "--stall-step", "7",
                                   "--warmup-ms", "300", "--tokens", "64", "--gpu-ms", "20"])
    assert not any("holds the job back" in m for m in warnings_of(report)), warnings_of(report)
    stall = [e for e in report["events"] if e["kind"] == "stall" and e["step"] == 7]
    assert [(e["ranks"], e["stage"]) for e in stall] == [([1], "mlp")], report["events"]
    assert stall[0]["cost_s"] > 0.3, stall
    assert any(e["kind"] == "warmup" and e["step"] == 0 for e in report["events"]), report["events"]
    verdict = report["verdict"]
    assert verdict["kind"] in ("stalls", "balanced"), verdict
    assert verdict["kind"] == "balanced" or 1 in verdict["ranks"], verdict
    # The account: rank 1's 0.4 s is its stall, the others' wait for it;
    # the job's stall is that one stall; every rank's first step's 0.3 s
    # is warm-up.
    account = assert_account_adds_up(report)
    ranks = {r["rank"]: r["categories"] for r in account["ranks"]}
    assert 0.3 < ranks[1]["stall"] < 0.55, ranks[1]
    for rank in (0, 2, 3):
        assert ranks[rank]["stall"] < 0.15, (rank, ranks[rank])
        assert ranks[rank]["collective_wait"] > 0.3, (rank, ranks[rank])
    job = account["job"]["categories"]
    assert 0.3 < job["stall"] < 0.6, job
    assert 0.15 < job["warmup"] < 0.6, job


def test_a_real_job_bound_by_its_all_gather_is_communication_bound(tmp_path: Path) -> None:
    """Every step all-gathers 16 MB a rank over gloo (loopback), beside
    little compute: the collective's own time is most of each steady step.
    The verdict says communication-bound on `all_gather`; the ranks' waits
    are apart from the transfer, and no rank is blamed."""
    report = run_cp_job(tmp_path, ["--gather-mb", "16", "--tokens", "32", "--steps", "12"])
    account = assert_account_adds_up(report)
    job = account["job"]["categories"]
    assert job["collective_transfer"] > 0.5 * steady_s(job), job
    verdict = report["verdict"]
    assert (verdict["kind"], verdict["collective"]) == ("communication_bound", "all_gather"), verdict
    assert verdict["ranks"] == [], verdict
    assert not any("holds the job back" in m for m in warnings_of(report)), warnings_of(report)
    # Every rank's transfer is the same: the least any rank spent in each
    # step's all-gather.
    transfers = [r["categories"]["collective_transfer"] for r in account["ranks"]]
    assert max(transfers) - min(transfers) < 1e-6, transfers


def test_a_rank_local_job_of_tiny_operators_has_its_time_in_work(tmp_path: Path) -> None:
    """Each rank on its own (no collective), 3,000 tiny operators a step in
    `tiny_ops`: the steps' time is work, most of it in `tiny_ops`, which is
    the first place to optimise, as compute; nothing waits, nothing
    transfers. (On a GPU the same operators would leave
    it idle in the host's own work: launch-bound; a CPU job has no kernel
    trace to say so.)"""
    report = run_cp_job(tmp_path, ["--no-gather", "--tiny-ops", "3000", "--tokens", "16",
                                   "--steps", "40"])
    account = assert_account_adds_up(report)
    for rank in account["ranks"]:
        c = rank["categories"]
        assert c["collective_transfer"] == 0 and c["collective_wait"] == 0, rank
        assert c["work"] > 0.9 * steady_s(c), rank
        innermost = rank["work_by_stage"]["innermost"]
        assert innermost[0]["stage"] == "tiny_ops", innermost
        assert innermost[0]["s"] > 0.5 * c["work"], innermost
    messages = [r["message"] for r in report["recommendations"]]
    assert any(m.startswith("`tiny_ops`") and "compute" in m and "first place to optimise" in m
               for m in messages), messages
    # No collective, so nothing is communication- or wait-bound. (Ranks
    # that never meet run at the machine's pace each: on a loaded machine
    # one may well finish later, and be told so.)
    assert report["verdict"]["kind"] not in ("communication_bound", "host_bound"), report["verdict"]
