"""End to end: a real `megaflow up --runtime process` on free loopback ports
in a temporary data dir, driven from Python; and, when a Docker Engine
answers and has a busybox image, `megaflow up --runtime docker` for a
sandbox session.

The binary is $MEGAFLOW_BIN when set, else built from this repository with
`go build` (the test is skipped, saying so, when neither is available).

The sandbox tests (a session; snapshots, forks, directory copies and
set_timeout) need a local image with sh and sleep: $MEGAFLOW_SANDBOX_IMAGE,
else megaflow-test/busybox:1 (the Go runtime tests build it) or
megaflow/busybox:test (`make image`); it is skipped, saying which, when
none is there (the workers never pull).
"""

import asyncio
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
import megaflow.aio
import megaflow.gym

START_TIMEOUT = 60  # seconds for `megaflow up` to say ready
STOP_TIMEOUT = 30  # seconds for it to stop after SIGINT before it is killed


@pytest.fixture(scope="session")
def megaflow_bin(bin_dir):
    """The megaflow binary: $MEGAFLOW_BIN, or the one in bin_dir (conftest)."""
    env_bin = os.environ.get("MEGAFLOW_BIN")
    if env_bin:
        if not os.access(env_bin, os.X_OK):
            pytest.fail(f"MEGAFLOW_BIN={env_bin} is not an executable")
        return env_bin
    return str(bin_dir / "megaflow")


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

    def __init__(self, binary: str, data_dir: Path, runtime: str = "process") -> None:
        self.grpc = f"127.0.0.1:{_free_port()}"
        args = [binary, "up", "--runtime", runtime, "--data-dir", str(data_dir),
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


def _start(megaflow_bin, tmp_path, runtime="process"):
    c = None
    for attempt in range(3):  # a port taken between asking and binding: try others
        c = LocalCluster(megaflow_bin, tmp_path / f"data{attempt}", runtime)
        try:
            c.wait_ready()
            break
        except RuntimeError:
            if attempt == 2 or "address already in use" not in "".join(c.output):
                raise
    return c


@pytest.fixture
def cluster(megaflow_bin, tmp_path):
    c = _start(megaflow_bin, tmp_path)
    yield c
    rc = c.stop()
    assert rc == 0, "megaflow up did not stop cleanly:\n" + "".join(c.output)


@pytest.fixture
def sandbox_image():
    """A local image with sh and sleep, or a skip saying what is missing."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI: the sandbox test needs a Docker Engine")
    try:
        subprocess.run([docker, "version", "--format", "{{.Server.Version}}"], check=True, timeout=20,
                       capture_output=True)
    except (subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"no Docker Engine answers ({e}): the sandbox test needs one")
    env = os.environ.get("MEGAFLOW_SANDBOX_IMAGE")
    candidates = [env] if env else ["megaflow-test/busybox:1", "megaflow/busybox:test"]
    for image in candidates:
        if subprocess.run([docker, "image", "inspect", image], timeout=20, capture_output=True).returncode == 0:
            return image
    pytest.skip(f"none of the images {candidates} is on the Docker Engine (workers do not pull): "
                f"run `make image` (megaflow/busybox:test) or set MEGAFLOW_SANDBOX_IMAGE")


@pytest.fixture
def docker_cluster(megaflow_bin, tmp_path, sandbox_image):
    c = _start(megaflow_bin, tmp_path, "docker")
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

    asyncio.run(asyncio.wait_for(_aio_graph(cluster.grpc), 120))


async def _aio_graph(addr: str) -> None:
    """The asyncio client on the same cluster: four graphs submitted and
    waited for at once, their results, a failed task's log, a watch."""
    async with megaflow.aio.Client([addr], timeout=20) as c:
        graphs = []
        for i in range(4):
            g = megaflow.Graph(f"e2e-aio-{i}")
            a = g.task("a", sh(f'echo "MEGAFLOW_RESULT {{\\"reward\\": {i}}}"'), image="busybox")
            g.task("b", sh("echo nope >&2; exit 2"), image="busybox", after=[a])
            graphs.append(g)
        gids = await asyncio.gather(*[c.submit(g) for g in graphs])
        assert gids == [f"e2e-aio-{i}" for i in range(4)]
        done = await asyncio.gather(*[c.wait(gid, timeout=60) for gid in gids])
        assert [d.state for d in done] == [megaflow.GRAPH_STATE_FAILED] * 4
        for i, gid in enumerate(gids):
            res = await c.results(gid)
            assert res["a"].result == {"reward": i} and res["b"].state == "FAILED" and res["b"].exit_code == 2
        # follow: until the attempt's log is complete (it may land after the task ends)
        log = b"".join([x async for x in c.stream_logs(f"{gids[0]}/b", follow=True, timeout=20)])
        assert b"nope" in log
        seen = []
        async for ev in c.watch(gids[0], timeout=20):
            seen.append(ev)
            if not ev.task_id and ev.graph_state == megaflow.GRAPH_STATE_FAILED:
                break
        assert {e.task_id for e in seen if e.task_id} == {f"{gids[0]}/a", f"{gids[0]}/b"}
        with pytest.raises(megaflow.NotFound):
            await c.get_graph("no-such-graph")


def test_sandbox_end_to_end(docker_cluster, sandbox_image):
    log = []  # a short transcript, printed with -s
    with megaflow.Client([docker_cluster.grpc], timeout=20) as c:
        with c.sandbox(image=sandbox_image, cpu_millis=200, memory="64Mi", env={"WHO": "agent"},
                       labels={"purpose": "python-e2e"}, lifetime=600, idle_timeout=120, wait_ready=120) as sb:
            assert sb.state == "READY" and sb.worker, sb.info
            log.append(f"created {sb.id} on {sb.worker}: {sb.state}")
            assert sb.id in [s.id for s in c.list_sandboxes()]
            assert c.get_sandbox(sb.id).state == "READY"

            r = sb.exec(["echo", "hello"])
            assert (r.exit_code, r.stdout, r.stderr) == (0, b"hello\n", b"")
            log.append(f"exec echo hello -> {r.exit_code} {r.text!r}")
            r = sb.exec('echo "to $WHO"; echo oops >&2; exit 3')
            assert (r.exit_code, r.text, r.stderr_text) == (3, "to agent\n", "oops\n")
            log.append(f"exec sh -c '...exit 3' -> {r.exit_code} out={r.text!r} err={r.stderr_text!r}")
            assert sb.exec("cat", stdin=b"piped").stdout == b"piped"

            sb.write_file("/work/data/main.sh", "#!/bin/sh\necho from-file $1\n", mode=0o755)
            assert sb.read_file("/work/data/main.sh") == b"#!/bin/sh\necho from-file $1\n"
            r = sb.exec(["/work/data/main.sh", "x"], cwd="/work")
            assert r.text == "from-file x\n", r
            log.append(f"write_file/read_file /work/data/main.sh, exec it -> {r.text!r}")
            with pytest.raises(megaflow.FileNotFound):
                sb.read_file("/no/such/file")

            t0 = time.monotonic()
            r = sb.exec("sleep 30", timeout=1)
            took = time.monotonic() - t0
            assert r.timed_out and took < 15, (r, took)
            log.append(f"exec sleep 30 timeout=1 -> timed_out={r.timed_out} exit={r.exit_code} in {took:.1f}s")

            chunks = [x for x in sb.exec_stream("echo a; echo b >&2; echo c")]
            assert isinstance(chunks[-1], megaflow.ExecResult) and chunks[-1].exit_code == 0
            assert b"".join(b for k, b in chunks[:-1] if k == "stdout") == b"a\nc\n"
        assert sb.state == "CLOSED"
        log.append(f"closed: {sb.state}")
        sb.close()  # idempotent
        with pytest.raises(megaflow.SandboxClosed) as ei:
            sb.exec(["echo", "late"])
        assert isinstance(ei.value, megaflow.FailedPrecondition) and ei.value.reason == "SANDBOX_CLOSED"
        log.append(f"exec after close -> {type(ei.value).__name__}: {ei.value.message}")
        assert sb.id not in [s.id for s in c.list_sandboxes()]
        assert sb.id in [s.id for s in c.list_sandboxes(all=True)]
    log.extend(asyncio.run(asyncio.wait_for(_aio_sandboxes(docker_cluster.grpc, sandbox_image), 180)))
    log.append(_gym_episode(docker_cluster.grpc, sandbox_image))
    print("\n" + "\n".join(log))


def _tree(root: Path) -> dict:
    """{relative path: (kind, content or link target, permission bits)}."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p), None)
        elif p.is_dir():
            out[rel] = ("dir", None, None)
        else:
            out[rel] = ("file", p.read_bytes(), p.stat().st_mode & 0o777)
    return out


def _until(what: str, cond, timeout: float = 60.0):
    """Call cond until it returns a true value (returned) or the timeout
    passes (AssertionError naming what was awaited)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.2)


