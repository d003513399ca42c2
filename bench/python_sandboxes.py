#!/usr/bin/python3
"""Sandboxes from Python's asyncio client against the Go client, same run.

Each arm creates N sandboxes at once, steps each with K `true` execs (the N
sandboxes concurrently, each one's execs one after the other), then closes
them, all from one process: the Python arm with megaflow.aio (one task per
sandbox), the Go arm with the Go client (`megaflow-bench sandboxes`, one
goroutine per sandbox). Each round runs both arms, one after the other,
alternating which goes first; after each arm the script waits until the
worker has removed the arm's containers. It prints each arm's figures as
it goes, then min / median / max over the rounds of: the wall time to
create all N (READY), creates/s, the span of the leader's create and READY
stamps (create all, less the clients' and the network's part), the execs/s
of the stepping phase, one exec's p50 / p99 (nearest rank over every exec
of the arm), the time to close all N, and the client process's CPU time;
and the ratio Python / Go of each figure within each round (min / median /
max over the rounds).

Without --heads it starts `megaflow up --runtime docker` on free loopback
ports in a temporary directory, its worker offering twice what one arm
reserves (--cpu-millis and --memory-bytes: the CPU is overcommitted on a
small machine, see bench/README.md), and at the end stops it and removes
any container of its worker left behind, also after a failure or SIGTERM.
The image must be local (workers never pull) and hold sh and sleep:
megaflow-test/busybox:1 (the Go runtime tests build it) or
megaflow/busybox:test (`make image`).

    go build -o bin/megaflow ./cmd/megaflow
    go build -o bin/megaflow-bench ./cmd/megaflow-bench
    /usr/bin/python3 bench/python_sandboxes.py --n 256 --execs 2 --rounds 2

On a shared machine absolute figures move a lot between runs; compare the
two arms within one run (the ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
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

# Waits, in seconds. A create waits for READY at most 10 minutes (the
# heads' bound); an exec's command at most EXEC_TIMEOUT_S; the worker's
# removal of an arm's containers at most DRAIN_S.
WAIT_READY_S = 600
EXEC_TIMEOUT_S = 300
LIFETIME_S = 3600
DRAIN_S = 600
ARM_TIMEOUT_S = 1800


def pct(xs, p):
    """The p-th percentile of xs, nearest rank (as the Go arm's)."""
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))]


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


async def python_arm(heads, a):
    """One arm from this process: the figures, as the Go arm's JSON."""
    out = {"n": a.n, "execs": a.execs}
    closed = set()
    async with megaflow.aio.Client(heads, timeout=60) as c:
        creating = []
        try:
            t0 = time.monotonic()
            creating = [c.sandbox(a.image, cpu_millis=a.cpu_millis, memory=a.memory_bytes, lifetime=LIFETIME_S,
                                  wait_ready=WAIT_READY_S) for _ in range(a.n)]
            got = await asyncio.gather(*creating, return_exceptions=True)
            out["create_s"] = time.monotonic() - t0
            failed = [g for g in got if isinstance(g, BaseException)]
            failed += [RuntimeError(f"sandbox {g.id} is still {g.state} after {WAIT_READY_S} s")
                       for g in got if not isinstance(g, BaseException) and g.state != "READY"]
            if failed:
                raise RuntimeError(f"create: {len(failed)} of {a.n} failed; the first: {failed[0]!r}")
            out["server_create_s"] = (max(g.info.ready_unix_nanos for g in got) -
                                      min(g.info.create_unix_nanos for g in got)) / 1e9
            lat = []

            async def step(sb):
                for _ in range(a.execs):
                    t = time.monotonic()
                    r = await sb.exec(["true"], timeout=EXEC_TIMEOUT_S)
                    if r.exit_code != 0:
                        raise RuntimeError(f"sandbox {sb.id}: `true` exited {r.exit_code} ({r.reason})")
                    lat.append(time.monotonic() - t)

            t1 = time.monotonic()
            steps = await asyncio.gather(*[step(sb) for sb in got], return_exceptions=True)
            wall = time.monotonic() - t1
            failed = [s for s in steps if isinstance(s, BaseException)]
            if failed:
                raise RuntimeError(f"exec: {len(failed)} of {a.n} failed; the first: {failed[0]!r}")
            out["execs_per_s"] = len(lat) / wall
            out["exec_latencies_s"] = lat
            t2 = time.monotonic()
            await asyncio.gather(*[sb.close() for sb in got])
            out["close_s"] = time.monotonic() - t2
            closed = {sb.id for sb in got}
        finally:  # close what may exist (a create that failed may have made one)
            left = [x.id for x in creating if x.id not in closed]
            res = await asyncio.gather(*[close_id(c, sid) for sid in left], return_exceptions=True)
            if [r for r in res if isinstance(r, BaseException)]:
                print(f"python arm: could not close {sum(isinstance(r, BaseException) for r in res)} sandboxes",
                      file=sys.stderr)
    return out


