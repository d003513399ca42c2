"""Sandboxes against fake heads: create (retried, idempotent by id), exec
streaming stdout and stderr apart, exec and file calls never resent once
sent, reasons mapped to exception classes, the context manager, local
checks before any RPC, and a deadline on every call."""

import datetime
import os
import subprocess
import sys
import threading

import grpc
import pytest

import megaflow
from fakehead import abort, fail, with_reason
from megaflow._proto import sandbox_pb2 as sbx
from megaflow._proto import service_pb2 as svc

FAST = dict(backoff=(0.01, 0.05), timeout=5)
READY = sbx.SANDBOX_STATE_READY


class Box:
    """SandboxService handlers over one fake sandbox; records the deadline
    (time_remaining) each call arrived with."""

    def __init__(self, state=READY, index=11):
        self.state = state
        self.index = index
        self.remaining = {}
        self.exec_script = [("stdout", b"hello\n"), ("stderr", b"warn\n"), ("stdout", b"world\n"), ("exit", 0)]

    def install(self, *hs):
        for h in hs:
            h.handlers.update({"CreateSandbox": self.create, "GetSandbox": self.get, "CloseSandbox": self.close,
                               "ListSandboxes": self.list, "Exec": self.exec, "WriteFile": self.write,
                               "ReadFile": self.read})
        return self

    def _row(self, sid):
        return sbx.Sandbox(id=sid, state=self.state, worker_id="w1", image="busybox", index=self.index)

    def _seen(self, method, context):
        self.remaining[method] = context.time_remaining()

    def create(self, req, context):
        self._seen("CreateSandbox", context)
        return sbx.CreateSandboxResponse(sandbox=self._row(req.spec.id))

    def get(self, req, context):
        self._seen("GetSandbox", context)
        return sbx.GetSandboxResponse(sandbox=self._row(req.id))

    def close(self, req, context):
        self._seen("CloseSandbox", context)
        self.state = sbx.SANDBOX_STATE_CLOSED
        self.index += 1
        return sbx.CloseSandboxResponse(sandbox=self._row(req.id))

    def list(self, req, context):
        self._seen("ListSandboxes", context)
        return sbx.ListSandboxesResponse(sandboxes=[self._row("sbx-a"), self._row("sbx-b")])

    def exec(self, req, context):
        self._seen("Exec", context)
        for kind, v in self.exec_script:
            if kind == "stdout":
                yield sbx.SandboxExecResponse(stdout=v)
            elif kind == "stderr":
                yield sbx.SandboxExecResponse(stderr=v)
            elif kind == "fail":
                abort(context, v)
            else:
                yield sbx.SandboxExecResponse(exit=sbx.SandboxExecExit(exit_code=v))

    def write(self, req, context):
        self._seen("WriteFile", context)
        return sbx.SandboxWriteFileResponse()

    def read(self, req, context):
        self._seen("ReadFile", context)
        yield sbx.SandboxReadFileResponse(data=b"abc", size=6, mode=0o644)
        yield sbx.SandboxReadFileResponse(data=b"def")


