"""Table tests of megaflow._core, the policy both clients run: which errors
are retried and where, how waits grow, and the cursor of a watch."""

import time

import grpc
import pytest

import megaflow
from megaflow import _core
from megaflow._proto import service_pb2 as svc, types_pb2 as pb

U = grpc.StatusCode.UNAVAILABLE


def core(*heads):
    return _core.Core(list(heads) or ["a:1", "b:1", "c:1"], None, 5, (0.1, 0.4))


@pytest.mark.parametrize("err,then_current,pause", [
    # NOT_LEADER with an address: followed at once, without a wait.
    (megaflow.NotLeader("x", U, leader_addr="c:1"), "c:1", (0.0, 0.0)),
    # ... to an address not known yet: added and followed.
    (megaflow.NotLeader("x", U, leader_addr="d:1"), "d:1", (0.0, 0.0)),
    # NOT_LEADER without one, or naming the head itself: the next head, after a wait.
    (megaflow.NotLeader("x", U, leader_addr=""), "b:1", (0.05, 0.1)),
    (megaflow.NotLeader("x", U, leader_addr="a:1"), "b:1", (0.05, 0.1)),
    (megaflow.Unavailable("x", U), "b:1", (0.05, 0.1)),
    # A rate limit: the same head, after its RetryInfo.
    (megaflow.ResourceExhausted("x", grpc.StatusCode.RESOURCE_EXHAUSTED, retry_after=0.3), "a:1", (0.15, 0.3)),
])
def test_retry_decisions(err, then_current, pause):
    c = core()
    r = _core.Retry(c, "GetGraph", time.monotonic() + 5)
    p = r.failed("a:1", err)
    assert c.pick() == then_current
    assert pause[0] <= p <= pause[1]


@pytest.mark.parametrize("err", [
    megaflow.InvalidArgument("x", grpc.StatusCode.INVALID_ARGUMENT),
    megaflow.NotFound("x", grpc.StatusCode.NOT_FOUND),
    megaflow.FailedPrecondition("x", grpc.StatusCode.FAILED_PRECONDITION),
    megaflow.ResourceExhausted("too big", grpc.StatusCode.RESOURCE_EXHAUSTED),  # no RetryInfo: a size limit
    megaflow.MegaflowError("x", grpc.StatusCode.UNKNOWN),
])
def test_errors_a_retry_cannot_change_are_raised(err):
    c = core()
    with pytest.raises(type(err)):
        _core.Retry(c, "GetGraph", time.monotonic() + 5).failed("a:1", err)
    assert c.pick() == "a:1"


def test_waits_double_up_to_the_max_and_follow_is_once_in_a_row():
    c = core()
    r = _core.Retry(c, "GetGraph", time.monotonic() + 5)
    waits = [r.failed(c.pick(), megaflow.Unavailable("x", U)) for _ in range(4)]
    for w, hi in zip(waits, (0.1, 0.2, 0.4, 0.4)):
        assert hi / 2 <= w <= hi
    nl = megaflow.NotLeader("x", U, leader_addr="b:1")
    assert r.failed("a:1", nl) == 0.0 and c.pick() == "b:1"
    # b:1 says a:1 leads, a:1 says b:1 (a stale pair): the second is not followed at once.
    assert r.failed("b:1", megaflow.NotLeader("x", U, leader_addr="a:1")) > 0


def test_deadline_keeps_the_error_before_it():
    c = core()
    r = _core.Retry(c, "GetGraph", time.monotonic() + 5)
    r.failed("a:1", megaflow.Unavailable("no leader yet", U))
    with pytest.raises(megaflow.DeadlineExceeded, match="Deadline Exceeded; the try before: no leader yet"):
        r.failed("b:1", megaflow.DeadlineExceeded("Deadline Exceeded", grpc.StatusCode.DEADLINE_EXCEEDED))
    past = _core.Retry(c, "GetGraph", time.monotonic() - 1)
    with pytest.raises(megaflow.DeadlineExceeded, match="before a head answered"):
        past.remaining()


@pytest.mark.parametrize("any_error,err,raises", [
    (True, None, False),  # the head ended the stream: reconnect
    (True, megaflow.Internal("rst", grpc.StatusCode.INTERNAL), False),
    (True, megaflow.MegaflowError("eof", grpc.StatusCode.UNKNOWN), False),
    (True, megaflow.OutOfRange("old", grpc.StatusCode.OUT_OF_RANGE), True),
    (True, megaflow.NotFound("x", grpc.StatusCode.NOT_FOUND), True),
    (True, megaflow.PermissionDenied("x", grpc.StatusCode.PERMISSION_DENIED), True),
    (False, megaflow.Unavailable("x", U), False),
    (False, megaflow.Internal("rst", grpc.StatusCode.INTERNAL), True),
    (False, megaflow.DeadlineExceeded("x", grpc.StatusCode.DEADLINE_EXCEEDED), True),
])
def test_stream_reconnect_decisions(any_error, err, raises):
    c = core()
    r = _core.StreamRetry(c, "watch", None, any_error=any_error)
    if raises:
        with pytest.raises(megaflow.MegaflowError):
            r.failed("a:1", err)
        assert c.pick() == "a:1"
    else:
        assert 0 < r.failed("a:1", err) <= 0.1 and c.pick() == "b:1"


@pytest.mark.parametrize("cur,res,want", [
    ((5, 1), svc.WatchResponse(applied_index=9), (9, _core.MAX_SEQ)),  # a heartbeat moves past index 9
    ((9, 2), svc.WatchResponse(applied_index=9), (9, 2)),  # nothing new
    ((5, 1), svc.WatchResponse(events=[pb.Event(index=6, seq=0), pb.Event(index=6, seq=1)], applied_index=8),
     (6, 1)),  # the last event, not the applied index
])
def test_watch_step(cur, res, want):
    assert _core.watch_step(_core.Cursor(*cur), res) == want


def test_core_heads_and_reads():
    c = _core.Core(["a:1", "a:1", " b:1 "], "team-a", 5, (0.1, 1))
    assert c.heads == ["a:1", "b:1"] and c.tenant == "team-a"
    c.rotate("b:1")  # another call moved on already: no change
    assert c.pick() == "a:1"
    c.observe(7)
    c.observe(3)
    assert c.read().min_index == 7
    c.close()
    with pytest.raises(megaflow.MegaflowError, match="closed"):
        c.pick()
    for t in (0, -1, True, "1"):
        with pytest.raises(megaflow.InvalidArgument):
            c.deadline(t)
