"""Fixtures shared by the package's tests."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import pytest

import rankscope

#: The repository's root (python/tests/ is two folders down).
ROOT = Path(__file__).resolve().parents[2]

#: Variables of launchers and of rankscope that would change what a test
#: runs as; each test starts without them.
LAUNCHER_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
    "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("RANKSCOPE_") or name in LAUNCHER_VARIABLES:
            monkeypatch.delenv(name)


@pytest.fixture
def prof(tmp_path: Path) -> rankscope.Profiler:
    """A single-rank profiler writing under tmp_path, with no GPU telemetry."""
    return rankscope.Profiler(
        rankscope.Config(output_dir=tmp_path / "out", gpu_source="none", collect_host=False)
    )


def report_of(outcome: rankscope.Outcome) -> Dict[str, Any]:
    """The report.json an outcome names."""
    assert outcome.report_json is not None, "rank 0 writes the report"
    return json.loads(Path(outcome.report_json).read_text())


def stage_of(report: Dict[str, Any], name: str) -> Dict[str, Any]:
    """The stages[] entry called `name`."""
    found = [s for s in report["stages"] if s["name"] == name]
    assert found, f"no stage {name!r} in {[s['name'] for s in report['stages']]}"
    return found[0]
