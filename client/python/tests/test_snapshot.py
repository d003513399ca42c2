"""Snapshots, forks and set_timeout against fake heads: the requests sent,
the snapshot never resent once sent (a NOT_LEADER answer followed), the
snapshot reasons mapped to exception classes, the retried calls retried,
and bad input refused before any RPC. Each test runs against the blocking
client and megaflow.aio (the api fixture)."""

import datetime

import grpc
import pytest

import megaflow
from fakehead import fail, not_leader, with_reason
from megaflow._proto import sandbox_pb2 as sbx

FAST = dict(backoff=(0.01, 0.05), timeout=5)
READY = sbx.SANDBOX_STATE_READY
SNAP = "snap-8d2mj4bq0ad1xk3c"


class Snaps:
    """SandboxService handlers over one fake sandbox and its snapshots."""

    def __init__(self):
        self.index = 11
        self.snapshots = []
        self.lifetime = 600

    def install(self, *hs):
        for h in hs:
            h.handlers.update({"CreateSandbox": self.create, "GetSandbox": self.get,
                               "SnapshotSandbox": self.snapshot, "ListSnapshots": self.list,
                               "DeleteSnapshot": self.delete, "SetSandboxTimeout": self.set_timeout})
        return self

    def _row(self, sid, **kw):
        return sbx.Sandbox(id=sid, state=READY, worker_id="w1", index=self.index, lifetime_seconds=self.lifetime, **kw)

    def create(self, req, context):
        return sbx.CreateSandboxResponse(sandbox=self._row(req.spec.id, image=req.spec.image,
                                                           from_snapshot=req.spec.from_snapshot))

    def get(self, req, context):
        return sbx.GetSandboxResponse(sandbox=self._row(req.id))

    def snapshot(self, req, context):
        self.index += 9
        s = sbx.Snapshot(id=SNAP, tenant="default", name=req.name, sandbox_id=req.sandbox_id, worker_id="w1",
                         image="megaflow-snapshot:" + SNAP, size_bytes=4096, create_index=self.index)
        self.snapshots.append(s)
        return sbx.SnapshotSandboxResponse(snapshot=s, index=self.index)

    def list(self, req, context):
        return sbx.ListSnapshotsResponse(snapshots=self.snapshots)

    def delete(self, req, context):
        self.index += 1
        self.snapshots = [s for s in self.snapshots if s.id != req.id]
        return sbx.DeleteSnapshotResponse(index=self.index)

    def set_timeout(self, req, context):
        self.index += 1
        self.lifetime = 100 + req.timeout_seconds  # as if created 100 s ago
        return sbx.SetSandboxTimeoutResponse(sandbox=self._row(req.id))


