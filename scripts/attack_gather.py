"""Rank 0's gather under the attacks of issue 35, each beside the same job
without it, in one run (BENCHMARKS.md, "Attacks on the gather and the
import"). A job is 4 real ranks of the agent-only rank program over TCP on
127.0.0.1 (torchrun's variables, a job token), 20 steps of 10 ms; rank 0's
wall time and peak RSS are measured by scripts/peak_rss.py. Per attack:
whether every rank is in the report.

  clean      the job alone
  strangers  80 threads reconnecting without the token, saying nothing
  drip       40 peers with the token claiming rank 3, each dripping a
             payload frame a byte a second
  hog        2 peers with the token claiming rank 3, each sending a 256 MiB
             frame at 1.25 MiB/s (together the whole frame budget)
  two-level  the job as 2 nodes of 2 (its own clean figure)
  forged     2 nodes of 2, a peer with the token sending rank 0 garbage as
             node 1's digest before its leader
  dead-rank  2 nodes of 2, rank 3 (no leader) gone after step 0: what a
             dead rank costs (rank 0 waits for it until its deadline, 10 s)
  dead-lead  2 nodes of 2, node 1's leader (rank 2) gone after step 0

usage: python3 scripts/attack_gather.py RANK_PROGRAM [BASE_RANK_PROGRAM]
       (BASE_RANK_PROGRAM: another build's, measured beside it)
"""

import hashlib
import hmac
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

TOKEN = b"attack-token"
HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_of(rank, world, port, out, node_size, extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANKSCOPE_", "OMPI_", "PMI"))}
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank % node_size if node_size else rank),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",
        "RANKSCOPE_PORT": str(port), "RANKSCOPE_TOKEN": TOKEN.decode(),
        "TORCHELASTIC_RUN_ID": "attack", "RANKSCOPE_OUTPUT_DIR": out,
        "RANKSCOPE_GPU_SOURCE": "none", "RANKSCOPE_GATHER_TIMEOUT_S": "10",
    })
    if node_size:
        env["LOCAL_WORLD_SIZE"] = str(node_size)
        env["RANKSCOPE_NODE"] = f"node-{rank // node_size}"
    env.update(extra)
    return env


def frame(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + struct.pack("<Q", len(body)) + body


def greet(sock: socket.socket, rank: int, purpose: int) -> None:
    head = recv_exact(sock, 9)
    challenge = recv_exact(sock, struct.unpack("<Q", head[1:])[0])
    nonce = os.urandom(16)
    proof = hmac.new(TOKEN, challenge + struct.pack("<I", rank) + bytes([purpose]) + nonce,
                     hashlib.sha256).digest()
    sock.sendall(frame(2, struct.pack("<I", rank) + bytes([purpose]) + nonce + proof))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def listening(port: int) -> None:
    for _ in range(1500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit("rank 0 never listened")


def strangers(port, stop):
    def one():
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.settimeout(2)
                while s.recv(64):
                    pass
            except OSError:
                pass
    return [threading.Thread(target=one, daemon=True) for _ in range(80)]


def drip(port, stop):
    def one():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            greet(s, 3, 3)
            for byte in frame(8, b"\0" * 1000):
                if stop.is_set():
                    return
                s.sendall(bytes([byte]))
                time.sleep(1)
        except OSError:
            pass
    return [threading.Thread(target=one, daemon=True) for _ in range(40)]


def hog(port, stop):
    def one():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            greet(s, 3, 3)
            s.sendall(bytes([8]) + struct.pack("<Q", 256 << 20))
            chunk = b"\0" * (64 << 10)
            while not stop.is_set():
                s.sendall(chunk)
                time.sleep(0.05)
        except OSError:
            pass
    return [threading.Thread(target=one, daemon=True) for _ in range(2)]


def forged(port, stop):
    def one():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            greet(s, 2, 4)
            s.sendall(frame(10, b"RSND not a node digest at all"))
            s.recv(64)
        except OSError:
            pass
    return [threading.Thread(target=one, daemon=True)]


def run(program, name, node_size=None, attack=None, dead=None):
    out = tempfile.mkdtemp(prefix=f"attack-{name}-")
    port = free_port()
    world = 4
    args = [program, "--steps", "20"]
    extra_args = {dead: ["--exit-at-step", "0", "--exit-rank", str(dead)]} if dead else {}
    rank0 = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "peak_rss.py"), *args],
        env=env_of(0, world, port, out, node_size, {}), stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    listening(port)
    stop = threading.Event()
    threads = attack(port, stop) if attack else []
    for t in threads:
        t.start()
    time.sleep(0.5 if threads else 0)
    others = [subprocess.Popen(args + extra_args.get(r, []),
                               env=env_of(r, world, port, out, node_size, {}),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for r in range(1, world)]
    measured = rank0.communicate()[0].split()
    for p in others:
        p.wait()
    stop.set()
    reports = [os.path.join(root, "report.json") for root, _, files in os.walk(out)
               if "report.json" in files]
    reporting = json.load(open(reports[0]))["session"]["ranks_reporting"] if reports else []
    wall, peak = float(measured[0]), int(measured[1]) // 1024
    build = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(program))))
    print(f"{name:10} {build:12} rank 0 wall {wall:6.2f} s  peak {peak:4d} MiB  "
          f"reporting {reporting}", flush=True)


def main() -> None:
    for program in sys.argv[1:]:
        run(program, "clean")
        run(program, "strangers", attack=strangers)
        run(program, "drip", attack=drip)
        run(program, "hog", attack=hog)
        run(program, "two-level", node_size=2)
        run(program, "forged", node_size=2, attack=forged)
        run(program, "dead-rank", node_size=2, dead=3)
        run(program, "dead-lead", node_size=2, dead=2)


if __name__ == "__main__":
    main()
