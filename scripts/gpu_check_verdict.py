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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