async def close_id(c, sid):
    try:
        await megaflow.aio.Sandbox(c, sid).close(timeout=120)
    except megaflow.NotFound:
        pass


def go_arm(bench, heads, a, tmp):
    """One arm of `megaflow-bench sandboxes` (it closes its own sandboxes,
    also after a failure): its JSON."""
    cmd = [bench, "--out", tmp, "sandboxes", "--heads", ",".join(heads), "--image", a.image, "--n", str(a.n),
           "--execs", str(a.execs), "--cpu-millis", str(a.cpu_millis), "--memory-bytes", str(a.memory_bytes),
           "--lifetime", f"{LIFETIME_S}s", "--wait-ready", f"{WAIT_READY_S}s", "--exec-timeout", f"{EXEC_TIMEOUT_S}s",
           "--timeout", f"{ARM_TIMEOUT_S}s"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=ARM_TIMEOUT_S + 300)
    if p.returncode != 0:
        raise RuntimeError(f"megaflow-bench sandboxes: exit {p.returncode}: {p.stderr.strip()}")
    out = json.loads(p.stdout)
    lat = out["exec_latencies_s"]
    for q, key in ((50, "exec_p50_ms"), (99, "exec_p99_ms")):  # both arms' percentiles are the same function
        if abs(pct(lat, q) * 1000 - out[key]) > 1e-6:
            raise RuntimeError(f"the Go arm's {key} {out[key]} is not the nearest rank of its latencies "
                               f"({pct(lat, q) * 1000})")
    return out


def docker_ids(worker):
    p = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=megaflow.worker={worker}"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"docker ps: {p.stderr.strip()}")
    return p.stdout.split()


def drain(worker):
    """Waits until the worker holds no container (the arm's are removed);
    returns the seconds it took."""
    t = time.monotonic()
    while docker_ids(worker):
        if time.monotonic() - t > DRAIN_S:
            raise RuntimeError(f"worker {worker} still holds containers {DRAIN_S} s after its sandboxes were closed")
        time.sleep(1)
    return time.monotonic() - t


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


def start_cluster(binary, tmp, a):
    """`megaflow up --runtime docker` in tmp, offering twice one arm's
    reservations; returns the process, its gRPC address and its worker id."""
    grpc = f"127.0.0.1:{free_port()}"
    args = [binary, "up", "--runtime", "docker", "--data-dir", tmp, "--grpc-addr", grpc,
            "--raft-addr", f"127.0.0.1:{free_port()}", "--gossip-addr", f"127.0.0.1:{free_port()}",
            "--worker-gossip-addr", f"127.0.0.1:{free_port()}",
            "--max-concurrent-starts", str(a.max_concurrent_starts),
            "--cpu-millis", str(2 * a.n * a.cpu_millis), "--memory-bytes", str(2 * a.n * a.memory_bytes)]
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
        proc.wait(10)
        raise RuntimeError("megaflow up did not start:\n" + "".join(lines))
    print("".join(lines).strip(), flush=True)
    worker = (Path(tmp) / "worker" / "node-id").read_text().strip()
    return proc, grpc, worker


def stop_cluster(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def remove_left(worker):
    """Removes every container of worker (after the cluster stopped);
    returns how many there were."""
    ids = docker_ids(worker)
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, text=True, timeout=600)
    if docker_ids(worker):
        raise RuntimeError(f"containers of worker {worker} are left: docker rm -f them")
    return len(ids)


FIGURES = [  # (label, function of one arm's output)
    ("create all (s)", lambda o: o["create_s"]),
    ("creates/s", lambda o: o["n"] / o["create_s"]),
    ("heads: first create to last READY (s)", lambda o: o["server_create_s"]),
    ("execs/s", lambda o: o["execs_per_s"]),
    ("exec p50 (ms)", lambda o: pct(o["exec_latencies_s"], 50) * 1000),
    ("exec p99 (ms)", lambda o: pct(o["exec_latencies_s"], 99) * 1000),
    ("close all (s)", lambda o: o["close_s"]),
    ("client CPU (s)", lambda o: o["cpu_s"]),
]


def mmm(xs, fmt="{:.1f}"):
    return " / ".join(fmt.format(x) for x in (min(xs), statistics.median(xs), max(xs)))


