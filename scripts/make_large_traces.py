"""Large per-rank Kineto traces from a real one, for the import benchmark.

Each output rank repeats the steps of a real torch.profiler trace (the
source rank ``r % len(sources)``) on a shifted clock until the file holds
at least ``--mb`` megabytes of JSON: timestamps move by the source's span
per copy, correlation and External ids by 10,000,000, ``ProfilerStep#N``
are renumbered. Events are written one at a time, so the generator never
holds more than the source.

With ``--start-us T`` the first event of every rank is moved to the Unix
time T (µs): a trace a running session can take as its own window.

usage: make_large_traces.py SOURCE_DIR OUT_DIR --ranks N --mb MB [--start-us T]
"""

import argparse
import gzip
import json
import os
import re


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--mb", type=float, required=True)
    parser.add_argument("--start-us", type=float, default=None)
    args = parser.parse_args()
    sources = [load(os.path.join(args.source, name))
               for name in sorted(os.listdir(args.source)) if ".json" in name]
    os.makedirs(args.out, exist_ok=True)
    step = re.compile(r"^ProfilerStep#(\d+)$")
    for rank in range(args.ranks):
        source = sources[rank % len(sources)]
        events = [e for e in source["traceEvents"] if e.get("ph") == "X"]
        times = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
        span = max(times) - min(times) + 1000
        shift = 0.0 if args.start_us is None else args.start_us - min(times)
        steps = sum(1 for e in events if step.match(e.get("name", "")))
        head = {k: v for k, v in source.items() if k != "traceEvents"}
        head["distributedInfo"] = dict(head.get("distributedInfo", {}), rank=rank,
                                       world_size=args.ranks)
        path = os.path.join(args.out, f"rank-{rank}.json")
        with open(path, "w") as out:
            out.write(json.dumps(head)[:-1] + ', "traceEvents": [')
            copy, written, first = 0, 0, True
            while written < args.mb * 1e6:
                for event in events:
                    e = dict(event)
                    e["ts"] = e["ts"] + copy * span + shift
                    if "args" in e:
                        a = dict(e["args"])
                        for key in ("correlation", "External id"):
                            if isinstance(a.get(key), int) and a[key] >= 0:
                                a[key] += copy * 10_000_000
                        e["args"] = a
                    m = step.match(e.get("name", ""))
                    if m:
                        e["name"] = f"ProfilerStep#{int(m.group(1)) + copy * steps}"
                    text = ("" if first else ",\n") + json.dumps(e)
                    first = False
                    out.write(text)
                    written += len(text)
                copy += 1
            out.write("]}\n")


if __name__ == "__main__":
    main()
