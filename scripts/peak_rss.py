"""Runs a command and prints its wall time (s) and the peak resident memory
(KiB) of its whole process tree: the largest sum of the tree's RSS seen
every 20 ms, or the largest single process's peak (getrusage, which catches
a peak between samples), whichever is larger. A tool that works in a pool
of processes (HTA) is measured with all of them.

usage: peak_rss.py COMMAND [ARGS...]   (the command's output is discarded)
"""

import os
import resource
import subprocess
import sys
import time


def tree_rss_kib(root: int) -> int:
    children = {}
    rss = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def main() -> None:
    start = time.perf_counter()
    process = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_rss_kib(process.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - start
    single = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if process.returncode not in (0, 3):
        sys.exit(f"{sys.argv[1:]} exited {process.returncode}")
    print(f"{wall:.2f} {max(peak, single)}")


if __name__ == "__main__":
    main()
