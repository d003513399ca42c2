"""Test setup: import the SDK from ../src without installing it, and give
the tests fake heads that are stopped after each test."""

import os
import sys

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