def test_sandbox_snapshot_fork_copy_and_timeout(docker_cluster, sandbox_image, tmp_path):
    """Directories copied in and out, a snapshot after writing a file, a
    fork that reads it, the snapshot deleted once its fork is closed, and
    set_timeout ending the sandbox; then the same calls on megaflow.aio."""
    log = []
    src = tmp_path / "repo"
    (src / "pkg" / "data").mkdir(parents=True)
    (src / "pkg" / "run.sh").write_text("#!/bin/sh\necho ran $1\n")
    (src / "pkg" / "run.sh").chmod(0o755)
    (src / "pkg" / "data" / "blob.bin").write_bytes(os.urandom(1_500_000))  # more than one chunk
    (src / "README").write_text("hello\n")
    os.symlink("pkg/run.sh", src / "run")
    with megaflow.Client([docker_cluster.grpc], timeout=30) as c:
        try:
            with c.sandbox(image=sandbox_image, cpu_millis=100, memory="32Mi", lifetime=600, wait_ready=120) as sb:
                n = sb.upload(src, "/work/repo")
                r = sb.exec("cd /work/repo && ./run x && cat README && readlink run && wc -c < pkg/data/blob.bin")
                assert (r.exit_code, r.text.split()) == (0, ["ran", "x", "hello", "pkg/run.sh", "1500000"]), r
                back = tmp_path / "back"
                got = sb.download("/work/repo", back)
                assert _tree(back) == _tree(src)
                log.append(f"upload {n} bytes of tar into /work/repo, download {got} back: the same tree")
                sb.download("/work/repo/README", tmp_path / "one")
                assert _tree(tmp_path / "one") == {"README": ("file", b"hello\n", 0o644)}
                with pytest.raises(megaflow.FileNotFound):
                    sb.download("/work/nope", tmp_path / "none")

                sb.write_file("/work/state.txt", "step 7\n")
                snap = sb.snapshot("after-setup")
                assert (snap.name, snap.sandbox_id, snap.worker_id) == ("after-setup", sb.id, sb.worker), snap
                assert snap.id in [s.id for s in c.list_snapshots()]
                sb.write_file("/work/state.txt", "step 8\n")  # after the snapshot: not in its forks
                with c.sandbox(from_snapshot=snap, lifetime=600, wait_ready=120) as fork:
                    assert fork.state == "READY" and fork.info.from_snapshot == snap.id
                    assert fork.read_file("/work/state.txt") == b"step 7\n"
                    assert fork.exec("/work/repo/run fork").text == "ran fork\n"
                    with pytest.raises(megaflow.SnapshotInUse):
                        c.delete_snapshot(snap.id)
                    log.append(f"snapshot {snap.id} of {sb.id} ({snap.size_bytes} bytes), fork {fork.id} "
                               f"reads /work/state.txt as it was")
                assert sb.read_file("/work/state.txt") == b"step 8\n"

                def deleted():
                    try:
                        c.delete_snapshot(snap)
                        return True
                    except megaflow.SnapshotInUse:  # the closed fork's container is still being removed
                        return False
                _until("delete the snapshot after its fork closed", deleted)
                assert snap.id not in [s.id for s in c.list_snapshots()]
                with pytest.raises(megaflow.SnapshotNotFound):
                    c.sandbox(from_snapshot=snap.id)

                info = sb.set_timeout(3600)
                assert 3600 <= info.lifetime_seconds < 3600 + 300 and sb.info.lifetime_seconds == info.lifetime_seconds
                sb.set_timeout(1)
                _until("the sandbox expires a second after set_timeout(1)",
                       lambda: sb.refresh().state == megaflow.SANDBOX_STATE_EXPIRED, 30)
                with pytest.raises(megaflow.SandboxExpired):
                    sb.exec("true")
                log.append(f"set_timeout(3600): lifetime {info.lifetime_seconds} s; set_timeout(1): {sb.state}")
        finally:
            for s in c.list_snapshots(tenant=""):  # what a failure left: no image outlives the test
                try:
                    c.delete_snapshot(s.id)
                except megaflow.MegaflowError:
                    pass
    log.append(asyncio.run(asyncio.wait_for(_aio_snapshot_copy(docker_cluster.grpc, sandbox_image, tmp_path), 180)))
    print("\n" + "\n".join(log))