def test_snapshot_then_fork_carries_the_snapshot_and_its_index(heads, api):
    (h,) = heads(1)
    Snaps().install(h)
    with api.Client([h.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        snap = sb.snapshot("after-setup")
        assert isinstance(snap, megaflow.SnapshotInfo)
        assert (snap.id, snap.name, snap.sandbox_id, snap.worker_id) == (SNAP, "after-setup", "sbx-abc", "w1")
        r = h.calls["SnapshotSandbox"][0]
        assert (r.sandbox_id, r.name) == ("sbx-abc", "after-setup")

        fork = c.sandbox(from_snapshot=snap.id, wait_ready=5)
        req = h.calls["CreateSandbox"][0]
        assert (req.spec.from_snapshot, req.spec.image) == (SNAP, "")
        assert req.min_index == 20  # the snapshot's index: a fork through another head finds it
        assert fork.info.from_snapshot == SNAP
        c.sandbox(from_snapshot=snap)  # the message itself will do
        assert h.calls["CreateSandbox"][1].spec.from_snapshot == SNAP

        assert [s.id for s in c.list_snapshots()] == [SNAP]
        assert h.calls["ListSnapshots"][0].min_index == 20
        c.delete_snapshot(snap)
        assert h.calls["DeleteSnapshot"][0].id == SNAP
        assert c.list_snapshots() == []
        assert h.calls["ListSnapshots"][1].min_index == 21  # the delete's index was noted
        sb.snapshot()  # an empty name is fine
        assert h.calls["SnapshotSandbox"][1].name == ""


def test_snapshot_is_not_resent_once_sent(heads, api):
    h1, h2 = heads(2)
    Snaps().install(h1, h2)
    for h in (h1, h2):
        h.fail_next("SnapshotSandbox", fail(grpc.StatusCode.UNAVAILABLE, "connection reset"))
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        with pytest.raises(megaflow.Unavailable, match="list_snapshots"):
            sb.snapshot("x")
        assert h1.count("SnapshotSandbox") + h2.count("SnapshotSandbox") == 1
        # The worker failing is not resent either, and keeps its class.
        for h in (h1, h2):
            h.failures.clear()
            h.fail_next("SnapshotSandbox", with_reason(grpc.StatusCode.UNAVAILABLE, "worker w1 did not answer",
                                                       "WORKER_UNREACHABLE"))
        with pytest.raises(megaflow.WorkerUnreachable):
            sb.snapshot("x")
        assert h1.count("SnapshotSandbox") + h2.count("SnapshotSandbox") == 2


def test_snapshot_follows_not_leader(heads, api):
    h1, h2 = heads(2)
    Snaps().install(h1, h2)
    h1.fail_next("SnapshotSandbox", not_leader(h2.addr))
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        snap = api.Sandbox(c, "sbx-abc").snapshot("x")
        assert snap.id == SNAP and c.heads[0] == h2.addr
    assert (h1.count("SnapshotSandbox"), h2.count("SnapshotSandbox")) == (1, 1)


@pytest.mark.parametrize("method,code,reason,cls,base", [
    ("SnapshotSandbox", grpc.StatusCode.RESOURCE_EXHAUSTED, "SNAPSHOT_QUOTA_EXCEEDED", megaflow.SnapshotQuotaExceeded,
     megaflow.ResourceExhausted),
    ("CreateSandbox", grpc.StatusCode.NOT_FOUND, "SNAPSHOT_NOT_FOUND", megaflow.SnapshotNotFound, megaflow.NotFound),
    ("CreateSandbox", grpc.StatusCode.FAILED_PRECONDITION, "SNAPSHOT_WORKER_DOWN", megaflow.SnapshotWorkerDown,
     megaflow.FailedPrecondition),
    ("DeleteSnapshot", grpc.StatusCode.FAILED_PRECONDITION, "SNAPSHOT_IN_USE", megaflow.SnapshotInUse,
     megaflow.FailedPrecondition),
    ("DeleteSnapshot", grpc.StatusCode.NOT_FOUND, "SNAPSHOT_NOT_FOUND", megaflow.SnapshotNotFound, megaflow.NotFound),
    ("SetSandboxTimeout", grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_EXPIRED", megaflow.SandboxExpired,
     megaflow.SandboxEnded),
    ("SetSandboxTimeout", grpc.StatusCode.INVALID_ARGUMENT, "", megaflow.InvalidArgument, megaflow.InvalidArgument),
])
def test_snapshot_reasons_map_to_exception_classes_and_are_not_retried(heads, api, method, code, reason, cls, base):
    (h,) = heads(1)
    Snaps().install(h)
    msg = f"{method}: {reason or 'at most 3600 s more'}"
    h.fail_next(method, with_reason(code, msg, reason) if reason else fail(code, msg))
    calls = {"SnapshotSandbox": lambda c: api.Sandbox(c, "sbx-abc").snapshot("x"),
             "CreateSandbox": lambda c: c.sandbox(from_snapshot=SNAP),
             "DeleteSnapshot": lambda c: c.delete_snapshot(SNAP),
             "SetSandboxTimeout": lambda c: api.Sandbox(c, "sbx-abc").set_timeout(3600)}
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(base) as ei:
            calls[method](c)
    assert type(ei.value) is cls and ei.value.reason == reason and ei.value.code == code
    assert msg in str(ei.value)
    assert h.count(method) == 1
    if cls is megaflow.SnapshotQuotaExceeded:
        assert ei.value.retry_after is None


def test_retried_calls_are_retried(heads, dead_addr, api):
    (h,) = heads(1)
    snaps = Snaps().install(h)
    snaps.snapshots = [sbx.Snapshot(id=SNAP, tenant="team-a")]
    for m in ("ListSnapshots", "DeleteSnapshot", "SetSandboxTimeout"):
        h.fail_next(m, fail(grpc.StatusCode.UNAVAILABLE, "head going away"))
    with api.Client([dead_addr, h.addr], tenant="team-a", **FAST) as c:
        assert [s.id for s in c.list_snapshots()] == [SNAP]
        c.delete_snapshot(SNAP)
        info = api.Sandbox(c, "sbx-abc").set_timeout(60)
        assert info.lifetime_seconds == 160
    assert h.count("ListSnapshots") == h.count("DeleteSnapshot") == h.count("SetSandboxTimeout") == 2


def test_list_snapshots_tenant(heads, api):
    (h,) = heads(1)
    Snaps().install(h)
    with api.Client([h.addr], tenant="team-a", **FAST) as c:
        c.list_snapshots()
        c.list_snapshots(tenant="")
        c.list_snapshots(tenant="team-b")
    with api.Client([h.addr], **FAST) as c:
        c.list_snapshots()
    assert [r.tenant for r in h.calls["ListSnapshots"]] == ["team-a", "", "team-b", ""]


def test_set_timeout_rounds_up_and_updates_the_handle(heads, api):
    (h,) = heads(1)
    Snaps().install(h)
    with api.Client([h.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        info = sb.set_timeout(datetime.timedelta(hours=2))
        assert info.lifetime_seconds == 7300 and sb.info.lifetime_seconds == 7300
        assert sb.info.index == 12
        sb.set_timeout(59.2)
        sb.set_timeout(0.001)
        sb.set_timeout(7 * 24 * 3600)
    reqs = h.calls["SetSandboxTimeout"]
    assert [r.timeout_seconds for r in reqs] == [7200, 60, 1, 7 * 24 * 3600]
    assert reqs[0].id == "sbx-abc" and reqs[1].min_index == 12


def test_bad_input_fails_before_any_rpc(heads, api):
    (h,) = heads(1)
    Snaps().install(h)
    with api.Client([h.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        for name in ("x" * 129, "tab\there", "é", None, 5):
            with pytest.raises(megaflow.InvalidArgument):
                sb.snapshot(name)
        for seconds in (0, -1, 7 * 24 * 3600 + 0.5, "1h", True, float("nan"), datetime.timedelta(0)):
            with pytest.raises(megaflow.InvalidArgument):
                sb.set_timeout(seconds)
        for snap in ("snap-", "snap-UPPER", "sbx-abc", "", "snap-" + "a" * 65, 5, None):
            with pytest.raises(megaflow.InvalidArgument, match="not a snapshot id"):
                c.delete_snapshot(snap)
            if snap is not None:
                with pytest.raises(megaflow.InvalidArgument, match="not a snapshot id"):
                    c.sandbox(from_snapshot=snap)
        with pytest.raises(megaflow.InvalidArgument, match="give one"):
            c.sandbox("busybox", from_snapshot=SNAP)
        with pytest.raises(megaflow.InvalidArgument, match="or give from_snapshot"):
            c.sandbox()
        for tenant in ("bad tenant", 5):
            with pytest.raises(megaflow.InvalidArgument):
                c.list_snapshots(tenant=tenant)
    assert not h.calls
