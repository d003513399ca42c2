"""The client against fake heads: failover, leader following, error mapping,
watch resumption, wait, results, logs and artifacts. Every call carries a
timeout; nothing sleeps to synchronize."""

import hashlib
import io
import os
import time

import grpc
import pytest

import megaflow
from fakehead import FakeHead, fail, graph_row, not_leader, rate_limited, submitted
from megaflow._proto import service_pb2 as svc, types_pb2 as pb

FAST = dict(backoff=(0.01, 0.05), timeout=5)


def small_graph(gid="step-1"):
    g = megaflow.Graph(gid)
    a = g.task("a", ["true"], image="busybox")
    g.task("b", ["true"], image="busybox", after=[a])
    return g


def test_unavailable_head_rotates_to_the_next(heads, api):
    h1, h2 = heads(2)
    h1.fail_next("SubmitGraph", fail(grpc.StatusCode.UNAVAILABLE, "no leader"))
    h1.handlers["SubmitGraph"] = submitted
    h2.handlers["SubmitGraph"] = submitted
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        assert c.submit(small_graph()) == "step-1"
        assert c.heads[0] == h2.addr
    assert (h1.count("SubmitGraph"), h2.count("SubmitGraph")) == (1, 1)


def test_dead_head_is_skipped(heads, dead_addr, api):
    (h,) = heads(1)
    h.handlers["SubmitGraph"] = submitted
    with api.Client([dead_addr, h.addr], **FAST) as c:
        assert c.submit(small_graph()) == "step-1"
        assert c.heads[0] == h.addr


def test_not_leader_is_followed_without_waiting(heads, api):
    follower, leader = heads(2)
    follower.fail_next("SubmitGraph", not_leader(leader.addr))
    leader.handlers["SubmitGraph"] = submitted
    with api.Client([follower.addr], backoff=(5, 5), timeout=3) as c:
        t0 = time.monotonic()
        c.submit(small_graph())
        assert time.monotonic() - t0 < 2.5  # no backoff wait (it would be >= 2.5 s)
        assert c.heads == [leader.addr, follower.addr]
    assert leader.count("SubmitGraph") == 1


def test_retries_keep_the_generated_graph_id(heads, api):
    (h,) = heads(1)
    h.fail_next("SubmitGraph", fail(grpc.StatusCode.UNAVAILABLE, "x"), fail(grpc.StatusCode.UNAVAILABLE, "y"))
    h.handlers["SubmitGraph"] = submitted
    g = megaflow.Graph()
    g.task("a", ["true"], image="busybox")
    with api.Client([h.addr], tenant="team-a", **FAST) as c:
        gid = c.submit(g)
    ids = {r.graph.id for r in h.calls["SubmitGraph"]}
    assert ids == {gid} and gid.startswith("g-") and len(h.calls["SubmitGraph"]) == 3
    assert h.calls["SubmitGraph"][0].graph.tenant == "team-a"
    assert g.id == ""  # the builder is not modified


def test_rate_limit_waits_retry_after(heads, api):
    (h,) = heads(1)
    h.fail_next("GetGraph", rate_limited(0.02))
    h.handlers["GetGraph"] = lambda r, c: graph_row(r.graph_id, pb.GRAPH_STATE_RUNNING, running=1)
    with api.Client([h.addr], **FAST) as c:
        assert c.get_graph("g1").state == pb.GRAPH_STATE_RUNNING
    assert h.count("GetGraph") == 2


