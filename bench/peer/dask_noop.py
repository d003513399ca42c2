#!/usr/bin/env python3
"""The Dask distributed peer of `megaflow-bench throughput`.

Runs the same no-op workload as the MegaFlow side through a Dask LocalCluster
with two worker processes (Debian's python3-distributed): CLIENTS concurrent
clients (one dask.distributed.Client each, in threads), each submitting
TASKS no-op tasks in batches of BATCH (client.map, pure=False) and gathering
every batch's results before the next one. A task returns the time it
started; submit-to-start latency is that minus the batch's submit time.

Prints one JSON object on stdout: tasks, wall_s, tasks_per_s,
latency_p50_ms, latency_p99_ms, dask_version. Exits non-zero with a message
on stderr when Dask cannot run.
"""
import argparse
import json
import sys
import threading
import time


def noop(_):
    return time.time()


def percentile(xs, p):
    s = sorted(xs)
    i = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--tasks", type=int, required=True, help="tasks per client")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    try:
        import distributed
        from distributed import Client, LocalCluster
    except ImportError as e:
        print(f"dask distributed is not installed ({e}): apt-get install python3-distributed", file=sys.stderr)
        sys.exit(2)

    cluster = LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=40)
    clients = [Client(cluster) for _ in range(a.clients)]
    # Warm-up: each client runs one small batch, so that connections and
    # function pickling are not in the measurement (the MegaFlow side's
    # cluster is up and its workers connected before it starts too).
    for c in clients:
        c.gather(c.map(noop, range(10), pure=False))
    lat = []
    lock = threading.Lock()
    errors = []

    def run(c):
        try:
            done = 0
            while done < a.tasks:
                n = min(a.batch, a.tasks - done)
                t = time.time()
                starts = c.gather(c.map(noop, range(n), pure=False))
                with lock:
                    lat.extend((s - t) * 1000 for s in starts)
                done += n
        except Exception as e:  # reported, not hidden
            errors.append(repr(e))

    t0 = time.time()
    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.time() - t0
    for c in clients:
        c.close()
    cluster.close()
    if errors:
        print("dask peer failed: " + "; ".join(errors), file=sys.stderr)
        sys.exit(1)
    n = a.clients * a.tasks
    print(json.dumps({"tasks": n, "wall_s": wall, "tasks_per_s": n / wall,
                      "latency_p50_ms": percentile(lat, 50), "latency_p99_ms": percentile(lat, 99),
                      "dask_version": distributed.__version__}))


if __name__ == "__main__":
    main()
