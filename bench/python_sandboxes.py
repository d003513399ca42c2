#!/usr/bin/python3
"""Sandboxes from Python's asyncio client against the Go client, same run.

Each round creates N sandboxes at once, steps each with K `true` execs (the
N sandboxes concurrently, each one's execs one after the other), then
closes them, once from one Python process with megaflow.aio and once with
the Go CLI (`megaflow sandbox create` / `exec` / `rm`, one process per
call, N at a time: the Go client's figures include a process start per
call). Rounds alternate which side goes first. It prints min / median / max
over the rounds of: the wall time to create all N (READY), creates/s, the
execs/s of the stepping phase, and the p50 / p99 of one exec's latency.

Without --heads it starts `megaflow up --runtime docker` on free loopback
ports in a temporary directory (and stops it). The image must be local
(workers never pull) and hold sh and sleep: megaflow-test/busybox:1 (the
Go runtime tests build it) or megaflow/busybox:test (`make image`).

    go build -o bin/megaflow ./cmd/megaflow
    /usr/bin/python3 bench/python_sandboxes.py --n 16 --execs 8 --rounds 3

On a shared 2-core machine absolute figures move a lot between runs;
compare the two sides within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client" / "python" / "src"))

import megaflow  # noqa: E402
import megaflow.aio  # noqa: E402

# Each sandbox's reservation: the worker of `megaflow up` offers every core,
# so --n times --cpu-millis must fit in them (a CPU limit far below 100m
# makes even `true` take seconds: it is a CFS quota).
SANDBOX = dict(cpu_millis=100, memory=16 << 20, lifetime=900, wait_ready=300)


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


async def python_round(heads, image, n, execs):
    async with megaflow.aio.Client(heads, timeout=60) as c:
        t0 = time.monotonic()
        boxes = await asyncio.gather(*[c.sandbox(image, **SANDBOX) for _ in range(n)])
        create_s = time.monotonic() - t0
        lat = []

        async def step(sb):
            for _ in range(execs):
                t = time.monotonic()
                r = await sb.exec(["true"], timeout=60)
                lat.append(time.monotonic() - t)
                assert r.exit_code == 0, r

        t1 = time.monotonic()
        await asyncio.gather(*[step(sb) for sb in boxes])
        exec_s = time.monotonic() - t1
        await asyncio.gather(*[sb.close() for sb in boxes])
    return create_s, n * execs / exec_s, lat


def go_round(binary, heads, image, n, execs):
    base = [binary, "--heads", ",".join(heads)]

    def run(args, out=None):
        t = time.monotonic()
        p = subprocess.run(base + args, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
        if out is not None:
            out.append(time.monotonic() - t)
        return p.stdout

    ids = [None] * n

    def create(i):
        ids[i] = json.loads(run(["-o", "json", "sandbox", "create", "--image", image, "--cpu-millis",
                                 str(SANDBOX["cpu_millis"]), "--memory-bytes", str(SANDBOX["memory"]),
                                 "--lifetime", f"{SANDBOX['lifetime']}s", "--wait", f"{SANDBOX['wait_ready']}s",
                                 "--timeout", "600s"]))["id"]

    t0 = time.monotonic()
    threads_join([threading.Thread(target=create, args=(i,)) for i in range(n)])
    create_s = time.monotonic() - t0
    lat = []

    def step(sid):
        for _ in range(execs):
            run(["sandbox", "exec", sid, "--", "true"], lat)

    t1 = time.monotonic()
    threads_join([threading.Thread(target=step, args=(sid,)) for sid in ids])
    exec_s = time.monotonic() - t1
    run(["sandbox", "rm"] + ids)
    return create_s, n * execs / exec_s, lat


def threads_join(ts):
    for t in ts:
        t.start()
    for t in ts:
        t.join(900)
        if t.is_alive():
            raise RuntimeError("a Go CLI call did not return in 900 s")


def free_port():
    while True:
        with socket.socket() as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port


def start_cluster(binary, tmp):
    grpc = f"127.0.0.1:{free_port()}"
    args = [binary, "up", "--runtime", "docker", "--data-dir", tmp, "--grpc-addr", grpc,
            "--raft-addr", f"127.0.0.1:{free_port()}", "--gossip-addr", f"127.0.0.1:{free_port()}",
            "--worker-gossip-addr", f"127.0.0.1:{free_port()}", "--max-concurrent-starts", "16"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ready = threading.Event()
    lines = []

    def read():
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ready:"):
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(120) or proc.poll() is not None:
        proc.kill()
        raise RuntimeError("megaflow up did not start:\n" + "".join(lines))
    return proc, grpc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16, help="sandboxes per round (default 16)")
    ap.add_argument("--cpu-millis", type=int, default=100, help="CPU of each sandbox, millicores (default 100)")
    ap.add_argument("--execs", type=int, default=8, help="`true` execs per sandbox per round (default 8)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per side (default 3)")
    ap.add_argument("--image", default=os.environ.get("MEGAFLOW_SANDBOX_IMAGE", "megaflow-test/busybox:1"))
    ap.add_argument("--megaflow", default=str(REPO / "bin" / "megaflow"), help="the megaflow binary")
    ap.add_argument("--heads", default="", help="comma-separated heads of a running cluster (default: start one)")
    a = ap.parse_args()
    SANDBOX["cpu_millis"] = a.cpu_millis
    if not (1 <= a.n <= 1024 and 1 <= a.execs <= 10000 and 1 <= a.rounds <= 100):
        sys.exit("--n 1..1024, --execs 1..10000, --rounds 1..100")
    if not os.access(a.megaflow, os.X_OK):
        sys.exit(f"{a.megaflow} is not an executable: go build -o bin/megaflow ./cmd/megaflow, or pass --megaflow")
    proc = None
    tmp = tempfile.TemporaryDirectory(prefix="megaflow-bench-")
    try:
        if a.heads:
            heads = a.heads.split(",")
        else:
            proc, addr = start_cluster(a.megaflow, tmp.name)
            heads = [addr]
        res = {"python": [], "go": []}
        for r in range(a.rounds):
            order = ["python", "go"] if r % 2 == 0 else ["go", "python"]
            for side in order:
                if side == "python":
                    out = asyncio.run(python_round(heads, a.image, a.n, a.execs))
                else:
                    out = go_round(a.megaflow, heads, a.image, a.n, a.execs)
                res[side].append(out)
                print(f"round {r + 1} {side}: create {out[0]:.2f} s, {out[1]:.1f} execs/s, "
                      f"p50 {pct(out[2], 50) * 1000:.0f} ms, p99 {pct(out[2], 99) * 1000:.0f} ms", flush=True)
        print(f"\n{a.n} sandboxes created at once, each stepped with {a.execs} `true` execs "
              f"({a.n} at once); {a.rounds} rounds; min / median / max")
        print(f"{'':8} {'create all (s)':>22} {'creates/s':>22} {'execs/s':>22} {'exec p50 (ms)':>22} "
              f"{'exec p99 (ms)':>22}")
        for side in ("python", "go"):
            rows = res[side]
            cols = [[x[0] for x in rows], [a.n / x[0] for x in rows], [x[1] for x in rows],
                    [pct(x[2], 50) * 1000 for x in rows], [pct(x[2], 99) * 1000 for x in rows]]
            print(f"{side:8} " + " ".join(f"{min(c):6.1f} {statistics.median(c):6.1f} {max(c):6.1f}".rjust(22)
                                         for c in cols))
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        tmp.cleanup()


if __name__ == "__main__":
    main()
