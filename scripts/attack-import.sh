#!/usr/bin/env bash
# `rankscope import` under two attacks of issue 35, against the same
# import without them, in one run (BENCHMARKS.md, "Attacks on the gather
# and the import"):
#   - wide: 32 ranks' gzip traces, each of 20,000 distinct 4 KiB kernel
#     names (the same names on every rank, then other names on each);
#   - bomb: one gzip trace of a few MB that inflates to 6 GiB of events,
#     read with the default --max-bytes (4 GiB).
# Wall time and peak RSS by scripts/peak_rss.py.
#
# usage: scripts/attack-import.sh [BASE_CLI]   (BASE_CLI: another build's
#        rankscope binary, measured on the same inputs beside this one)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rankscope-cli >/dev/null
cli=target/release/rankscope
base=${1:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$work" <<'PY'
import gzip, json, os, sys
work = sys.argv[1]

def trace(path, names, rank):
    with gzip.open(path, "wt", compresslevel=6) as f:
        f.write('{"distributedInfo": {"rank": %d, "world_size": 32}, "traceEvents": [' % rank)
        for i, name in enumerate(names):
            sep = "," if i else ""
            f.write(sep + json.dumps({"ph": "X", "cat": "kernel", "name": name, "ts": i,
                                      "dur": 1, "pid": 0, "tid": 7,
                                      "args": {"stream": 7, "correlation": i, "device": 0}}))
        f.write("]}")

for kind in ("clean", "same", "apart"):
    os.makedirs(f"{work}/{kind}")
    for rank in range(32):
        if kind == "clean":
            names = [f"kernel_{i}" for i in range(200)] * 100
        elif kind == "same":
            names = [f"k{i:05d}" + "x" * 4090 for i in range(20000)]
        else:
            names = [f"r{rank:02d}k{i:05d}" + "x" * 4087 for i in range(20000)]
        trace(f"{work}/{kind}/rank{rank}.json.gz", names, rank)

# The bomb: 6 GiB of small events (each within the event limit) from a
# gzip file of a few MB; beside it a real trace of rank 1.
os.makedirs(f"{work}/bomb")
event = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"stream": 7}},'
chunk = event * ((1 << 20) // len(event))
with gzip.open(f"{work}/bomb/rank0.json.gz", "wb", compresslevel=1) as f:
    f.write(b'{"traceEvents": [')
    for _ in range(6 << 10):
        f.write(chunk)
    f.write(event[:-1] + b"]}")
trace(f"{work}/bomb/rank1.json.gz", [f"kernel_{i}" for i in range(200)], 1)
PY

measure() {
  local label=$1 binary=$2 dir=$3
  shift 3
  printf '%-8s %-6s %6s MB input  ' "$label" "$(basename "$(dirname "$(dirname "$binary")")")" \
    "$(du -sm "$work/$dir" | cut -f1)"
  python3 scripts/peak_rss.py "$binary" import "$work/$dir" --out "$work/out-$label" "$@" \
    | awk '{printf "wall %s s  peak %d MiB\n", $1, $2 / 1024}'
}

for binary in "$cli" ${base:+"$base"}; do
  measure clean "$binary" clean --jobs 2
  measure same "$binary" same --jobs 2
  measure apart "$binary" apart --jobs 2
  measure bomb "$binary" bomb
done
