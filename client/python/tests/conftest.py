"""Test setup: import the SDK from ../src without installing it, and give
the tests fake heads that are stopped after each test."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from fakehead import FakeHead  # noqa: E402


@pytest.fixture
def heads():
    """A factory of fake heads: heads(2) returns two started FakeHeads."""
    started = []

    def make(n=1):
        hs = [FakeHead() for _ in range(n)]
        started.extend(hs)
        return hs

    yield make
    for h in started:
        h.stop()


@pytest.fixture
def dead_addr():
    """A loopback address where nothing listens (connections are refused)."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return addr


@pytest.fixture(params=["sync", "aio"])
def api(request):
    """The client under test: megaflow's blocking Client and Sandbox, or
    megaflow.aio's driven through a blocking adapter (aiosync.py), so that
    every behaviour test runs against both with the same assertions."""
    if request.param == "sync":
        import megaflow
        yield megaflow
        return
    from aiosync import AioApi
    a = AioApi()
    try:
        yield a
    finally:
        a.stop()


REPO = Path(__file__).resolve().parents[3]
DAEMONS = ("megaflow", "megaflow-head", "megaflow-worker", "megaflow-init")


@pytest.fixture(scope="session")
def bin_dir(tmp_path_factory):
    """A directory with the binaries the end-to-end tests run: megaflow,
    megaflow-head, megaflow-worker and megaflow-init. $MEGAFLOW_BIN_DIR when
    set (e.g. bin/ after `make build`), else built from this repository with
    one `go build` (skipped, saying so, without Go)."""
    env_dir = os.environ.get("MEGAFLOW_BIN_DIR")
    if env_dir:
        missing = [d for d in DAEMONS if not os.access(os.path.join(env_dir, d), os.X_OK)]
        if missing:
            pytest.fail(f"MEGAFLOW_BIN_DIR={env_dir} lacks the executables {missing}")
        return Path(env_dir)
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed and MEGAFLOW_BIN_DIR is not set: cannot build the megaflow binaries")
    out = tmp_path_factory.mktemp("bin")
    # Static, as `make build` builds them: megaflow-init runs inside test
    # containers FROM scratch, which have no C library for a cgo binary
    # (a sandbox's container then exits 1 at once).
    subprocess.run([go, "build", "-o", str(out) + "/"] + [f"./cmd/{d}" for d in DAEMONS], cwd=REPO, check=True,
                   timeout=900, env={**os.environ, "CGO_ENABLED": "0"})
    return out
