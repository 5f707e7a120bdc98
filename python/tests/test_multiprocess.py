"""Real multi-process jobs of Python ranks: the example pipeline under
`rankscope launch` and under real torchrun (torch from PyPI, the CPU path
with the gloo backend). Rank 0's report must name the planted straggler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
