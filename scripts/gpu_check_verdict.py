"""Checks the reports scripts/gpu-check-verdict.sh made (see there)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List


def report_of(out: Path, name: str) -> Dict[str, Any]:
    reports = list((out / name).glob("cp-attention-*/report.json"))
    if len(reports) != 1:
        raise SystemExit(f"{name}: expected one report, found {reports}")
    report: Dict[str, Any] = json.loads(reports[0].read_text())
    return report


CATEGORIES = ("setup", "warmup", "profiler", "stall", "work", "collective_transfer",
              "collective_wait", "untracked", "teardown")


def print_account(name: str, report: Dict[str, Any], check: Any) -> None:
    """Prints the report's time account (the job's, each rank's with its
    GPU split) and checks that each adds up and the findings' costs too."""
    account = report["time_account"]
    job = account["job"]
    print(f"  {name}: time account, the job's {job['wall_s']:.3f} s through rank "
          f"{job['critical_path']['rank']}:")
    entries = [("job", job)] + [(f"rank {r['rank']}", r) for r in account["ranks"]]
    for who, entry in entries:
        c = entry["categories"]
        parts = ", ".join(f"{k} {c[k]:.3f}" for k in CATEGORIES if c[k])
        total = sum(v for v in c.values() if v is not None)
        print(f"    {who}: {parts}")
        check(abs(total - entry["wall_s"]) <= max(1e-3, 1e-3 * entry["wall_s"]),
              f"{name}: {who}'s account adds up ({total:.3f} of {entry['wall_s']:.3f} s)")
        gpu = entry.get("gpu")
        if gpu:
            print(f"      GPU: window {gpu['window_s']:.3f} s, busy {gpu['busy']}, idle {gpu['idle']}")
    costs = sum(r["cost_s"] for r in report["recommendations"] if r["cost_s"] is not None)
    check(costs <= job["wall_s"] * (1 + 1e-9),
          f"{name}: the findings cost {costs:.3f} s of the job's {job['wall_s']:.3f} s")


def main() -> int:
    out = Path(sys.argv[1])
    failed: List[str] = []

    def check(ok: bool, what: str) -> None:
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            failed.append(what)

    slow = report_of(out, "slow")
    verdict = slow["verdict"]
    print(f"slow job's verdict: {verdict['sentence']}")
    for line in verdict["evidence"]:
        print(f"  - {line}")
    check(verdict["kind"] == "straggler" and verdict["ranks"] == [3], "the verdict blames rank 3")
    check(verdict["stage"] == "attention", "in `attention`")
    check(verdict["collective"] == "all_gather", "where the others wait in all_gather")
    check(bool(verdict["kernel"]), f"with a kernel slower on it ({verdict['kernel']})")
    check(not any("GPU 0" in e for e in verdict["evidence"]), "the shared GPU is no evidence")

    balanced = report_of(out, "balanced")
    blamed = [r["message"] for r in balanced["recommendations"]
              if r["severity"] != "info" and "holds the job back" in r["message"]]
    print(f"balanced job's verdict: {balanced['verdict']['sentence']}")
    check(blamed == [], f"the balanced job blames no rank ({blamed})")

    for name, report in (("slow", slow), ("balanced", balanced)):
        events = [e for e in report["events"] if e["kind"] == "profiler"]
        for e in events:
            print(f"  {name}: profiler event at {e['step_stage']} #{e['step']} in {e['stage']}: "
                  f"{e['cost_s']:.3f} s on ranks {e['ranks']}")
        inside = [e for e in events if e["step"] > 0]
        check(all(e["cost_s"] < 0.5 for e in inside),
              f"{name}: no profiler stall over 0.5 s inside the steps")
        spent = [r["overhead"]["profiler_s"] for r in report["ranks"] if r.get("overhead")]
        print(f"  {name}: the profiler's own time per rank: {spent}")
        check(bool(spent) and all(s > 0 for s in spent), f"{name}: counted in the overhead")
        print_account(name, report, check)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
