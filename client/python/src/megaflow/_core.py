"""What the blocking client (:mod:`megaflow.client`) and the asyncio client
(:mod:`megaflow.aio`) share: argument checks, which head to call, the retry
policy, cursors and progress lines. Nothing here does I/O or sleeps; each
client runs these decisions with its own gRPC stubs and its own sleep.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, List, NamedTuple, Optional, Sequence, TextIO, Tuple, Union

from ._proto import service_pb2 as svc
from ._proto import types_pb2 as pb
from .errors import (DeadlineExceeded, InvalidArgument, InvalidGraph, MegaflowError, NotFound, NotLeader,
                     OutOfRange, PermissionDenied, ResourceExhausted, Unavailable, retryable)
from .graph import Graph, _ident_problem, validate

EnvHeads = "MEGAFLOW_HEADS"
"""The environment variable the clients read when given no heads: a
comma-separated list of host:port."""

MAX_SEQ = 2**32 - 1
TERMINAL_GRAPH = (pb.GRAPH_STATE_SUCCEEDED, pb.GRAPH_STATE_FAILED, pb.GRAPH_STATE_CANCELLED)
WAIT_WINDOW_S = 30.0  # how long wait() watches before it reads the graph again
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


class Cursor(NamedTuple):
    """A position in the event history: the Raft index of an entry and the
    position of an event within it. Resume a watch after an event with
    ``Cursor(ev.index, ev.seq)``."""

    index: int
    seq: int


@dataclass
class TaskResult:
    """How one task of a graph ended (or where it is now).

    Attributes:
        name: the task's name within its graph; task_id: "<graph>/<name>".
        state: "PENDING", "QUEUED", "ASSIGNED", "RUNNING", "SUCCEEDED",
            "FAILED", "CANCELLED" or "TIMED_OUT".
        result: the JSON the task printed on its last ``MEGAFLOW_RESULT``
            line, parsed; None without one.
        reason: why the task is in its state (a failure's message), free
            text for people; reason_code: its class, e.g. "EXIT_CODE", "OOM".
        exit_code: the last attempt's exit code (0 without an attempt).
        attempts: attempts so far.
    """

    name: str
    task_id: str
    state: str
    result: Any = None
    reason: str = ""
    reason_code: str = ""
    exit_code: int = 0
    attempts: int = 0

    @property
    def succeeded(self) -> bool:
        """Whether the task SUCCEEDED."""
        return self.state == "SUCCEEDED"


def task_result(t: pb.Task) -> TaskResult:
    """A task row as a :class:`TaskResult`."""
    name = t.id.split("/", 1)[1] if "/" in t.id else t.id
    last = t.attempts[-1] if t.attempts else None
    return TaskResult(name=name, task_id=t.id, state=task_state_name(t.state), result=parse_result(t.result),
                      reason=t.reason,
                      reason_code=pb.ReasonCode.Name(t.reason_code).replace("REASON_CODE_", "") if t.reason_code else "",
                      exit_code=last.exit_code if last else 0, attempts=len(t.attempts))


def new_graph_id() -> str:
    """A fresh graph id as the head would pick: "g-" and a lowercase ULID
    (48 bits of milliseconds, 80 random bits), sortable by time."""
    n = (int(time.time() * 1000) & (2**48 - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    return "g-" + "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26)))


def task_state_name(state: int) -> str:
    """Short name of a TaskState value: ``TASK_STATE_FAILED`` -> "FAILED"."""
    return pb.TaskState.Name(state).replace("TASK_STATE_", "")


def graph_state_name(state: int) -> str:
    """Short name of a GraphState value: ``GRAPH_STATE_SUCCEEDED`` -> "SUCCEEDED"."""
    return pb.GraphState.Name(state).replace("GRAPH_STATE_", "")


def jitter(d: float) -> float:
    """A wait drawn from [d/2, d)."""
    return d / 2 + random.random() * d / 2


# -- the client's settings and state ---------------------------------------------


class Core:
    """The state both clients keep, without any connection: the head
    addresses and which one is called first, the highest Raft index seen
    (reads wait for it), the default timeout and the backoff. Thread-safe.

    Args:
        heads, tenant, timeout, backoff: as :class:`megaflow.Client`.

    Raises:
        InvalidArgument: no head address given, a malformed one, a timeout
            that is not positive, or a malformed tenant.
    """

    def __init__(self, heads: Optional[Sequence[str]], tenant: Optional[str], timeout: float,
                 backoff: Tuple[float, float]) -> None:
        if isinstance(heads, str):
            heads = [heads]
        addrs = [h.strip() for h in (heads or []) if h and h.strip()]
        if not addrs:
            addrs = [h.strip() for h in os.environ.get(EnvHeads, "").split(",") if h.strip()]
        if not addrs:
            raise InvalidArgument(f"megaflow: no head address given; pass heads=['host:port', ...] or set {EnvHeads}")
        for a in addrs:
            if ":" not in a:
                raise InvalidArgument(f"megaflow: head address {a!r} has no port; use host:port, e.g. 127.0.0.1:7070")
        if not timeout or timeout <= 0:
            raise InvalidArgument(f"megaflow: timeout {timeout!r} must be a positive number of seconds")
        if tenant is not None and tenant != "":
            if p := _ident_problem(tenant):
                raise InvalidArgument(f"megaflow: tenant: {p}")
        self.tenant = tenant or ""
        self.timeout = float(timeout)
        self.backoff = (float(backoff[0]), float(backoff[1]))
        self._lock = threading.Lock()
        self._heads: List[str] = []
        for a in addrs:
            if a not in self._heads:
                self._heads.append(a)
        self._current = self._heads[0]
        self._closed = False
        self._seen = 0

    @property
    def heads(self) -> List[str]:
        """The head addresses known, the one called now first."""
        with self._lock:
            return [self._current] + [h for h in self._heads if h != self._current]

    def all_heads(self) -> List[str]:
        """Every known address, in the order first learned."""
        with self._lock:
            return list(self._heads)

    def close(self) -> None:
        """Mark the client closed: :meth:`pick` refuses from now on."""
        with self._lock:
            self._closed = True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        with self._lock:
            return self._closed

    def pick(self) -> str:
        """The head to call now.

        Raises:
            MegaflowError: the client is closed.
        """
        with self._lock:
            if self._closed:
                raise MegaflowError("megaflow: the client is closed")
            return self._current

    def follow(self, addr: str) -> None:
        """Call addr first from now on (a NOT_LEADER answer named it); a
        new address is added to the known heads."""
        with self._lock:
            if self._closed or not addr:
                return
            if addr not in self._heads:
                self._heads.append(addr)
            self._current = addr

    def rotate(self, frm: str) -> None:
        """Move on from head frm to the next known one (unless another call
        moved on already)."""
        with self._lock:
            if self._current != frm or len(self._heads) < 2:
                return
            self._current = self._heads[(self._heads.index(frm) + 1) % len(self._heads)]

    def observe(self, index: int) -> None:
        """Note a Raft index written or read: later reads wait for it."""
        with self._lock:
            self._seen = max(self._seen, index)

    def read(self) -> svc.ReadOptions:
        """Read options asking the head to have applied every index seen."""
        with self._lock:
            return svc.ReadOptions(min_index=self._seen)

    def deadline(self, timeout: Optional[float]) -> float:
        """The monotonic deadline of a call of timeout seconds (None: the
        client's).

        Raises:
            InvalidArgument: timeout is not positive.
        """
        t = self.timeout if timeout is None else timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
            raise InvalidArgument(f"megaflow: timeout {t!r} must be a positive number of seconds")
        return time.monotonic() + t


class Retry:
    """The retry policy of one unary call, as Go's client: NOT_LEADER with
    an address is followed at once (once in a row); UNAVAILABLE and
    NOT_LEADER without one move to the next head; a rate limit waits its
    RetryInfo; other retryable errors wait; each wait is jittered and
    doubles from ``backoff[0]`` to ``backoff[1]``; everything within the
    call's deadline.

    Usage, per try: ``remaining = r.remaining()`` (raises once the deadline
    passed), call with that timeout, and on a failure ``pause =
    r.failed(addr, err)`` (raises what must not be retried), sleep pause.
    """

    def __init__(self, core: Core, method: str, deadline: float) -> None:
        self.core = core
        self.method = method
        self.deadline = deadline
        self.delay = core.backoff[0]
        self.followed = False
        self.last = "none"

    def remaining(self) -> float:
        """Seconds left for the next try.

        Raises:
            DeadlineExceeded: none left; the message has the last error.
        """
        r = self.deadline - time.monotonic()
        if r <= 0:
            raise DeadlineExceeded(f"megaflow: {self.method}: deadline passed before a head answered "
                                   f"(last error: {self.last})")
        return r

    def failed(self, addr: str, err: MegaflowError) -> float:
        """Decide after a failed try at head addr: move to another head if
        needed and return the seconds to wait before the next try (0: at
        once).

        Raises:
            DeadlineExceeded: the deadline passed (or the head said so).
            MegaflowError: err, when a retry cannot change the answer.
        """
        if isinstance(err, DeadlineExceeded) or time.monotonic() >= self.deadline:
            # A try cut short by the deadline says only that: keep the error
            # that made the earlier tries fail, which says why.
            before = f"; the try before: {self.last}" if isinstance(err, DeadlineExceeded) and self.last != "none" \
                else ""
            raise DeadlineExceeded(f"megaflow: {self.method}: deadline passed (last error from head {addr}: "
                                   f"{err.message}{before})", err.code) from err
        if not retryable(err):
            raise err
        self.last = f"{err.message} (from head {addr})"
        if isinstance(err, NotLeader) and err.leader_addr and err.leader_addr != addr and not self.followed:
            self.core.follow(err.leader_addr)
            self.followed = True
            return 0.0
        self.followed = False
        wait = self.delay
        if isinstance(err, (NotLeader, Unavailable)):
            self.core.rotate(addr)
        elif isinstance(err, ResourceExhausted) and err.retry_after:
            wait = err.retry_after
        self.delay = min(2 * self.delay, self.core.backoff[1])
        return max(0.0, min(jitter(wait), self.deadline - time.monotonic()))


class StreamRetry:
    """The reconnection policy of a resumable stream (watch, logs): it moves
    to the next head after a jittered backoff, and a deadline, when given,
    bounds the whole stream.

    Args:
        core: the client's state.
        what: the stream, for messages ("watch", "logs of g/t").
        deadline: monotonic deadline; None: none.
        any_error: reconnect on every error but those a retry cannot change
            (OUT_OF_RANGE, INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, a
            message over the size limit), as Go's Watch does (an ended
            stream, UNAVAILABLE, INTERNAL from a dying head); False: only on
            the retryable ones (UNAVAILABLE, a rate limit).
    """

    def __init__(self, core: Core, what: str, deadline: Optional[float], any_error: bool) -> None:
        self.core = core
        self.what = what
        self.deadline = deadline
        self.any_error = any_error
        self.delay = core.backoff[0]

    def remaining(self) -> Optional[float]:
        """Seconds left (None: no deadline).

        Raises:
            DeadlineExceeded: none left.
        """
        if self.deadline is None:
            return None
        r = self.deadline - time.monotonic()
        if r <= 0:
            raise DeadlineExceeded(f"megaflow: {self.what}: timeout passed")
        return r

    def progressed(self) -> None:
        """A message arrived: the next failure starts the backoff over."""
        self.delay = self.core.backoff[0]

    def failed(self, addr: str, err: Optional[MegaflowError]) -> float:
        """Decide after the stream from addr broke (err None: the head ended
        it early); return the seconds to wait before reconnecting.

        Raises:
            DeadlineExceeded: the deadline passed.
            MegaflowError: err, when reconnecting cannot change it.
        """
        if isinstance(err, DeadlineExceeded):
            raise DeadlineExceeded(f"megaflow: {self.what}: timeout passed (last error from head {addr}: "
                                   f"{err.message})", err.code) from err
        if err is not None:
            if self.any_error:
                fatal = isinstance(err, (OutOfRange, InvalidArgument, NotFound, PermissionDenied)) or \
                    (isinstance(err, ResourceExhausted) and not err.retry_after)
            else:
                fatal = not retryable(err)
            if fatal:
                raise err
        self.core.rotate(addr)
        pause = jitter(self.delay)
        if self.deadline is not None:
            pause = min(pause, max(0.0, self.deadline - time.monotonic()))
        self.delay = min(2 * self.delay, self.core.backoff[1])
        return pause


# -- argument checks and request building ---------------------------------------


def check_id(field: str, value: str) -> None:
    """Raise InvalidArgument unless value is a non-empty string id."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"megaflow: {field}: {value!r} is not an id; give the id submit returned")


def check_attempt(attempt: int) -> None:
    """Raise InvalidArgument unless attempt is 0 (current) or a 1-based number."""
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not 0 <= attempt < 2**32:
        raise InvalidArgument(f"megaflow: attempt: {attempt!r} is not an attempt number; use 1, 2, ... or 0 for the current one")


def check_task_id(task_id: str) -> None:
    """Raise InvalidArgument unless task_id is "<graph id>/<task name>"."""
    if not isinstance(task_id, str) or task_id.count("/") != 1 or task_id.startswith("/") or task_id.endswith("/"):
        raise InvalidArgument(f"megaflow: task_id: {task_id!r} is not \"<graph id>/<task name>\"")


def submit_request(graph: Union[Graph, pb.GraphSpec], tenant: str) -> svc.SubmitGraphRequest:
    """The SubmitGraph request of a graph: validated, with an id picked now
    (so retries never create a second graph) and the client's tenant when
    the graph names none. The graph is not modified.

    Raises:
        InvalidGraph: the local checks failed.
    """
    if isinstance(graph, Graph):
        spec = graph.build()
    elif isinstance(graph, pb.GraphSpec):
        spec = pb.GraphSpec()
        spec.CopyFrom(graph)
        validate(spec)
    else:
        raise InvalidGraph(f"megaflow: submit takes a megaflow.Graph or a GraphSpec, not {type(graph).__name__}")
    if not spec.id:
        spec.id = new_graph_id()
    if not spec.tenant and tenant:
        spec.tenant = tenant
    return svc.SubmitGraphRequest(graph=spec)


def watch_cursor(graph_id: Optional[str], after: Optional[Tuple[int, int]]) -> Cursor:
    """The starting cursor of a watch.

    Raises:
        InvalidArgument: a bad graph id or cursor.
    """
    if graph_id is not None:
        check_id("graph_id", graph_id)
    cur = Cursor(*after) if after is not None else Cursor(0, 0)
    if cur.index < 0 or not 0 <= cur.seq <= MAX_SEQ:
        raise InvalidArgument(f"megaflow: watch: cursor {tuple(cur)} out of range")
    return cur


def watch_step(cur: Cursor, res: svc.WatchResponse) -> Cursor:
    """The cursor after a WatchResponse: its last event's, or for a
    heartbeat without events, the applied index (nothing of ours up to it)."""
    if not res.events and cur.index < res.applied_index:
        return Cursor(res.applied_index, MAX_SEQ)
    for ev in res.events:
        cur = Cursor(ev.index, ev.seq)
    return cur


def parse_result(raw: bytes) -> Any:
    """A task's MEGAFLOW_RESULT bytes as JSON (text if not JSON; None if empty)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def artifact_target(root: Path, p: str) -> Path:
    """Where artifact path p goes below root.

    Raises:
        InvalidArgument: p is absolute or climbs out of root.
    """
    rel = PurePosixPath(p)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise InvalidArgument(f"megaflow: artifact path {p!r} leaves the destination directory")
    return root.joinpath(*rel.parts)


def wanted_artifacts(task_id: str, manifest: svc.ArtifactListResponse,
                     paths: Optional[Sequence[str]]) -> List[str]:
    """The manifest's paths to download (all for None).

    Raises:
        NotFound: a path the manifest does not list.
    """
    files = {f.path for f in manifest.files}
    wanted = [f.path for f in manifest.files] if paths is None else list(paths)
    for p in wanted:
        if p not in files:
            raise NotFound(f"megaflow: {task_id} attempt {manifest.attempt}: no artifact {p!r}; "
                           f"it has {sorted(files) or 'none'}")
    return wanted


class Progress:
    """The one-line progress report of ``wait``, rewritten in place.

    Args:
        out: where it goes (None: sys.stderr).
        progress: whether to print; None: only when out is a terminal.
    """

    def __init__(self, out: Optional[TextIO], progress: Optional[bool]) -> None:
        import sys
        self.out = out or sys.stderr
        self.on = bool(getattr(self.out, "isatty", lambda: False)()) if progress is None else bool(progress)
        self.shown = ""
        self.last = 0.0

    def due(self) -> bool:
        """Whether a new line is wanted now (at most two a second)."""
        return self.on and time.monotonic() - self.last > 0.5

    def report(self, g: pb.Graph, final: bool = False) -> None:
        """Print g's state and counts (and a newline when final)."""
        self.last = time.monotonic()
        if not self.on:
            return
        c = g.counts
        done = c.succeeded + c.failed + c.cancelled + c.timed_out
        line = (f"{g.id}: {graph_state_name(g.state).lower()} {done}/{g.task_count} done "
                f"({c.succeeded} ok, {c.failed + c.timed_out} failed, {c.running} running, "
                f"{c.pending + c.queued + c.assigned} waiting)")
        if line != self.shown or final:
            self.out.write("\r" + line.ljust(len(self.shown)) + ("\n" if final else ""))
            self.out.flush()
            self.shown = line

    def interrupted(self) -> None:
        """End the line after a KeyboardInterrupt."""
        if self.on:
            self.out.write("\n")


def wait_left(deadline: Optional[float], graph_id: str, timeout: Optional[float]) -> Optional[float]:
    """Seconds left of a wait (None: no limit).

    Raises:
        DeadlineExceeded: none left.
    """
    if deadline is None:
        return None
    r = deadline - time.monotonic()
    if r <= 0:
        raise DeadlineExceeded(f"megaflow: wait: graph {graph_id} is not finished after {timeout} s")
    return r