def test_create_sends_the_spec_and_exec_streams_stdout_and_stderr_apart(heads, api):
    (h,) = heads(1)
    box = Box().install(h)
    with api.Client([h.addr], tenant="team-a", **FAST) as c:
        sb = c.sandbox(image="busybox", cpu_millis=500, memory="4Gi", env={"A": "1"}, working_dir="/work",
                       network="bridge", labels={"run": "r1"}, lifetime=datetime.timedelta(minutes=30),
                       idle_timeout=59.5, wait_ready=30)
        req = h.calls["CreateSandbox"][0]
        s = req.spec
        assert s.id == sb.id and sb.id.startswith("sbx-") and len(sb.id) == 20
        assert (s.tenant, s.image, s.cpu_millis, s.memory_bytes) == ("team-a", "busybox", 500, 4 << 30)
        assert (dict(s.env), s.working_dir, s.network, dict(s.labels)) == ({"A": "1"}, "/work", "bridge", {"run": "r1"})
        assert (s.lifetime_seconds, s.idle_timeout_seconds, req.wait_ready_millis) == (1800, 60, 30000)
        assert (sb.state, sb.worker, sb.info.index) == ("READY", "w1", 11)

        res = sb.exec(["python", "-c", "print(1)"], timeout=5, env={"B": "2"}, cwd="/tmp", stdin="in")
        assert (res.exit_code, res.stdout, res.stderr, res.ok) == (0, b"hello\nworld\n", b"warn\n", True)
        assert (res.text, res.stderr_text, res.timed_out, res.truncated) == ("hello\nworld\n", "warn\n", False, False)
        e = h.calls["Exec"][0]
        assert (list(e.argv), dict(e.env), e.cwd, e.stdin, e.timeout_millis, e.min_index, e.sandbox_id) == \
            (["python", "-c", "print(1)"], {"B": "2"}, "/tmp", b"in", 5000, 11, sb.id)

        box.exec_script = [("stderr", b"e1"), ("stdout", b"o1"), ("stderr", b"e2"), ("exit", 3)]
        items = list(sb.exec_stream("exit 3"))
        assert items[:3] == [("stderr", b"e1"), ("stdout", b"o1"), ("stderr", b"e2")]
        assert isinstance(items[3], megaflow.ExecResult) and items[3].exit_code == 3 and not items[3].ok
        assert list(h.calls["Exec"][1].argv) == ["sh", "-c", "exit 3"]
        assert h.calls["Exec"][1].timeout_millis == 0  # the server's default
    assert h.count("Exec") == 2


def test_every_call_carries_a_deadline(heads, api):
    (h,) = heads(1)
    box = Box().install(h)
    with api.Client([h.addr], **FAST) as c:
        sb = c.sandbox(image="busybox", wait_ready=10)
        sb.exec("true", timeout=2)
        sb.write_file("/a", b"x")
        sb.read_file("/a")
        sb.refresh()
        c.list_sandboxes()
        sb.close()
    r = box.remaining
    assert set(r) == {"CreateSandbox", "Exec", "WriteFile", "ReadFile", "GetSandbox", "ListSandboxes", "CloseSandbox"}
    assert all(v is not None for v in r.values())
    assert 9.5 < r["CreateSandbox"] <= 15.5  # the client's 5 s plus the 10 s wait
    assert 6 < r["Exec"] <= 7.5  # the command's 2 s plus the client's 5 s
    assert r["WriteFile"] <= 5.5 and r["GetSandbox"] <= 5.5


def test_create_is_retried_on_unavailable_with_the_same_id(heads, dead_addr, api):
    (h,) = heads(1)
    Box().install(h)
    h.fail_next("CreateSandbox", fail(grpc.StatusCode.UNAVAILABLE, "head going away"),
                fail(grpc.StatusCode.UNAVAILABLE, "still going"))
    with api.Client([dead_addr, h.addr], **FAST) as c:
        sb = c.sandbox(image="busybox")
    ids = {r.spec.id for r in h.calls["CreateSandbox"]}
    assert h.count("CreateSandbox") == 3 and ids == {sb.id}


def test_exec_failing_mid_stream_is_not_retried(heads, api):
    h1, h2 = heads(2)
    box = Box().install(h1, h2)
    box.exec_script = [("stdout", b"partial"), ("fail", with_reason(grpc.StatusCode.UNAVAILABLE,
                                                                   "worker w1 did not answer", "WORKER_UNREACHABLE"))]
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        with pytest.raises(megaflow.Unavailable) as ei:
            sb.exec(["echo", "hi"])
        assert isinstance(ei.value, megaflow.WorkerUnreachable) and ei.value.reason == "WORKER_UNREACHABLE"
        # A plain UNAVAILABLE after the request went out: not resent either.
        box.exec_script = [("fail", fail(grpc.StatusCode.UNAVAILABLE, "connection reset"))]
        with pytest.raises(megaflow.Unavailable, match="may or may not have run"):
            sb.exec(["echo", "hi"])
        for h in (h1, h2):
            h.fail_next("WriteFile", fail(grpc.StatusCode.UNAVAILABLE, "connection reset"))
        with pytest.raises(megaflow.Unavailable, match="may or may not have run"):
            sb.write_file("/x", b"1")
    assert h1.count("Exec") + h2.count("Exec") == 2  # one per exec: nothing resent
    assert h1.count("WriteFile") + h2.count("WriteFile") == 1