@pytest.mark.parametrize("code,cls", [
    (grpc.StatusCode.INVALID_ARGUMENT, megaflow.InvalidArgument),
    (grpc.StatusCode.NOT_FOUND, megaflow.NotFound),
    (grpc.StatusCode.ALREADY_EXISTS, megaflow.AlreadyExists),
    (grpc.StatusCode.FAILED_PRECONDITION, megaflow.FailedPrecondition),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, megaflow.ResourceExhausted),
    (grpc.StatusCode.OUT_OF_RANGE, megaflow.OutOfRange),
    (grpc.StatusCode.INTERNAL, megaflow.Internal),
    (grpc.StatusCode.PERMISSION_DENIED, megaflow.PermissionDenied),
    (grpc.StatusCode.UNAUTHENTICATED, megaflow.Unauthenticated),
    (grpc.StatusCode.UNKNOWN, megaflow.MegaflowError),
])
def test_errors_map_to_classes_without_retry(heads, code, cls, api):
    (h,) = heads(1)
    h.fail_next("SubmitGraph", fail(code, 'graph "step-1": the message from the head'))
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(cls) as ei:
            c.submit(small_graph())
    assert type(ei.value) is cls
    assert ei.value.message == 'graph "step-1": the message from the head'
    assert ei.value.code == code
    assert h.count("SubmitGraph") == 1


def test_error_hierarchy():
    assert issubclass(megaflow.InvalidGraph, megaflow.InvalidArgument)
    assert issubclass(megaflow.InvalidArgument, ValueError)
    assert issubclass(megaflow.NotLeader, megaflow.Unavailable)
    assert issubclass(megaflow.DeadlineExceeded, TimeoutError)
    assert issubclass(megaflow.NotFound, megaflow.MegaflowError)


def test_deadline_bounds_the_retries(heads, api):
    (h,) = heads(1)
    h.fail_next("GetGraph", *[fail(grpc.StatusCode.UNAVAILABLE, "no leader yet")] * 1000)
    with api.Client([h.addr], backoff=(0.01, 0.05)) as c:
        t0 = time.monotonic()
        with pytest.raises(megaflow.DeadlineExceeded) as ei:
            c.get_graph("g1", timeout=0.5)
        assert time.monotonic() - t0 < 2
    assert "no leader yet" in str(ei.value)
    assert h.count("GetGraph") > 1


def test_bad_input_fails_before_any_rpc(heads, monkeypatch, api):
    (h,) = heads(1)
    with api.Client([h.addr], **FAST) as c:
        bad = megaflow.Graph("step-1")
        bad.task("a", ["true"], image="busybox", after=["nope"])
        with pytest.raises(megaflow.InvalidGraph, match='task "a": depends_on: unknown task "nope"'):
            c.submit(bad)
        with pytest.raises(megaflow.InvalidArgument, match="task_id"):
            c.get_task("no-slash")
        with pytest.raises(megaflow.InvalidArgument, match="graph_id"):
            c.get_graph("")
        with pytest.raises(megaflow.InvalidGraph):
            c.submit({"id": "x"})
    assert not h.calls
    monkeypatch.delenv("MEGAFLOW_HEADS", raising=False)
    with pytest.raises(megaflow.InvalidArgument, match="MEGAFLOW_HEADS"):
        api.Client()
    with pytest.raises(megaflow.InvalidArgument, match="no port"):
        api.Client(["localhost"])
    with pytest.raises(megaflow.InvalidArgument, match="tenant"):
        api.Client([h.addr], tenant="bad tenant")
    monkeypatch.setenv("MEGAFLOW_HEADS", f" {h.addr} ,127.0.0.1:1")
    with api.Client() as c:
        assert c.heads == [h.addr, "127.0.0.1:1"]


def test_closed_client_refuses_calls(heads, api):
    (h,) = heads(1)
    c = api.Client([h.addr], **FAST)
    c.close()
    with pytest.raises(megaflow.MegaflowError, match="closed"):
        c.get_graph("g1")


def _events(gid, *specs):
    return [pb.Event(index=i, seq=s, graph_id=gid, task_id=t, task_state=ts, graph_state=gs)
            for i, s, t, ts, gs in specs]


