"""Failover across a real leader kill: three `megaflow-head` daemons and a
`megaflow-worker` (process runtime) on free loopback ports, a graph
submitted from Python, the leader head SIGKILLed while a blocking client
waits for the graph and an asyncio client watches it. Both clients must
move to the heads that are left, the graph must finish, and its results
and events must arrive complete and once.

The daemons come from the bin_dir fixture (conftest.py): $MEGAFLOW_BIN_DIR,
or built with `go build` (the test is skipped, saying so, without either). Every wait has a deadline; every process is stopped (SIGKILL after
a grace period) whatever happens.
"""

import asyncio
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import megaflow
import megaflow.aio
from megaflow._proto import service_pb2 as svc
from test_e2e import _free_port

READY_TIMEOUT = 60  # seconds for a leader, the rules and the worker to show up
STOP_TIMEOUT = 15  # seconds for a daemon to stop after SIGTERM before SIGKILL
SCENARIO_TIMEOUT = 150  # seconds for the whole scenario after the cluster is up


class Daemon:
    """One daemon process, its output in a file."""

    def __init__(self, name: str, args: list, log: Path) -> None:
        self.name = name
        self.log = log
        self._f = open(log, "wb")
        self.proc = subprocess.Popen(args, stdout=self._f, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
        self._f.close()

    def output(self) -> str:
        return f"--- {self.name} (exit {self.proc.poll()}) ---\n" + self.log.read_text(errors="replace")[-4000:]


class Cluster:
    """Three heads bootstrapping one Raft cluster, one process worker."""

    def __init__(self, bindir: Path, tmp: Path) -> None:
        self.daemons = []
        n = 3
        grpc_ports = [_free_port() for _ in range(n)]
        gossip = [f"127.0.0.1:{_free_port()}" for _ in range(n)]
        artifacts = f"file://{tmp / 'artifacts'}"
        self.heads = {}  # head id -> (grpc addr, Daemon)
        for i in range(n):
            hid = f"h{i + 1}"
            addr = f"127.0.0.1:{grpc_ports[i]}"
            args = [str(bindir / "megaflow-head"), "--node-id", hid, "--data-dir", str(tmp / hid),
                    "--raft-addr", f"127.0.0.1:{_free_port()}", "--grpc-addr", addr, "--gossip-addr", gossip[i],
                    "--http-addr", "", "--bootstrap-expect", str(n),
                    "--join", ",".join(g for j, g in enumerate(gossip) if j != i), "--artifacts", artifacts]
            d = Daemon(hid, args, tmp / f"{hid}.log")
            self.daemons.append(d)
            self.heads[hid] = (addr, d)
        w = Daemon("w1", [str(bindir / "megaflow-worker"), "--node-id", "w1", "--data-dir", str(tmp / "w1"),
                          "--runtime", "process", "--gossip-addr", f"127.0.0.1:{_free_port()}", "--http-addr", "",
                          "--join", ",".join(gossip), "--cpu-millis", "4000", "--memory-bytes", str(2 << 30),
                          "--init-path", str(bindir / "megaflow-init"), "--artifacts", artifacts],
                   tmp / "w1.log")
        self.daemons.append(w)

    @property
    def addrs(self) -> list:
        return [a for a, _ in self.heads.values()]

    def output(self) -> str:
        return "\n".join(d.output() for d in self.daemons)

    def wait_ready(self) -> svc.ClusterStatusResponse:
        """Poll (with a deadline) until a leader has committed the rules and
        the worker is registered; return the leader's status."""
        deadline = time.monotonic() + READY_TIMEOUT
        last = "nothing yet"
        with megaflow.Client(self.addrs, timeout=5, backoff=(0.05, 0.5)) as c:
            while time.monotonic() < deadline:
                dead = [d.name for d in self.daemons if d.proc.poll() is not None]
                if dead:
                    raise RuntimeError(f"daemons {dead} exited while starting:\n{self.output()}")
                try:
                    st = c.cluster_status(timeout=2)
                    workers = c._call("ListWorkers", svc.ListWorkersRequest(), 2).workers
                    if st.leader_id and st.rules and any(w.info.id == "w1" for w in workers):
                        return st
                    last = f"leader {st.leader_id!r}, rules {st.rules}, workers {[w.info.id for w in workers]}"
                except megaflow.MegaflowError as e:
                    last = str(e)
                time.sleep(0.2)  # polling a condition, bounded by the deadline
        raise RuntimeError(f"no ready cluster after {READY_TIMEOUT} s (last: {last}):\n{self.output()}")

    def stop(self) -> None:
        for d in self.daemons:
            d.stop()


@pytest.fixture
def cluster3(bin_dir, tmp_path):
    c = Cluster(bin_dir, tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_leader_kill_while_waiting(cluster3):
    st = cluster3.wait_ready()
    leader_addr, leader = cluster3.heads[st.leader_id]
    # The leader first in both clients' lists: after the kill they must move on.
    order = [leader_addr] + [a for a in cluster3.addrs if a != leader_addr]

    g = megaflow.Graph("failover-1")
    prev = None
    names = [f"step-{i}" for i in range(3)]
    for i, n in enumerate(names):
        # Long enough that the kill lands while the graph runs.
        prev = g.task(n, ["sh", "-c", f'sleep 2; echo "MEGAFLOW_RESULT {{\\"reward\\": {i}}}"'], image="busybox",
                      after=[prev] if prev else [], timeout=60)

    killed = threading.Event()

    async def scenario(sc):
        async with megaflow.aio.Client(order, timeout=10, backoff=(0.05, 0.5)) as ac:
            gid = await ac.submit(g)
            waiter = asyncio.ensure_future(asyncio.to_thread(sc.wait, gid, timeout=120))
            events = []
            async for ev in ac.watch(gid, timeout=120):
                events.append(ev)
                if ev.task_id and ev.task_state == megaflow.TASK_STATE_RUNNING and not killed.is_set():
                    leader.kill()  # SIGKILL while both clients wait
                    killed.set()
                if not ev.task_id and ev.graph_state in (megaflow.GRAPH_STATE_SUCCEEDED, megaflow.GRAPH_STATE_FAILED,
                                                         megaflow.GRAPH_STATE_CANCELLED):
                    break
            done = await waiter
            results = await ac.results(gid)
            sync_results = sc.results(gid)
            tasks = [t async for t in ac.tasks(gid)]
            new = await ac.cluster_status()
            return gid, events, done, results, sync_results, tasks, new, ac.heads, sc.heads

    try:
        with megaflow.Client(order, timeout=10, backoff=(0.05, 0.5)) as sc:
            gid, events, done, results, sync_results, tasks, new, aheads, sheads = asyncio.run(
                asyncio.wait_for(scenario(sc), SCENARIO_TIMEOUT))
    except BaseException:
        print(cluster3.output())
        raise
    print(f"killed leader {st.leader_id} ({leader_addr}, term {st.term}); new leader {new.leader_id} "
          f"(term {new.term}); {len(events)} events; attempts {[len(t.attempts) for t in tasks]}")
    assert killed.is_set()
    assert done.state == megaflow.GRAPH_STATE_SUCCEEDED, (done, cluster3.output())
    # Both clients left the dead head; the cluster has another leader.
    assert aheads[0] != leader_addr and sheads[0] != leader_addr
    assert new.leader_id and new.leader_id != st.leader_id and new.term > st.term
    # Results complete, each task once, with its JSON.
    for res in (results, sync_results):
        assert sorted(res) == names
        assert [(res[n].state, res[n].result) for n in names] == [("SUCCEEDED", {"reward": i})
                                                                   for i in range(len(names))]
    # The attempts survived the leader: none ran twice.
    assert [len(t.attempts) for t in tasks] == [1] * len(names)
    # Events across the failover: strictly increasing cursors (no duplicate),
    # each task's SUCCEEDED exactly once, the graph's end last.
    cursors = [(e.index, e.seq) for e in events]
    assert cursors == sorted(set(cursors))
    succeeded = [e.task_id for e in events if e.task_state == megaflow.TASK_STATE_SUCCEEDED]
    assert sorted(succeeded) == [f"{gid}/{n}" for n in names]
    assert events[-1].graph_state == megaflow.GRAPH_STATE_SUCCEEDED and not events[-1].task_id