def test_exec_stream_that_ends_without_an_exit_is_unavailable(heads, api):
    (h,) = heads(1)
    box = Box().install(h)
    box.exec_script = [("stdout", b"x")]
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(megaflow.Unavailable, match="ended without an exit"):
            api.Sandbox(c, "sbx-abc").exec("true")
    assert h.count("Exec") == 1


def test_exec_passes_over_a_head_that_does_not_connect(heads, dead_addr, api):
    (h,) = heads(1)
    Box().install(h)
    with api.Client([dead_addr, h.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        assert sb.exec("echo hi").stdout == b"hello\nworld\n"
        assert c.heads[0] == h.addr
    assert h.count("Exec") == 1


def test_exec_with_no_head_connecting_fails_at_its_deadline(dead_addr, api):
    with api.Client([dead_addr], backoff=(0.01, 0.05), timeout=0.5) as c:
        with pytest.raises(megaflow.DeadlineExceeded, match="nothing was sent"):
            api.Sandbox(c, "sbx-abc").write_file("/a", b"x")


@pytest.mark.parametrize("code,reason,cls,base", [
    (grpc.StatusCode.NOT_FOUND, "SANDBOX_NOT_FOUND", megaflow.SandboxNotFound, megaflow.NotFound),
    (grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_NOT_READY", megaflow.SandboxNotReady, megaflow.FailedPrecondition),
    (grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_CLOSED", megaflow.SandboxClosed, megaflow.SandboxEnded),
    (grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_EXPIRED", megaflow.SandboxExpired, megaflow.SandboxEnded),
    (grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_LOST", megaflow.SandboxLost, megaflow.FailedPrecondition),
    (grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_FAILED", megaflow.SandboxFailed, megaflow.FailedPrecondition),
    (grpc.StatusCode.UNAVAILABLE, "WORKER_UNREACHABLE", megaflow.WorkerUnreachable, megaflow.Unavailable),
    (grpc.StatusCode.UNAVAILABLE, "RUNTIME_UNAVAILABLE", megaflow.RuntimeUnavailable, megaflow.Unavailable),
    (grpc.StatusCode.NOT_FOUND, "FILE_NOT_FOUND", megaflow.FileNotFound, megaflow.NotFound),
    (grpc.StatusCode.FAILED_PRECONDITION, "FILE_TOO_LARGE", megaflow.FileTooLarge, megaflow.FailedPrecondition),
    # A reason sent with another code keeps the code's class; unknown reasons too.
    (grpc.StatusCode.INVALID_ARGUMENT, "SANDBOX_CLOSED", megaflow.InvalidArgument, megaflow.InvalidArgument),
    (grpc.StatusCode.FAILED_PRECONDITION, "SOMETHING_NEW", megaflow.FailedPrecondition, megaflow.MegaflowError),
])
def test_reasons_map_to_exception_classes(heads, code, reason, cls, base, api):
    (h,) = heads(1)
    box = Box().install(h)
    msg = f"sandbox sbx-abc: {reason.lower()}"
    box.exec_script = [("fail", with_reason(code, msg, reason))]
    h.fail_next("ReadFile", with_reason(code, msg, reason))
    with api.Client([h.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        for call in (lambda: sb.exec("true"), lambda: sb.read_file("/etc/x")):
            with pytest.raises(base) as ei:
                call()
            assert type(ei.value) is cls and ei.value.reason == reason and ei.value.code == code
            assert msg in str(ei.value)


def test_reason_errors_of_retried_calls_are_raised_at_once(heads, api):
    (h,) = heads(1)
    Box().install(h)
    h.fail_next("GetSandbox", with_reason(grpc.StatusCode.NOT_FOUND, "no sandbox sbx-gone", "SANDBOX_NOT_FOUND"))
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(megaflow.SandboxNotFound, match="sbx-gone"):
            c.get_sandbox("sbx-gone")
    assert h.count("GetSandbox") == 1
    # An ErrorInfo of another domain is not a megaflow reason.
    h.fail_next("GetSandbox", with_reason(grpc.StatusCode.NOT_FOUND, "x", "SANDBOX_NOT_FOUND", domain="other.io"))
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(megaflow.NotFound) as ei:
            c.get_sandbox("sbx-gone")
        assert type(ei.value) is megaflow.NotFound and ei.value.reason == ""


def test_context_manager_closes_once(heads, api):
    (h,) = heads(1)
    box = Box().install(h)
    with api.Client([h.addr], **FAST) as c:
        with c.sandbox(image="busybox") as sb:
            sb.exec("true")
        assert h.count("CloseSandbox") == 1 and sb.state == "CLOSED"
        assert h.calls["CloseSandbox"][0].id == sb.id and h.calls["CloseSandbox"][0].min_index == 11
        sb.close()  # idempotent: no second call
        assert h.count("CloseSandbox") == 1
        # The body's exception wins over a failing close, and close ran.
        box.state = READY
        h.fail_next("CloseSandbox", fail(grpc.StatusCode.INTERNAL, "boom"))
        with pytest.raises(KeyError):
            with c.sandbox(image="busybox"):
                raise KeyError("body")
        assert h.count("CloseSandbox") == 2


def test_create_that_ended_raises_its_class_with_the_handle(heads, api):
    (h,) = heads(1)
    box = Box(state=sbx.SANDBOX_STATE_FAILED).install(h)
    h.handlers["CreateSandbox"] = lambda req, ctx: sbx.CreateSandboxResponse(sandbox=sbx.Sandbox(
        id=req.spec.id, state=sbx.SANDBOX_STATE_FAILED, reason="pull access denied for nope", reason_code=0))
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(megaflow.SandboxFailed, match="pull access denied") as ei:
            c.sandbox(image="nope")
        assert ei.value.sandbox.id == h.calls["CreateSandbox"][0].spec.id and ei.value.reason == "SANDBOX_FAILED"
        # Without wait_ready the state is not judged: PENDING or ended alike.
        box.state = sbx.SANDBOX_STATE_PENDING
        h.handlers["CreateSandbox"] = box.create
        assert c.sandbox(image="busybox", wait_ready=0).state == "PENDING"


def test_wait_ready_polls_until_ready(heads, api):
    (h,) = heads(1)
    box = Box(state=sbx.SANDBOX_STATE_PENDING).install(h)
    states = iter([sbx.SANDBOX_STATE_STARTING, READY])

    def get(req, ctx):
        box.state = next(states, READY)
        return box.get(req, ctx)

    h.handlers["GetSandbox"] = get
    with api.Client([h.addr], **FAST) as c:
        sb = c.sandbox(image="busybox", wait_ready=None)
        assert sb.state == "PENDING"
        assert sb.wait_ready(5).state == READY and sb.state == "READY"
        assert h.count("GetSandbox") == 2
        box.state = sbx.SANDBOX_STATE_EXPIRED
        h.handlers["GetSandbox"] = box.get
        with pytest.raises(megaflow.SandboxExpired):
            sb.wait_ready(5)


def test_files_and_listing(heads, api):
    (h,) = heads(1)
    Box().install(h)
    with api.Client([h.addr], tenant="team-a", **FAST) as c:
        sb = c.get_sandbox("sbx-abc")
        sb.write_file("/work/main.py", "print('é')", mode=0o755)
        w = h.calls["WriteFile"][0]
        assert (w.sandbox_id, w.path, w.data, w.mode, w.min_index) == ("sbx-abc", "/work/main.py",
                                                                      "print('é')".encode(), 0o755, 11)
        assert sb.read_file("/work/out", max_bytes=100) == b"abcdef"
        assert h.calls["ReadFile"][0].max_bytes == 100
        assert [s.id for s in c.list_sandboxes(all=True)] == ["sbx-a", "sbx-b"]
        lr = h.calls["ListSandboxes"][0]
        assert (lr.tenant, lr.all) == ("team-a", True)
        c.list_sandboxes(tenant="")
        assert h.calls["ListSandboxes"][1].tenant == ""


def test_bad_input_fails_before_any_rpc(heads, api):
    (h,) = heads(1)
    Box().install(h)
    with api.Client([h.addr], **FAST) as c:
        bad_creates = [dict(image=""), dict(image="busybox", memory="lots"), dict(image="busybox", cpu_millis=-1),
                       dict(image="busybox", cpu_millis=1, cpu="1"), dict(image="busybox", lifetime=-1),
                       dict(image="busybox", idle_timeout=8 * 24 * 3600), dict(image="busybox", wait_ready=601),
                       dict(image="busybox", working_dir="rel"), dict(image="busybox", env={"A=B": "1"}),
                       dict(image="busybox", id="sbx-UPPER"), dict(image="busybox", id="box-1"),
                       dict(image="busybox", tenant="bad tenant"), dict(image="busybox", labels={"": "x"})]
        for kw in bad_creates:
            with pytest.raises(megaflow.InvalidArgument):
                c.sandbox(**kw)
        with pytest.raises(megaflow.InvalidArgument, match="not a sandbox id"):
            c.get_sandbox("g-123")
        with pytest.raises(megaflow.InvalidArgument, match="not a sandbox id"):
            api.Sandbox(c, "sbx-")
        sb = api.Sandbox(c, "sbx-abc")
        for cmd in ([], "", "  ", [""], ["a", 1], b"echo", None, ["a\x00b"], ["x"] * 1025):
            with pytest.raises(megaflow.InvalidArgument):
                sb.exec(cmd)
        for kw in (dict(timeout=0), dict(timeout=-1), dict(timeout=25 * 3600), dict(timeout="1m"),
                   dict(env={"": "x"}), dict(env={"A": 1}), dict(env={f"K{i}": "" for i in range(257)}),
                   dict(env={"A": "x" * (33 << 10)}), dict(cwd="tmp"), dict(stdin=b"x" * ((16 << 20) + 1)),
                   dict(stdin=123)):
            with pytest.raises(megaflow.InvalidArgument):
                sb.exec("true", **kw)
        with pytest.raises(megaflow.InvalidArgument):
            sb.exec_stream("true", timeout=-1)  # refused at the call, not at the first next()
        for path in ("rel/x", "/", "", "/a\x00b", "/" + "x" * 4096, None):
            with pytest.raises(megaflow.InvalidArgument):
                sb.write_file(path, b"")
            with pytest.raises(megaflow.InvalidArgument):
                sb.read_file(path)
        for mode in (-1, 0o1000, "644", True):
            with pytest.raises(megaflow.InvalidArgument):
                sb.write_file("/a", b"", mode=mode)
        with pytest.raises(megaflow.InvalidArgument):
            sb.write_file("/a", 3.5)
        with pytest.raises(megaflow.InvalidArgument):
            sb.read_file("/a", max_bytes=(64 << 20) + 1)
    assert not h.calls


def test_exec_stream_closed_early_cancels_the_exec(heads, api):
    (h,) = heads(1)
    box = Box().install(h)
    cancelled = threading.Event()

    def slow(req, context):
        context.add_callback(cancelled.set)
        yield sbx.SandboxExecResponse(stdout=b"first")
        cancelled.wait(5)

    h.handlers["Exec"] = slow
    with api.Client([h.addr], **FAST) as c:
        it = api.Sandbox(c, "sbx-abc").exec_stream("sleep 100")
        assert next(it) == ("stdout", b"first")
        it.close()
    assert cancelled.wait(5)
    assert box  # keeps the fixture's box alive for the handlers


def test_calls_on_a_closed_client_are_refused(heads, api):
    (h,) = heads(1)
    Box().install(h)
    c = api.Client([h.addr], **FAST)
    sb = c.get_sandbox("sbx-abc")
    c.close()
    for call in (lambda: sb.exec("true"), lambda: sb.write_file("/a", b""), lambda: sb.read_file("/a"),
                 sb.refresh, sb.close):
        with pytest.raises(megaflow.MegaflowError, match="client is closed"):
            call()
    assert h.count("Exec") == h.count("WriteFile") == h.count("CloseSandbox") == 0


def test_get_sandbox_syncs_with_the_leader_first(heads, api):
    """A handle on a sandbox another process made: the client first reads
    the leader's applied index (GetLimits, require_leader), then asks for
    the sandbox at that index, so a head behind waits instead of
    answering SandboxNotFound."""
    (h,) = heads(1)
    Box().install(h)
    h.handlers["GetLimits"] = lambda req, ctx: svc.GetLimitsResponse(head_id="h1", meta=svc.ReadMeta(index=42, head_id="h1"))
    with api.Client([h.addr], **FAST) as c:
        c.get_sandbox("sbx-abc")
    assert h.count("GetLimits") == 1 and h.calls["GetLimits"][0].read.require_leader
    assert h.calls["GetSandbox"][0].min_index == 42


def test_a_script_that_never_closes_its_client_exits(heads):
    """A script that ran an exec (which waits for the connection first) and
    ends without closing its Client exits: grpc's channel finalizer hung at
    interpreter exit (a new user's script, every time), so the SDK closes
    every client still open at exit."""
    (h,) = heads(1)
    Box().install(h)
    src = os.path.join(os.path.dirname(__file__), "..", "src")
    script = (f"import sys; sys.path.insert(0, {src!r}); import megaflow\n"
              f"c = megaflow.Client([{h.addr!r}], timeout=5)\n"
              "sb = c.sandbox(image='busybox', wait_ready=5)\n"
              "print(sb.exec('true').text, end='', flush=True)\n")
    try:
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the script did not exit within 30 s of its last line: {e.stdout!r}")
    assert (p.returncode, p.stdout) == (0, "hello\nworld\n"), p.stderr


def test_sandbox_state_name_takes_a_value_or_a_name():
    assert megaflow.sandbox_state_name(READY) == "READY"
    assert megaflow.sandbox_state_name("READY") == "READY"  # Sandbox.state's
    assert megaflow.sandbox_state_name("SANDBOX_STATE_PAUSED") == "PAUSED"


class _Unavailable(grpc.RpcError):
    def __init__(self, details):
        self._details = details

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return self._details

    def trailing_metadata(self):
        return ()


def test_a_call_gRPC_had_no_connection_for_did_not_run(heads):
    """A refused connection fails a call before it is sent: the error says
    it did not run, not that it may have (a new user's exec after the
    cluster stopped)."""
    (h,) = heads(1)
    Box().install(h)
    with megaflow.Client([h.addr], **FAST) as c:
        sb = c.sandbox(image="busybox", wait_ready=5)
        refused = sb._sent_error(h.addr, "exec", _Unavailable(
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7070: Connection refused"))
        assert "it did not run (no connection to the head: nothing was sent)" in str(refused)
        broken = sb._sent_error(h.addr, "exec", _Unavailable("Socket closed"))
        assert "it may or may not have run" in str(broken)