def test_watch_resumes_after_the_last_event(heads, api):
    h1, h2 = heads(2)
    evs = _events("g1", (5, 0, "g1/a", pb.TASK_STATE_RUNNING, 0), (5, 1, "g1/b", pb.TASK_STATE_QUEUED, 0),
                  (6, 0, "g1/a", pb.TASK_STATE_SUCCEEDED, 0), (9, 0, "", 0, pb.GRAPH_STATE_SUCCEEDED))

    def broken(req, ctx):  # two events, then the head goes away
        yield svc.WatchResponse(events=evs[:2], applied_index=5)
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "head shutting down")

    def rest(req, ctx):
        after = (req.after_index, req.after_seq)
        yield svc.WatchResponse(events=[e for e in evs if (e.index, e.seq) > after], applied_index=9)

    h1.handlers["Watch"] = broken
    h2.handlers["Watch"] = rest
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        got = []
        for ev in c.watch("g1", timeout=5):
            got.append(ev)
            if ev.graph_state == pb.GRAPH_STATE_SUCCEEDED:
                break
    assert [(e.index, e.seq) for e in got] == [(5, 0), (5, 1), (6, 0), (9, 0)]
    r = h2.calls["Watch"][0]
    assert (r.after_index, r.after_seq, r.graph_id) == (5, 1, "g1")


def test_watch_out_of_range_is_raised(heads, api):
    (h,) = heads(1)
    h.fail_next("Watch", fail(grpc.StatusCode.OUT_OF_RANGE, "cursor 3 is older than the retained history (from 100)"))
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(megaflow.OutOfRange, match="retained"):
            next(c.watch("g1", after=megaflow.Cursor(3, 0), timeout=5))


def test_wait_returns_the_terminal_graph_and_reports_progress(heads, api):
    (h,) = heads(1)
    reads = []

    def get(req, ctx):
        reads.append(req)
        if len(reads) == 1:
            return graph_row("g1", pb.GRAPH_STATE_RUNNING, running=1, succeeded=1)
        return graph_row("g1", pb.GRAPH_STATE_SUCCEEDED, succeeded=2)

    def watch(req, ctx):
        assert (req.after_index, req.after_seq) == (10, 2**32 - 1)
        yield svc.WatchResponse(events=_events("g1", (11, 0, "", 0, pb.GRAPH_STATE_SUCCEEDED)), applied_index=11)

    h.handlers["GetGraph"] = get
    h.handlers["Watch"] = watch
    out = io.StringIO()
    with api.Client([h.addr], **FAST) as c:
        g = c.wait("g1", timeout=5, progress=True, out=out)
    assert g.state == pb.GRAPH_STATE_SUCCEEDED
    assert out.getvalue().endswith("g1: succeeded 2/2 done (2 ok, 0 failed, 0 running, 0 waiting)\n")
    assert reads[-1].read.min_index >= 10  # read your reads


def test_wait_ends_its_watch_stream(heads, api):
    # The head's stream stays open after the terminal event (a real head
    # keeps it until the window ends); wait must cancel it as it returns,
    # or every wait leaves one open stream on the head for its window.
    (h,) = heads(1)
    reads = []

    def get(req, ctx):
        reads.append(req)
        if len(reads) == 1:
            return graph_row("g1", pb.GRAPH_STATE_RUNNING, running=1)
        return graph_row("g1", pb.GRAPH_STATE_SUCCEEDED, succeeded=2)

    ended = __import__("threading").Event()

    def watch(req, ctx):
        ctx.add_callback(ended.set)
        yield svc.WatchResponse(events=_events("g1", (11, 0, "", 0, pb.GRAPH_STATE_SUCCEEDED)), applied_index=11)
        ended.wait(30)

    h.handlers["GetGraph"] = get
    h.handlers["Watch"] = watch
    with api.Client([h.addr], **FAST) as c:
        assert c.wait("g1", timeout=60).state == pb.GRAPH_STATE_SUCCEEDED
        assert ended.wait(5), "the Watch stream was still open 5 s after wait returned"


def test_wait_times_out(heads, api):
    (h,) = heads(1)
    h.handlers["GetGraph"] = lambda r, c: graph_row("g1", pb.GRAPH_STATE_RUNNING, running=1)

    def watch(req, ctx):
        yield svc.WatchResponse(applied_index=12)  # a heartbeat, then silence
        done = __import__("threading").Event()
        ctx.add_callback(done.set)
        done.wait(10)

    h.handlers["Watch"] = watch
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(megaflow.DeadlineExceeded, match="not finished"):
            c.wait("g1", timeout=0.5)