async def _aio_snapshot_copy(addr: str, image: str, tmp_path: Path) -> str:
    """megaflow.aio's upload (a tar given as bytes), download, snapshot,
    fork, delete and set_timeout."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti = tarfile.TarInfo("a/b.txt")
        ti.size = 3
        tf.addfile(ti, io.BytesIO(b"abc"))
    async with megaflow.aio.Client([addr], timeout=30) as c:
        async with c.sandbox(image=image, cpu_millis=100, memory="32Mi", lifetime=600, wait_ready=120) as sb:
            await sb.upload(buf.getvalue(), "/work/in")
            assert (await sb.exec("cat /work/in/a/b.txt")).text == "abc"
            await sb.download("/work/in", tmp_path / "aio")
            assert (tmp_path / "aio" / "a" / "b.txt").read_bytes() == b"abc"
            snap = await sb.snapshot("aio")
            try:
                async with c.sandbox(from_snapshot=snap.id, lifetime=600, wait_ready=120) as fork:
                    assert await fork.read_file("/work/in/a/b.txt") == b"abc"
                deadline = time.monotonic() + 60
                while True:
                    try:
                        await c.delete_snapshot(snap)
                        break
                    except megaflow.SnapshotInUse:  # the closed fork's container is still being removed
                        assert time.monotonic() < deadline, "aio: the snapshot is still in use 60 s after its fork closed"
                        await asyncio.sleep(0.2)
            finally:
                if snap.id in [s.id for s in await c.list_snapshots(tenant="")]:
                    await c.delete_snapshot(snap)
            info = await sb.set_timeout(1200)
            assert info.lifetime_seconds >= 1200
    return f"aio: upload, download, snapshot {snap.id}, fork, delete, set_timeout"


async def _aio_sandboxes(addr: str, image: str) -> list:
    """The asyncio client: three sandboxes created and stepped at once."""
    async with megaflow.aio.Client([addr], timeout=20) as c:
        async def episode(i: int) -> str:
            async with c.sandbox(image=image, cpu_millis=100, memory="32Mi", env={"I": str(i)},
                                 lifetime=600, wait_ready=120) as sb:
                await sb.write_file("/work/step.sh", "#!/bin/sh\necho step $1 of $I\n", mode=0o755)
                outs = [(await sb.exec(["/work/step.sh", str(k)])).text for k in range(3)]
                assert outs == [f"step {k} of {i}\n" for k in range(3)]
                chunks = [x async for x in sb.exec_stream("echo out; echo err >&2; exit 4")]
                assert chunks[-1].exit_code == 4
                assert [x for x in chunks[:-1] if x[0] == "stderr"] == [("stderr", b"err\n")]
            assert sb.state == "CLOSED"
            return sb.id

        ids = await asyncio.gather(*[episode(i) for i in range(3)])
        assert len(set(ids)) == 3
        return [f"aio: 3 sandboxes stepped at once and closed: {', '.join(ids)}"]


def _gym_episode(addr: str, image: str) -> str:
    """megaflow.gym.SandboxEnv on a real sandbox: a task file, a seeded
    setup, steps scored by their exit, termination on a solved check."""
    def solved(env, action, result):
        return result.ok and result.text.strip() == "42"

    with megaflow.Client([addr], timeout=20) as c:
        with megaflow.gym.SandboxEnv(c, image, sandbox=dict(cpu_millis=100, memory="32Mi", lifetime=600),
                                     files={"/work/task": "print the answer\n"},
                                     setup=['cat /work/task; echo "seed $MEGAFLOW_SEED"'],
                                     reward=lambda env, a, r: 1.0 if r.ok else 0.0, terminate=solved,
                                     max_steps=5, step_timeout=30) as env:
            obs, info = env.reset(seed=3)
            assert obs == "print the answer\nseed 3\n", obs
            obs, r, term, trunc, info = env.step("ls /nope")
            assert (r, term, trunc, info["exit_code"]) == (0.0, False, False, 1) and "nope" in obs
            obs, r, term, trunc, info = env.step(["sh", "-c", "echo 42"])
            assert (obs, r, term, trunc, info["step"]) == ("42\n", 1.0, True, False, 2)
            sid = env.sandbox.id
        assert c.get_sandbox(sid).state == "CLOSED"
    return f"gym: episode in {sid}: reset (seed 3), 2 steps, terminated with reward 1.0"