def report(a, res):
    """Prints the table of res's rounds (as many of each arm)."""
    print(f"\n{a.n} sandboxes created at once ({a.cpu_millis} millicores, {a.memory_bytes >> 20} MiB each), "
          f"each stepped with {a.execs} `true` execs ({a.n} at once); {len(res['python'])} rounds; "
          f"min / median / max over the rounds\n")
    print("| figure | Python (megaflow.aio) | Go (client) | ratio Python / Go, per round |")
    print("| --- | --- | --- | --- |")
    for label, f in FIGURES:
        py = [f(o) for o in res["python"]]
        go = [f(o) for o in res["go"]]
        ratio = [p / g for p, g in zip(py, go)]
        print(f"| {label} | {mmm(py)} | {mmm(go)} | {mmm(ratio, '{:.2f}')} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16, help="sandboxes per arm (default 16)")
    ap.add_argument("--execs", type=int, default=8, help="`true` execs per sandbox per arm (default 8)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each both arms (default 3)")
    ap.add_argument("--cpu-millis", type=int, default=100, help="CPU of each sandbox, millicores (default 100)")
    ap.add_argument("--memory-bytes", type=int, default=16 << 20, help="memory of each sandbox (default 16 MiB)")
    ap.add_argument("--max-concurrent-starts", type=int, default=4,
                    help="container starts the worker runs at once (default 4: at 16 a loaded engine misses the "
                         "worker's 30 s deadline on docker start)")
    ap.add_argument("--image", default=os.environ.get("MEGAFLOW_SANDBOX_IMAGE", "megaflow-test/busybox:1"))
    ap.add_argument("--megaflow", default=str(REPO / "bin" / "megaflow"), help="the megaflow binary")
    ap.add_argument("--megaflow-bench", default=str(REPO / "bin" / "megaflow-bench"),
                    help="the megaflow-bench binary (the Go arm)")
    ap.add_argument("--heads", default="", help="comma-separated heads of a running cluster (default: start one)")
    ap.add_argument("--json", default="", help="also write every arm's figures and exec latencies to this file")
    a = ap.parse_args()
    if not (1 <= a.n <= 1024 and 1 <= a.execs <= 10000 and 1 <= a.rounds <= 100 and 1 <= a.cpu_millis <= 64000
            and 4 << 20 <= a.memory_bytes <= 64 << 30 and 1 <= a.max_concurrent_starts <= 256):
        sys.exit("--n 1..1024, --execs 1..10000, --rounds 1..100, --cpu-millis 1..64000, "
                 "--memory-bytes 4 MiB..64 GiB, --max-concurrent-starts 1..256")
    for flag, path, pkg in (("--megaflow", a.megaflow, "megaflow"), ("--megaflow-bench", a.megaflow_bench,
                                                                     "megaflow-bench")):
        if not a.heads or flag == "--megaflow-bench":
            if not os.access(path, os.X_OK):
                sys.exit(f"{path} is not an executable: go build -o bin/{pkg} ./cmd/{pkg}, or pass {flag}")

    def term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, term)
    signal.signal(signal.SIGHUP, term)
    print(f"start {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; loadavg {open('/proc/loadavg').read().strip()}",
          flush=True)
    proc, worker = None, None
    res = {"python": [], "go": []}
    tmp = tempfile.TemporaryDirectory(prefix="megaflow-bench-")
    try:
        if a.heads:
            heads = a.heads.split(",")
        else:
            proc, addr, worker = start_cluster(a.megaflow, tmp.name, a)
            heads = [addr]
        for r in range(a.rounds):
            for side in (["python", "go"] if r % 2 == 0 else ["go", "python"]):
                load = loadavg()
                if side == "python":
                    c0 = cpu_self()
                    out = asyncio.run(python_arm(heads, a))
                    out["cpu_s"] = cpu_self() - c0
                else:
                    c0 = cpu_children()
                    out = go_arm(a.megaflow_bench, heads, a, tmp.name)
                    out["cpu_s"] = cpu_children() - c0
                waited = drain(worker) if worker else 0.0
                out["loadavg"], out["round"], out["removed_s"] = load, r + 1, waited
                res[side].append(out)
                lat = out["exec_latencies_s"]
                print(f"round {r + 1} {side:6}: loadavg {load}; create {out['create_s']:.2f} s "
                      f"(heads {out['server_create_s']:.2f} s), "
                      f"{out['execs_per_s']:.1f} execs/s, p50 {pct(lat, 50) * 1000:.0f} ms, "
                      f"p99 {pct(lat, 99) * 1000:.0f} ms, close {out['close_s']:.2f} s, CPU {out['cpu_s']:.1f} s; "
                      f"containers removed {waited:.0f} s later",
                      flush=True)
        report(a, res)
        if a.json:
            Path(a.json).write_text(json.dumps({"args": vars(a), "rounds": res}) + "\n")
    except KeyboardInterrupt:  # the rounds both arms finished are still worth a table
        done = min(len(res["python"]), len(res["go"]))
        if done:
            report(a, {k: v[:done] for k, v in res.items()})
        raise
    finally:
        stop_cluster(proc)
        if worker:
            n = remove_left(worker)
            print(f"\nleft behind by the stopped cluster and removed: {n} containers")
        tmp.cleanup()
        print(f"end {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; loadavg "
              f"{open('/proc/loadavg').read().strip()}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        sys.exit(f"python_sandboxes.py: interrupted ({e or 'SIGINT'})")