def test_results_parse_json_and_report_failures(heads, api):
    (h,) = heads(1)
    tasks = [pb.Task(id="g1/gen", state=pb.TASK_STATE_SUCCEEDED, result=b'{"reward": 0.75, "n": 3}',
                     attempts=[pb.Attempt(number=1, exit_code=0)]),
             pb.Task(id="g1/score", state=pb.TASK_STATE_FAILED, reason="exit code 3",
                     reason_code=pb.REASON_CODE_EXIT_CODE, attempts=[pb.Attempt(number=1, exit_code=3)] * 2)]

    def list_tasks(req, ctx):  # two pages
        if not req.page_token:
            return svc.ListTasksResponse(tasks=tasks[:1], next_page_token="p2", meta=svc.ReadMeta(index=4))
        return svc.ListTasksResponse(tasks=tasks[1:], meta=svc.ReadMeta(index=4))

    h.handlers["ListTasks"] = list_tasks
    with api.Client([h.addr], **FAST) as c:
        res = c.results("g1")
    assert list(res) == ["gen", "score"]
    assert res["gen"].succeeded and res["gen"].result == {"reward": 0.75, "n": 3}
    s = res["score"]
    assert (s.state, s.reason, s.reason_code, s.exit_code, s.attempts, s.result) == \
        ("FAILED", "exit code 3", "EXIT_CODE", 3, 2, None)


def test_logs_resume_after_the_last_chunk(heads, api):
    h1, h2 = heads(2)

    def broken(req, ctx):
        yield svc.LogsResponse(data=b"hello ", attempt=1, chunk=1)
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "gone")

    def rest(req, ctx):
        assert (req.attempt, req.after_chunk) == (1, 1)
        yield svc.LogsResponse(data=b"world\n", attempt=1, chunk=2)

    h1.handlers["Logs"] = broken
    h2.handlers["Logs"] = rest
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        assert c.logs("g1/a") == "hello world\n"


def test_download_checks_sha256(heads, tmp_path, api):
    (h,) = heads(1)
    body = b"x" * 100_000
    files = {"out/traj.json": body, "metrics.txt": b"ok"}
    sums = {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}
    sums["metrics.txt"] = "0" * 64  # a corrupt store
    h.handlers["ArtifactList"] = lambda r, c: svc.ArtifactListResponse(attempt=2, files=[
        svc.ArtifactFile(path=p, size=len(b), sha256=sums[p]) for p, b in files.items()])

    def get(req, ctx):
        assert req.attempt == 2
        yield svc.ArtifactGetResponse(file=svc.ArtifactFile(path=req.path))
        b = files[req.path]
        for i in range(0, len(b), 32768):
            yield svc.ArtifactGetResponse(data=b[i:i + 32768])

    h.handlers["ArtifactGet"] = get
    with api.Client([h.addr], **FAST) as c:
        got = c.download("g1/a", tmp_path, paths=["out/traj.json"])
        assert got == [tmp_path / "out" / "traj.json"] and got[0].read_bytes() == body
        with pytest.raises(megaflow.ChecksumMismatch):
            c.download("g1/a", tmp_path / "all")
        assert not (tmp_path / "all" / "metrics.txt").exists()
        with pytest.raises(megaflow.NotFound, match="no artifact"):
            c.download("g1/a", tmp_path, paths=["missing"])


def test_not_leader_without_an_address_rotates(heads, api):
    h1, h2 = heads(2)
    h1.fail_next("GetGraph", not_leader(""))
    h2.handlers["GetGraph"] = lambda r, c: graph_row(r.graph_id, pb.GRAPH_STATE_SUCCEEDED, succeeded=1)
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        assert c.get_graph("g1").state == pb.GRAPH_STATE_SUCCEEDED
        assert c.heads[0] == h2.addr


