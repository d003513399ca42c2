"""Sandbox pause and resume against fake heads: the requests sent (the id
and the index the handle saw), the handle's state afterwards, the calls
retried through a head failure and a NOT_LEADER answer, the reasons
mapped to SandboxPaused, SandboxBusy and the others, and wait_ready
returning on a PAUSED sandbox. Each test runs against the blocking client
and megaflow.aio (the api fixture)."""

import grpc
import pytest

import megaflow
from fakehead import fail, not_leader, with_reason
from megaflow._proto import sandbox_pb2 as sbx

FAST = dict(backoff=(0.01, 0.05), timeout=5)


class Box:
    """SandboxService handlers over one fake sandbox that can be paused."""

    def __init__(self):
        self.index = 11
        self.state = sbx.SANDBOX_STATE_READY

    def install(self, *hs):
        for h in hs:
            h.handlers.update({"GetSandbox": self.get, "PauseSandbox": self.pause, "ResumeSandbox": self.resume})
        return self

    def _row(self, sid):
        return sbx.Sandbox(id=sid, state=self.state, worker_id="w1", index=self.index)

    def get(self, req, context):
        return sbx.GetSandboxResponse(sandbox=self._row(req.id))

    def pause(self, req, context):
        if self.state != sbx.SANDBOX_STATE_PAUSED:
            self.state, self.index = sbx.SANDBOX_STATE_PAUSED, self.index + 1
        return sbx.PauseSandboxResponse(sandbox=self._row(req.id))

    def resume(self, req, context):
        if self.state != sbx.SANDBOX_STATE_READY:
            self.state, self.index = sbx.SANDBOX_STATE_READY, self.index + 1
        return sbx.ResumeSandboxResponse(sandbox=self._row(req.id))


def test_pause_and_resume_update_the_handle(heads, api):
    (h,) = heads(1)
    Box().install(h)
    with api.Client([h.addr], **FAST) as c:
        sb = c.get_sandbox("sbx-abc")
        info = sb.pause()
        assert info.state == megaflow.SANDBOX_STATE_PAUSED and sb.state == "PAUSED" and sb.info.index == 12
        sb.pause()  # idempotent: a second pause changes nothing
        assert sb.state == "PAUSED" and sb.info.index == 12
        assert sb.wait_ready(timeout=5).state == megaflow.SANDBOX_STATE_PAUSED  # started: no wait for a worker
        info = sb.resume()
        assert info.state == megaflow.SANDBOX_STATE_READY and sb.state == "READY" and sb.info.index == 13
    pauses, resumes = h.calls["PauseSandbox"], h.calls["ResumeSandbox"]
    assert [r.id for r in pauses + resumes] == ["sbx-abc"] * 3
    assert [r.min_index for r in pauses] == [11, 12] and resumes[0].min_index == 12


def test_pause_and_resume_are_retried(heads, dead_addr, api):
    h1, h2 = heads(2)
    Box().install(h1, h2)
    h1.fail_next("PauseSandbox", fail(grpc.StatusCode.UNAVAILABLE, "head going away"))
    h1.fail_next("ResumeSandbox", not_leader(h2.addr))
    with api.Client([dead_addr, h1.addr, h2.addr], **FAST) as c:
        assert api.Sandbox(c, "sbx-abc").pause().state == megaflow.SANDBOX_STATE_PAUSED
    assert h1.count("PauseSandbox") + h2.count("PauseSandbox") == 2
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        assert api.Sandbox(c, "sbx-abc").resume().state == megaflow.SANDBOX_STATE_READY
        assert c.heads[0] == h2.addr
    assert (h1.count("ResumeSandbox"), h2.count("ResumeSandbox")) == (1, 1)


@pytest.mark.parametrize("method,code,reason,cls,base", [
    ("Exec", grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_PAUSED", megaflow.SandboxPaused,
     megaflow.FailedPrecondition),
    ("WriteFile", grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_PAUSED", megaflow.SandboxPaused,
     megaflow.FailedPrecondition),
    ("PauseSandbox", grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_BUSY", megaflow.SandboxBusy,
     megaflow.FailedPrecondition),
    ("PauseSandbox", grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_NOT_READY", megaflow.SandboxNotReady,
     megaflow.FailedPrecondition),
    ("ResumeSandbox", grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_CLOSED", megaflow.SandboxClosed,
     megaflow.SandboxEnded),
    ("ResumeSandbox", grpc.StatusCode.NOT_FOUND, "SANDBOX_NOT_FOUND", megaflow.SandboxNotFound, megaflow.NotFound),
])
def test_pause_reasons_map_to_exception_classes_and_are_not_retried(heads, api, method, code, reason, cls, base):
    (h,) = heads(1)
    Box().install(h)
    msg = f"{method}: sandbox sbx-abc ({reason}); resume it first (megaflow sandbox resume sbx-abc)"
    h.fail_next(method, with_reason(code, msg, reason))
    calls = {"Exec": lambda sb: sb.exec(["true"]),
             "WriteFile": lambda sb: sb.write_file("/tmp/x", b"x"),
             "PauseSandbox": lambda sb: sb.pause(),
             "ResumeSandbox": lambda sb: sb.resume()}
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(base) as ei:
            calls[method](api.Sandbox(c, "sbx-abc"))
    assert type(ei.value) is cls and ei.value.reason == reason and ei.value.code == code
    assert msg in str(ei.value)
    assert h.count(method) == 1
