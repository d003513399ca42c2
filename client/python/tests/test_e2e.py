"""End to end: a real `megaflow up --runtime process` on free loopback ports
in a temporary data dir, driven from Python.

The binary is $MEGAFLOW_BIN when set, else built from this repository with
`go build` (the test is skipped, saying so, when neither is available).
"""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import megaflow

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT = 60  # seconds for `megaflow up` to say ready
STOP_TIMEOUT = 30  # seconds for it to stop after SIGINT before it is killed


@pytest.fixture(scope="session")
def megaflow_bin(tmp_path_factory):
    """The megaflow binary: $MEGAFLOW_BIN, or one built with go."""
    env_bin = os.environ.get("MEGAFLOW_BIN")
    if env_bin:
        if not os.access(env_bin, os.X_OK):
            pytest.fail(f"MEGAFLOW_BIN={env_bin} is not an executable")
        return env_bin
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed and MEGAFLOW_BIN is not set: cannot build the megaflow binary")
    out = tmp_path_factory.mktemp("bin") / "megaflow"
    subprocess.run([go, "build", "-o", str(out), "./cmd/megaflow"], cwd=REPO, check=True, timeout=600)
    return str(out)


def _free_port() -> int:
    # A port free for TCP and UDP (gossip uses both) at the time of asking.
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


class LocalCluster:
    """`megaflow up` in a subprocess; stop() sends SIGINT, waits, kills."""

    def __init__(self, binary: str, data_dir: Path) -> None:
        self.grpc = f"127.0.0.1:{_free_port()}"
        args = [binary, "up", "--runtime", "process", "--data-dir", str(data_dir),
                "--grpc-addr", self.grpc, "--raft-addr", f"127.0.0.1:{_free_port()}",
                "--gossip-addr", f"127.0.0.1:{_free_port()}",
                "--worker-gossip-addr", f"127.0.0.1:{_free_port()}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output: list = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)
            if line.startswith("ready:"):
                self.ready.set()
        self.ready.set()  # exited: wake the waiter

    def wait_ready(self) -> None:
        if not self.ready.wait(START_TIMEOUT) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("megaflow up did not start:\n" + "".join(self.output))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.join(10)
        return self.proc.returncode


@pytest.fixture
def cluster(megaflow_bin, tmp_path):
    c = None
    for attempt in range(3):  # a port taken between asking and binding: try others
        c = LocalCluster(megaflow_bin, tmp_path / f"data{attempt}")
        try:
            c.wait_ready()
            break
        except RuntimeError:
            if attempt == 2 or "address already in use" not in "".join(c.output):
                raise
    yield c
    rc = c.stop()
    assert rc == 0, "megaflow up did not stop cleanly:\n" + "".join(c.output)


def sh(script: str):
    return ["sh", "-c", script]


def test_graph_end_to_end(cluster, tmp_path):
    g = megaflow.Graph("e2e-step-1", labels={"purpose": "python-e2e"})
    gen = g.task("generate", sh('echo generating; printf \'{"traj": [1, 2]}\' > "$MEGAFLOW_OUTPUT_DIR/traj.json"; '
                                'echo \'MEGAFLOW_RESULT {"reward": 0.5}\''),
                 image="busybox", cpu="100m", memory="64Mi", outputs=["traj.json"], timeout=60)
    score = g.task("score", sh('echo "MEGAFLOW_RESULT {\\"reward\\": 1.0, \\"who\\": \\"$WHO\\"}"'),
                   image="busybox", after=[gen], type="eval", env={"WHO": "scorer"})
    bad = g.task("bad", sh("echo about to fail >&2; exit 3"), image="busybox", after=[gen], retries=1)
    g.task("aggregate", sh('echo \'MEGAFLOW_RESULT {"n": 2}\''), image="busybox",
           after=[score, bad], run_on_upstream_failure=True)

    with megaflow.Client([cluster.grpc], timeout=20) as c:
        gid = c.submit(g)
        assert gid == "e2e-step-1"
        assert c.submit(g) == gid  # idempotent by id
        done = c.wait(gid, timeout=120)

        assert done.state == megaflow.GRAPH_STATE_FAILED
        assert (done.counts.succeeded, done.counts.failed) == (3, 1)
        res = c.results(gid)
        assert res["generate"].result == {"reward": 0.5}
        assert res["score"].result == {"reward": 1.0, "who": "scorer"}
        assert res["aggregate"].result == {"n": 2}
        b = res["bad"]
        assert (b.state, b.reason_code, b.exit_code, b.attempts) == ("FAILED", "EXIT_CODE", 3, 2)
        assert "exit code 3" in b.reason

        m = c.metrics(gid)
        assert (m.field, m.finished, m.succeeded, m.count) == ("reward", 4, 3, 2)
        assert m.success_rate == pytest.approx(0.75) and m.mean == pytest.approx(0.75)

        assert "about to fail" in c.logs(f"{gid}/bad")
        assert "generating" in c.logs(f"{gid}/generate", attempt=1)

        deadline = time.monotonic() + 30
        while True:  # the manifest lands shortly after the task ends
            try:
                files = c.download(f"{gid}/generate", tmp_path / "out")
                break
            except megaflow.NotFound:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert [p.name for p in files] == ["traj.json"]
        assert files[0].read_text() == '{"traj": [1, 2]}'

        events = []
        for ev in c.watch(gid, timeout=20):
            events.append(ev)
            if not ev.task_id and ev.graph_state == megaflow.GRAPH_STATE_FAILED:
                break
        assert {e.task_id for e in events if e.task_id} == {f"{gid}/{n}" for n in res}
        # Resuming after an event replays only what follows it.
        mid = events[len(events) // 2]
        rest = []
        for ev in c.watch(gid, after=megaflow.Cursor(mid.index, mid.seq), timeout=20):
            rest.append(ev)
            if not ev.task_id and ev.graph_state == megaflow.GRAPH_STATE_FAILED:
                break
        assert rest == events[len(events) // 2 + 1:]

        with pytest.raises(megaflow.NotFound):
            c.get_graph("no-such-graph")
        other = megaflow.Graph(gid)
        other.task("x", ["true"], image="busybox")
        with pytest.raises(megaflow.AlreadyExists):
            c.submit(other)
        with pytest.raises(megaflow.InvalidArgument):
            c.submit(megaflow.GraphSpec(id="bad-type", tasks=[megaflow.TaskSpec(
                name="a", image="busybox", command=["true"], runtime="bogus")]))