def test_bad_arguments_of_reads_fail_before_any_rpc(heads, api):
    (h,) = heads(1)
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(megaflow.InvalidArgument, match="attempt"):
            c.logs("g1/a", attempt=-1)
        with pytest.raises(megaflow.InvalidArgument, match="attempt"):
            c.artifacts("g1/a", attempt="1")
        with pytest.raises(megaflow.InvalidArgument, match="timeout"):
            c.get_graph("g1", timeout=0)
        with pytest.raises(megaflow.InvalidArgument, match="cursor"):
            next(c.watch("g1", after=(1, -1)))
    assert not h.calls


TLS_DIR = os.path.join(os.path.dirname(__file__), "testdata", "tls")  # made by megaflow tls (CA key removed)


def _tls(name):
    with open(os.path.join(TLS_DIR, name), "rb") as f:
        return f.read()


def test_tls_files_give_mutual_tls():
    creds = grpc.ssl_server_credentials([(_tls("head-key.pem"), _tls("head.pem"))],
                                        root_certificates=_tls("ca.pem"), require_client_auth=True)
    h = FakeHead(server_credentials=creds)
    try:
        h.handlers["SubmitGraph"] = submitted
        files = {k: os.path.join(TLS_DIR, v) for k, v in
                 (("tls_ca", "ca.pem"), ("tls_cert", "client.pem"), ("tls_key", "client-key.pem"))}
        with megaflow.Client([h.addr], **FAST, **files) as c:
            assert c.submit(small_graph()) == "step-1"
        # Without the client certificate the head refuses the connection.
        with megaflow.Client([h.addr], backoff=(0.01, 0.05), timeout=1.0) as c:
            with pytest.raises(megaflow.MegaflowError):
                c.submit(small_graph())
        assert h.count("SubmitGraph") == 1
    finally:
        h.stop()


def test_tls_files_go_together():
    with pytest.raises(megaflow.InvalidArgument):
        megaflow.Client(["127.0.0.1:1"], tls_ca=os.path.join(TLS_DIR, "ca.pem"))
    with pytest.raises(megaflow.InvalidArgument):
        megaflow.Client(["127.0.0.1:1"], tls_ca="/no/such", tls_cert="/no/such", tls_key="/no/such")


def test_token_is_sent_with_every_call(heads, api, monkeypatch):
    (h,) = heads(1)
    h.handlers["SubmitGraph"] = submitted
    h.handlers["GetGraph"] = lambda req, ctx: graph_row("step-1", pb.GRAPH_STATE_RUNNING)
    with api.Client([h.addr], token="mft_abc", **FAST) as c:
        c.submit(small_graph())
        c.get_graph("step-1")
    assert [m.get("authorization") for m in h.metadata["SubmitGraph"] + h.metadata["GetGraph"]] == ["Bearer mft_abc"] * 2
    # From the environment when the argument is not given; none without.
    monkeypatch.setenv("MEGAFLOW_TOKEN", "mft_env")
    with api.Client([h.addr], **FAST) as c:
        c.get_graph("step-1")
    monkeypatch.delenv("MEGAFLOW_TOKEN")
    with api.Client([h.addr], **FAST) as c:
        c.get_graph("step-1")
    assert [m.get("authorization") for m in h.metadata["GetGraph"][1:]] == ["Bearer mft_env", None]


def test_token_refusal_says_what_to_do(heads, api):
    (h,) = heads(1)
    msg = "SubmitGraph needs role submit; your token (accessor 0123abcd…) has role read"
    h.fail_next("SubmitGraph", fail(grpc.StatusCode.PERMISSION_DENIED, msg))
    with api.Client([h.addr], token="mft_abc", **FAST) as c:
        with pytest.raises(megaflow.PermissionDenied, match="needs role submit"):
            c.submit(small_graph())
    h.fail_next("SubmitGraph", fail(grpc.StatusCode.UNAUTHENTICATED, "SubmitGraph needs a token of role submit"))
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(megaflow.Unauthenticated, match="needs a token") as ei:
            c.submit(small_graph())
        assert isinstance(ei.value, megaflow.PermissionDenied)  # caught by either class
    assert h.count("SubmitGraph") == 2  # refusals are not retried
    with pytest.raises(megaflow.InvalidArgument, match="token"):
        api.Client([h.addr], token="mft_abc\n")

