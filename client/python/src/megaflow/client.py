"""The MegaFlow client: submit graphs, watch and wait for them, read results.

A :class:`Client` talks to the heads over the gRPC API only. Like Go's
``client.Client`` it finds the leader among the heads it is given, follows
it through leader changes (a NOT_LEADER answer names the leader), moves on
to the next head when one does not answer, and retries with jittered
exponential backoff, always within the call's deadline. The policy lives in
:mod:`megaflow._core`, shared with the asyncio client (:mod:`megaflow.aio`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, TextIO, Tuple, TypeVar, Union

import grpc

from . import _core
from ._core import (Cursor, EnvHeads, TaskResult, check_attempt as _check_attempt, check_id as _check_id,
                    check_task_id as _check_task_id, graph_state_name, new_graph_id, task_state_name)
from ._proto import sandbox_pb2_grpc as sbx_grpc
from ._proto import service_pb2 as svc
from ._proto import service_pb2_grpc as svc_grpc
from ._proto import types_pb2 as pb
from .errors import ChecksumMismatch, DeadlineExceeded, InvalidArgument, MegaflowError, OutOfRange, from_rpc_error
from . import _token
from .graph import Graph
from . import sandbox as _sbx
from .sandbox import Sandbox, SandboxInfo, Seconds, SnapshotInfo

__all__ = ["Client", "Cursor", "TaskResult", "EnvHeads", "new_graph_id", "task_state_name", "graph_state_name"]

_T = TypeVar("_T")


class Client:
    """A connection to a MegaFlow head cluster; safe to share between threads.

    Args:
        heads: gRPC addresses (host:port) of some or all heads; None or
            empty: the comma-separated list in env MEGAFLOW_HEADS.
        tenant: the tenant graphs are submitted under when the graph names
            none; None: the head's "default".
        timeout: default deadline of each call in seconds, retries included
            (every method takes its own ``timeout=`` too).
        backoff: (first, max) wait in seconds between retries when no head
            answers; each wait is jittered over [w/2, w) and doubles.
        credentials: ``grpc.ChannelCredentials`` for TLS; None: plaintext.
        tls_ca, tls_cert, tls_key: paths of the cluster's CA certificate,
            a client certificate and its key (PEM, from ``megaflow tls cert
            create --client``), all three or none: mutual TLS with heads
            whose certificates name ``head.megaflow`` (docs/security.md).
            Not with ``credentials``.
        token: API token secret of a cluster with ACLs on (megaflow-head
            --acl), sent with every call as ``authorization: Bearer``
            metadata; None: env MEGAFLOW_TOKEN, else none. A refused call
            raises with what to do (docs/security.md).
        options: extra gRPC channel options.

    Raises:
        InvalidArgument: no head address given, or a malformed one.

    Use it as a context manager, or call :meth:`close`::

        with megaflow.Client(["10.0.0.1:7070", "10.0.0.2:7070"]) as c:
            gid = c.submit(graph)
            g = c.wait(gid, timeout=3600)
    """

    def __init__(self, heads: Optional[Sequence[str]] = None, *, tenant: Optional[str] = None,
                 timeout: float = 30.0, backoff: Tuple[float, float] = (0.05, 2.0),
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 token: Optional[str] = None, options: Sequence[Tuple[str, Any]] = ()) -> None:
        self._core = _core.Core(heads, tenant, timeout, backoff)
        self._token = _token.resolve(token)
        self._credentials, self._options = _token.tls_credentials(credentials, tls_ca, tls_cert, tls_key, options)
        self._lock = threading.Lock()
        self._channels: Dict[str, grpc.Channel] = {}
        self._stubs: Dict[str, svc_grpc.MegaflowServiceStub] = {}
        self._sbx_stubs: Dict[str, sbx_grpc.SandboxServiceStub] = {}
        _open_clients.add(self)

    @property
    def tenant(self) -> str:
        """The client's tenant ("" for the head's default)."""
        return self._core.tenant

    @property
    def timeout(self) -> float:
        """The default deadline of each call, in seconds."""
        return self._core.timeout

    # -- connection management -------------------------------------------

    def _channel(self, addr: str) -> Tuple[grpc.Channel, Any, Any]:
        """The channel to addr and its two stubs, made on first use."""
        with self._lock:
            if self._core.closed:
                raise MegaflowError("megaflow: the client is closed")
            ch = self._channels.get(addr)
            if ch is None:
                if self._credentials is not None:
                    ch = grpc.secure_channel(addr, self._credentials, options=self._options)
                else:
                    ch = grpc.insecure_channel(addr, options=self._options)
                if self._token:
                    ch = grpc.intercept_channel(ch, _token.Interceptor(self._token))
                self._channels[addr] = ch
                self._stubs[addr] = svc_grpc.MegaflowServiceStub(ch)
                self._sbx_stubs[addr] = sbx_grpc.SandboxServiceStub(ch)
            return ch, self._stubs[addr], self._sbx_stubs[addr]

    @property
    def heads(self) -> List[str]:
        """The head addresses the client knows, the one it calls now first."""
        return self._core.heads

    def close(self) -> None:
        """Close the connections to every head; later calls raise
        :class:`MegaflowError` ("the client is closed")."""
        with self._lock:
            self._core.close()
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()
            self._stubs.clear()
            self._sbx_stubs.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pick(self, sandbox: bool = False) -> Tuple[str, Any]:
        addr = self._core.pick()
        _, stub, sbx_stub = self._channel(addr)
        return addr, (sbx_stub if sandbox else stub)

    def _connect(self, deadline: float, what: str) -> Tuple[str, sbx_grpc.SandboxServiceStub]:
        """Return a head whose connection is up, and its SandboxService stub,
        for a call that must not be sent twice (an exec, a file write):
        nothing is sent here, so a head that does not accept a connection is
        passed over for the next one, with backoff, until the deadline."""
        delay = self._core.backoff[0]
        last = "none"
        while True:
            addr = self._core.pick()
            ch, _, stub = self._channel(addr)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded(f"megaflow: {what}: deadline passed before a head accepted a connection "
                                       f"(last: {last}); nothing was sent")
            state = _wait_connected(ch, min(remaining, _sbx._CONNECT_TRY_S))
            if state == grpc.ChannelConnectivity.READY:
                return addr, stub
            last = f"head {addr} is {state.name if state else 'not answering'}"
            self._core.rotate(addr)
            pause = min(_core.jitter(delay), deadline - time.monotonic())
            if pause > 0:
                time.sleep(pause)
            delay = min(2 * delay, self._core.backoff[1])

    def _rotate(self, frm: str) -> None:
        self._core.rotate(frm)

    def _observe(self, index: int) -> None:
        self._core.observe(index)

    def _read(self) -> svc.ReadOptions:
        return self._core.read()

    def _deadline(self, timeout: Optional[float]) -> float:
        return self._core.deadline(timeout)

    def _call(self, method: str, request: Any, timeout: Optional[float] = None,
              run: Optional[Callable[[Any, Any, float], _T]] = None, sandbox: bool = False) -> _T:
        """Call a unary method (or run(stub_method, request, remaining)) on
        the current head, retrying answers that another head or a later try
        can change, until the deadline (:class:`_core.Retry`). sandbox: a
        SandboxService method."""
        r = _core.Retry(self._core, method, self._core.deadline(timeout))
        while True:
            addr, stub = self._pick(sandbox)
            remaining = r.remaining()
            fn = getattr(stub, method)
            try:
                if run is not None:
                    return run(fn, request, remaining)
                return fn(request, timeout=remaining)
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            pause = r.failed(addr, err)
            if pause > 0:
                time.sleep(pause)

    # -- graphs ------------------------------------------------------------

    def submit(self, graph: Union[Graph, pb.GraphSpec], *, timeout: Optional[float] = None) -> str:
        """Validate a graph locally, then commit it.

        A graph without an id gets one here, before the first try, so that
        retries through leader changes never create a second graph: submit
        is idempotent by graph id. The graph is not modified.

        Args:
            graph: a :class:`Graph` or a ``GraphSpec`` message.
            timeout: deadline in seconds (default: the client's).

        Returns:
            The graph's id.

        Raises:
            InvalidGraph: the local checks failed (no RPC was made).
            InvalidArgument: the head refused the spec.
            AlreadyExists: the id holds a different graph.
            DeadlineExceeded: no leader answered in time.
        """
        res = self._call("SubmitGraph", _core.submit_request(graph, self.tenant), timeout)
        self._observe(res.index)
        return res.graph_id

    def get_graph(self, graph_id: str, *, timeout: Optional[float] = None) -> pb.Graph:
        """Return a graph's row: state, counts by task state, metrics.

        Args:
            graph_id: the graph's id.
            timeout: deadline in seconds (default: the client's).

        Returns:
            The ``Graph`` message (``.state``, ``.counts``, ``.metrics``;
            see proto/megaflow/v1/types.proto). Reads wait until the head
            has applied everything this client wrote or read before.

        Raises:
            NotFound: no such graph.
        """
        return self._get_graph(graph_id, timeout)[0]

    def _get_graph(self, graph_id: str, timeout: Optional[float]) -> Tuple[pb.Graph, svc.ReadMeta]:
        _check_id("graph_id", graph_id)
        res = self._call("GetGraph", svc.GetGraphRequest(graph_id=graph_id, read=self._read()), timeout)
        self._observe(res.meta.index)
        return res.graph, res.meta

    def metrics(self, graph_id: str, *, timeout: Optional[float] = None) -> pb.GraphMetrics:
        """Return a graph's aggregate over its task results.

        Returns:
            ``GraphMetrics``: ``success_rate`` (succeeded / finished),
            ``mean``, ``min``, ``max``, ``count`` of the numeric result field
            ``field`` ("reward" unless the label megaflow.io/metric names
            another), a 12-bucket ``histogram`` and ``wall_millis``.

        Raises:
            NotFound: no such graph.
        """
        return self.get_graph(graph_id, timeout=timeout).metrics

    def list_graphs(self, *, tenant: Optional[str] = None, state: int = 0,
                    include_archived: bool = False,
                    timeout: Optional[float] = None) -> Iterator[pb.Graph]:
        """Iterate over the graphs, sorted by id, page by page.

        Args:
            tenant: only this tenant's; None: the client's tenant, "" all.
            state: only graphs in this ``GraphState`` (e.g.
                ``megaflow.GRAPH_STATE_RUNNING``); 0: any.
            include_archived: also the archived graphs, after the live
                ones: summaries with ``archived_unix_nanos`` set, whose
                tasks are no longer kept (the head's --graph-retention).
            timeout: deadline of each page's call, in seconds.
        """
        token = ""
        while True:
            res = self._call("ListGraphs", svc.ListGraphsRequest(
                tenant=self.tenant if tenant is None else tenant, state=state, page_token=token,
                read=self._read(), include_archived=include_archived), timeout)
            self._observe(res.meta.index)
            yield from res.graphs
            token = res.next_page_token
            if not token:
                return

    def cancel_graph(self, graph_id: str, reason: str = "", *, timeout: Optional[float] = None) -> int:
        """Cancel every unfinished task of a graph (idempotent).

        Returns:
            How many tasks moved to CANCELLED.

        Raises:
            NotFound: no such graph.
        """
        _check_id("graph_id", graph_id)
        res = self._call("CancelGraph", svc.CancelGraphRequest(graph_id=graph_id, reason=reason), timeout)
        self._observe(res.index)
        return res.cancelled

    def delete_graph(self, graph_id: str, *, timeout: Optional[float] = None) -> None:
        """Delete a finished graph: its artifacts, then its rows.

        Raises:
            NotFound: no such graph.
            FailedPrecondition: a task is not terminal (cancel and wait first).
        """
        _check_id("graph_id", graph_id)
        res = self._call("DeleteGraph", svc.DeleteGraphRequest(graph_id=graph_id), timeout)
        self._observe(res.index)

    def cluster_status(self, *, timeout: Optional[float] = None) -> svc.ClusterStatusResponse:
        """The heads, the leader, the term and the indexes, as the answering
        head sees them."""
        return self._call("ClusterStatus", svc.ClusterStatusRequest(), timeout)

    # -- tasks -------------------------------------------------------------

    def get_task(self, task_id: str, *, timeout: Optional[float] = None) -> pb.Task:
        """Return a task's row with its attempts.

        Args:
            task_id: "<graph id>/<task name>".

        Raises:
            NotFound: no such task.
        """
        _check_task_id(task_id)
        res = self._call("GetTask", svc.GetTaskRequest(task_id=task_id, read=self._read()), timeout)
        self._observe(res.meta.index)
        return res.task

    def tasks(self, graph_id: str, *, state: int = 0, timeout: Optional[float] = None) -> Iterator[pb.Task]:
        """Iterate over a graph's tasks (``Task`` messages), page by page.

        Args:
            graph_id: the graph's id.
            state: only tasks in this ``TaskState``; 0: any.
            timeout: deadline of each page's call, in seconds.
        """
        _check_id("graph_id", graph_id)
        token = ""
        while True:
            res = self._call("ListTasks", svc.ListTasksRequest(graph_id=graph_id, state=state, page_token=token,
                                                               omit_spec=True, read=self._read()), timeout)
            self._observe(res.meta.index)
            yield from res.tasks
            token = res.next_page_token
            if not token:
                return

    def results(self, graph_id: str, *, timeout: Optional[float] = None) -> Dict[str, TaskResult]:
        """Return how each task of a graph ended, with its parsed JSON result.

        Args:
            graph_id: the graph's id.
            timeout: deadline of each page's call, in seconds.

        Returns:
            Task name -> :class:`TaskResult`, sorted by name.

        Raises:
            NotFound: no such graph.
        """
        return {t.id.split("/", 1)[-1]: _core.task_result(t) for t in self.tasks(graph_id, timeout=timeout)}

    def cancel_task(self, task_id: str, reason: str = "", *, timeout: Optional[float] = None) -> int:
        """Cancel one task and the dependents that can then never run.

        Returns:
            How many tasks moved to CANCELLED.

        Raises:
            NotFound: no such task.
        """
        _check_task_id(task_id)
        res = self._call("CancelTask", svc.CancelTaskRequest(task_id=task_id, reason=reason), timeout)
        self._observe(res.index)
        return res.cancelled

    # -- events ------------------------------------------------------------

    def watch(self, graph_id: Optional[str] = None, *, after: Optional[Tuple[int, int]] = None,
              from_now: bool = False, timeout: Optional[float] = None) -> Iterator[pb.Event]:
        """Stream committed events in commit order, reconnecting through head
        failures and leader changes without gaps or duplicates.

        Args:
            graph_id: only this graph's events; None: all.
            after: a :class:`Cursor` (or (index, seq)): events strictly
                after it; None: from the oldest event the heads retain.
                Resume with ``Cursor(ev.index, ev.seq)`` of the last event.
            from_now: start at the live end instead.
            timeout: seconds after which the iterator ends by raising
                :class:`DeadlineExceeded`; None: it runs until the consumer
                stops iterating (closing it cancels the stream).

        Yields:
            ``Event`` messages: ``task_id`` ("" for a graph event),
            ``task_state`` / ``graph_state``, ``attempt``, ``reason``,
            ``index`` and ``seq`` (the cursor).

        Raises:
            OutOfRange: the cursor is older than the retained history.
            NotFound, InvalidArgument: as the head answers.
            DeadlineExceeded: the timeout passed.
        """
        cur = _core.watch_cursor(graph_id, after)
        r = _core.StreamRetry(self._core, "watch", None if timeout is None else self._deadline(timeout),
                              any_error=True)
        while True:
            addr, stub = self._pick()
            stream = stub.Watch(svc.WatchRequest(after_index=cur.index, after_seq=cur.seq, graph_id=graph_id or "",
                                                 from_now=from_now), timeout=r.remaining())
            err: Optional[MegaflowError] = None  # None: the head ended the stream (shutting down)
            try:
                for res in stream:
                    r.progressed()
                    from_now = False
                    if not res.events:
                        cur = _core.watch_step(cur, res)
                    for ev in res.events:
                        cur = Cursor(ev.index, ev.seq)
                        self._observe(ev.index)
                        yield ev
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            finally:
                stream.cancel()
            time.sleep(r.failed(addr, err))

    def wait(self, graph_id: str, *, timeout: Optional[float] = None,
             progress: Optional[bool] = None, out: Optional[TextIO] = None) -> pb.Graph:
        """Block until a graph is terminal (SUCCEEDED, FAILED or CANCELLED).

        Args:
            graph_id: the graph's id.
            timeout: seconds to wait in all; None: no limit (each RPC still
                has the client's deadline and the watch reconnects).
            progress: print a one-line progress report (rewritten in place)
                on ``out``; None: only when ``out`` is a terminal.
            out: where progress goes; default ``sys.stderr``.

        Returns:
            The terminal ``Graph`` message with its counts and metrics.

        Raises:
            NotFound: no such graph.
            DeadlineExceeded: the timeout passed first.
        """
        _check_id("graph_id", graph_id)
        prog = _core.Progress(out, progress)
        deadline = None if timeout is None else self._deadline(timeout)
        try:
            while True:
                left = _core.wait_left(deadline, graph_id, timeout)
                g, meta = self._get_graph(graph_id, min(self.timeout, left) if left else None)
                if g.state in _core.TERMINAL_GRAPH:
                    prog.report(g, final=True)
                    return g
                prog.report(g)
                # Every change after the read shows up as an event after its
                # index; a window bounds each stream, then the graph is read again.
                window = min(_core.WAIT_WINDOW_S, left) if left else _core.WAIT_WINDOW_S
                # Closed explicitly, not left to the collector: closing the
                # generator cancels its stream, which the head otherwise
                # keeps open (and wakes at every change) until the window ends.
                try:
                    with contextlib.closing(self.watch(graph_id, after=Cursor(meta.index, _core.MAX_SEQ),
                                                       timeout=window)) as events:
                        for ev in events:
                            if not ev.task_id and ev.graph_state in _core.TERMINAL_GRAPH:
                                break
                            if prog.due():
                                left = _core.wait_left(deadline, graph_id, timeout)
                                prog.report(self.get_graph(graph_id, timeout=min(self.timeout, left or self.timeout)))
                except (DeadlineExceeded, OutOfRange):
                    pass  # window over, or fell behind the history: read again
        except KeyboardInterrupt:
            prog.interrupted()
            raise

    # -- logs and artifacts --------------------------------------------------

    def stream_logs(self, task_id: str, *, attempt: int = 0, follow: bool = False,
                    timeout: Optional[float] = None) -> Iterator[bytes]:
        """Stream an attempt's combined stdout and stderr, chunk by chunk.

        Args:
            task_id: "<graph id>/<task name>".
            attempt: 1-based attempt number; 0: the current (last) one.
            follow: keep streaming until the attempt is terminal and its log
                complete (waits for a first attempt of a task not yet run).
            timeout: seconds for the whole stream (default: the client's
                without follow, none with it).

        Yields:
            Chunks of bytes, in order; a broken stream resumes after the last
            chunk at another head.

        Raises:
            NotFound: no such task or attempt.
            FailedPrecondition: the head has no artifact store.
        """
        _check_task_id(task_id)
        _check_attempt(attempt)
        r = _core.StreamRetry(self._core, f"logs of {task_id}",
                              None if (timeout is None and follow) else self._deadline(timeout), any_error=False)
        number, after = attempt, 0
        while True:
            addr, stub = self._pick()
            stream = stub.Logs(svc.LogsRequest(task_id=task_id, attempt=number, follow=follow, after_chunk=after,
                                               read=self._read()), timeout=r.remaining())
            try:
                for res in stream:
                    r.progressed()
                    number, after = res.attempt, res.chunk
                    yield res.data
                return
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            finally:
                stream.cancel()
            time.sleep(r.failed(addr, err))

    def logs(self, task_id: str, *, attempt: int = 0, timeout: Optional[float] = None) -> str:
        """Return an attempt's log (stdout and stderr combined) as text.

        Args:
            task_id: "<graph id>/<task name>".
            attempt: 1-based; 0: the current (last) attempt.
            timeout: deadline in seconds (default: the client's).

        Returns:
            The log, decoded as UTF-8 (invalid bytes replaced).

        Raises:
            NotFound: no such task or attempt.
            FailedPrecondition: the head has no artifact store.
        """
        return b"".join(self.stream_logs(task_id, attempt=attempt, timeout=timeout)).decode("utf-8", "replace")

    def artifacts(self, task_id: str, *, attempt: int = 0,
                  timeout: Optional[float] = None) -> svc.ArtifactListResponse:
        """Return an attempt's manifest: its output files with sizes and SHA-256.

        Args:
            task_id: "<graph id>/<task name>".
            attempt: 1-based; 0: the current attempt.

        Returns:
            ``ArtifactListResponse``: ``files`` (``path``, ``size`` in bytes,
            ``sha256``), ``log_bytes``, ``notes``.

        Raises:
            NotFound: no such task or attempt, or the manifest has not landed.
        """
        _check_task_id(task_id)
        _check_attempt(attempt)
        return self._call("ArtifactList", svc.ArtifactListRequest(task_id=task_id, attempt=attempt,
                                                                  read=self._read()), timeout)

    def download(self, task_id: str, dest: Union[str, os.PathLike], *, attempt: int = 0,
                 paths: Optional[Sequence[str]] = None, timeout: Optional[float] = None) -> List[Path]:
        """Download an attempt's artifacts into a directory, checking each
        file's SHA-256 against the manifest.

        Args:
            task_id: "<graph id>/<task name>".
            dest: directory to write into (created if missing); files keep
                their relative paths below it.
            attempt: 1-based; 0: the current attempt.
            paths: only these paths (as the manifest lists them); None: all.
            timeout: deadline of each call, in seconds.

        Returns:
            The paths written.

        Raises:
            NotFound: no such task, attempt or path.
            ChecksumMismatch: a file's bytes differ from its manifest's hash
                (nothing is left at its path).
        """
        manifest = self.artifacts(task_id, attempt=attempt, timeout=timeout)
        sums = {f.path: f.sha256 for f in manifest.files}
        wanted = _core.wanted_artifacts(task_id, manifest, paths)
        root = Path(dest)
        root.mkdir(parents=True, exist_ok=True)
        written = []
        for p in wanted:
            target = _core.artifact_target(root, p)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".part")

            def fetch(fn: Any, req: Any, remaining: float, tmp: Path = tmp) -> str:
                h = hashlib.sha256()
                with open(tmp, "wb") as f:
                    for res in fn(req, timeout=remaining):
                        if res.HasField("file"):
                            continue
                        h.update(res.data)
                        f.write(res.data)
                return h.hexdigest()

            try:
                digest = self._call("ArtifactGet", svc.ArtifactGetRequest(
                    task_id=task_id, attempt=manifest.attempt, path=p, read=self._read()), timeout, run=fetch)
                if digest != sums[p]:
                    raise ChecksumMismatch(f"megaflow: artifact {p!r} of {task_id}: SHA-256 {digest}, "
                                           f"the manifest says {sums[p]}")
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            written.append(target)
        return written

    # -- sandboxes -------------------------------------------------------------

    def sandbox(self, image: Optional[str] = None, *, cpu_millis: Optional[int] = None, cpu: Optional[Union[str, int, float]] = None,
                memory: Optional[Union[str, int]] = None, env: Optional[Mapping[str, str]] = None,
                working_dir: Optional[str] = None, network: Optional[str] = None,
                labels: Optional[Mapping[str, str]] = None, lifetime: Optional[Seconds] = None,
                idle_timeout: Optional[Seconds] = None, wait_ready: Optional[Seconds] = 120.0,
                id: Optional[str] = None, tenant: Optional[str] = None,
                from_snapshot: Optional[Union[str, SnapshotInfo]] = None,
                timeout: Optional[float] = None) -> Sandbox:
        """Create a sandbox (docs/sandboxes.md) and wait until it is READY.

        The id is picked here before the first try, so retries through
        leader changes never create a second sandbox. Use the result as a
        context manager to close it::

            with client.sandbox(image="python:3.12-slim", idle_timeout=600) as sb:
                print(sb.exec("python -c 'print(6*7)'").text)

        Args:
            image: the container image; it needs ``sh`` and ``sleep``
                (busybox's do). Only the Docker runtime serves sandboxes.
                Required unless ``from_snapshot`` is given.
            cpu_millis: CPU in millicores (1000 = one core), reserved and
                limited; or ``cpu`` as for tasks ("500m", 2); None: the
                cluster's default.
            memory: bytes, or a string such as "4Gi" or "512Mi"; None: the
                cluster's default.
            env: environment of every exec (an exec's own env overrides it).
            working_dir: absolute working directory of every exec.
            network: container network mode; None: "none" (no network).
            labels: labels of the sandbox's graph.
            lifetime: seconds (or a ``timedelta``) after creation at which
                it ends (EXPIRED), rounded up to whole seconds; None: one
                hour; at most 7 days.
            idle_timeout: it ends (EXPIRED) after this many seconds without
                an exec or a file call; None: never for idleness.
            wait_ready: seconds to wait (at most 600) for it to be READY;
                0 or None: return once accepted (it may be PENDING: see
                :meth:`Sandbox.wait_ready`). It may still be PENDING or
                STARTING after the wait (a busy cluster).
            id: the sandbox id ("sbx-" then [a-z0-9]); None: a fresh one.
            tenant: its tenant; None: the client's.
            from_snapshot: a snapshot (its id, or the :data:`SnapshotInfo`
                :meth:`Sandbox.snapshot` returned) to start from instead of
                ``image``: the sandbox runs on the worker holding it, with
                the files of the sandbox it was taken of. Of the sandbox's
                tenant.
            timeout: deadline in seconds, retries included; None: the
                client's timeout plus ``wait_ready``.

        Returns:
            A :class:`Sandbox` handle.

        Raises:
            InvalidArgument: a bad argument (before any RPC; image and
                from_snapshot both or neither), or the head refused one.
            SnapshotNotFound: no such snapshot (deleted, another tenant's,
                or its worker was lost).
            SnapshotWorkerDown: the worker holding the snapshot is not
                alive.
            SandboxEnded: with ``wait_ready``, it ended instead of starting
                (e.g. :class:`SandboxFailed`: the image could not run); the
                exception's ``sandbox`` is the handle.
            ResourceExhausted: the tenant's rate limit, past the deadline.
            DeadlineExceeded: no head answered in time.
        """
        return _sbx.create(self, image=image, cpu_millis=cpu_millis, cpu=cpu, memory=memory, env=env,
                           working_dir=working_dir, network=network, labels=labels, lifetime=lifetime,
                           idle_timeout=idle_timeout, wait_ready=wait_ready, id=id, tenant=tenant,
                           from_snapshot=from_snapshot, timeout=timeout)

    def get_sandbox(self, sandbox_id: str, *, timeout: Optional[float] = None) -> Sandbox:
        """Return a handle on an existing sandbox, with its current state.

        Args:
            sandbox_id: "sbx-...", as :meth:`sandbox` or ``megaflow sandbox
                create`` gave it.
            timeout: deadline in seconds (default: the client's).

        Returns:
            A :class:`Sandbox` (``info`` read now). Using it as a context
            manager closes the sandbox on exit.

        Raises:
            InvalidArgument: not a sandbox id (before any RPC).
            SandboxNotFound: no such sandbox.
        """
        _sbx._check_id("sandbox_id", sandbox_id)  # before any RPC
        self.sync_session(timeout=timeout)
        return _sbx.get(self, sandbox_id, timeout)

    def sync_session(self, *, timeout: Optional[float] = None) -> None:
        """Raise this client's session index to the leader's applied index:
        every later read through this client, on any head, then sees every
        write acknowledged before the call, by any client (another
        process's sandbox, or a head restarted and still replaying its
        log). Reads already wait for this client's own writes.
        :meth:`get_sandbox` calls it first. It costs one read through the
        leader (GetLimits with require_leader), as the Go client's
        SyncSession.

        Raises:
            Unavailable: no leader answered before the deadline.
        """
        res = self._call("GetLimits", svc.GetLimitsRequest(read=svc.ReadOptions(require_leader=True)), timeout)
        self._observe(res.meta.index)

    def list_sandboxes(self, all: bool = False, *, tenant: Optional[str] = None,
                       timeout: Optional[float] = None) -> List[SandboxInfo]:
        """List sandboxes, oldest first.

        Args:
            all: include ended ones (CLOSED, EXPIRED, LOST, FAILED).
            tenant: only this tenant's; None: the client's tenant, "" (or a
                client without one) every tenant's.
            timeout: deadline in seconds (default: the client's).

        Returns:
            ``Sandbox`` messages (``id``, ``state``, ``reason``,
            ``worker_id``, ``image``...; ``megaflow.sandbox_state_name``
            names the state).
        """
        return _sbx.list_(self, tenant, all, timeout)

    def list_snapshots(self, *, tenant: Optional[str] = None,
                       timeout: Optional[float] = None) -> List[SnapshotInfo]:
        """List snapshots (:meth:`Sandbox.snapshot`), oldest first.
        Retried through leader changes.

        Args:
            tenant: only this tenant's; None: the client's tenant, "" (or a
                client without one) every tenant's.
            timeout: deadline in seconds (default: the client's).

        Returns:
            ``Snapshot`` messages (:data:`megaflow.SnapshotInfo`: ``id``,
            ``name``, ``sandbox_id``, ``worker_id``, ``size_bytes``...).

        Raises:
            InvalidArgument: a malformed tenant (before any RPC).
        """
        return _sbx.list_snapshots(self, tenant, timeout)

    def delete_snapshot(self, snapshot: Union[str, SnapshotInfo], *, timeout: Optional[float] = None) -> None:
        """Delete a snapshot: its image on its worker, then its row.
        Retried through leader changes and a worker that does not answer,
        as Go's DeleteSnapshot (a retry after a lost answer says
        :class:`SnapshotNotFound`).

        Args:
            snapshot: its id ("snap-...") or its :data:`SnapshotInfo`.
            timeout: deadline in seconds (default: the client's).

        Raises:
            InvalidArgument: not a snapshot id (before any RPC).
            SnapshotNotFound: no such snapshot.
            SnapshotInUse: sandboxes created from it may still run it:
                close them first (a fork closed a moment ago counts until
                its container is removed: retry in a few seconds).
            DeadlineExceeded: no head answered in time.
        """
        _sbx.delete_snapshot(self, snapshot, timeout)


# The clients not garbage-collected, closed at interpreter exit: a channel
# whose connectivity was watched (an exec or a file write waits for the
# connection first) and that is left to grpc's finalizer during interpreter
# shutdown hangs the exit for ever (grpc 1.51, Debian's python3-grpcio). A
# script that never closes its Client is common (notebooks, short scripts).
_open_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@atexit.register
def _close_open_clients() -> None:
    for c in list(_open_clients):
        try:
            c.close()
        except Exception:  # nothing to report to at exit
            pass


def _wait_connected(ch: grpc.Channel, timeout: float) -> Optional[grpc.ChannelConnectivity]:
    """Wait up to timeout for a channel to be READY, asking it to connect
    when it is not, or for a fresh connection attempt to fail; return the
    state reached (None: no answer in time).

    A channel already READY is only looked at: gRPC's connectivity poller
    keeps running for a moment after the last unsubscribe, and when asked to
    connect it may then touch a channel the caller has closed meanwhile."""
    deadline = time.monotonic() + timeout
    done = threading.Event()
    seen: List[grpc.ChannelConnectivity] = []

    def look(state: grpc.ChannelConnectivity) -> None:
        seen.append(state)
        done.set()

    ch.subscribe(look, try_to_connect=False)
    try:
        done.wait(timeout)
    finally:
        ch.unsubscribe(look)
    if not seen:
        return None
    if seen[0] in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.SHUTDOWN):
        return seen[0]
    done.clear()
    states: List[grpc.ChannelConnectivity] = []

    def on_change(state: grpc.ChannelConnectivity) -> None:
        states.append(state)
        # The first callback reports the state at subscription; a
        # TRANSIENT_FAILURE then may be an old attempt's: wait for the next.
        if state in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.SHUTDOWN) or \
                (state == grpc.ChannelConnectivity.TRANSIENT_FAILURE and len(states) > 1):
            done.set()

    # Ask the channel to connect now: grpc's poller would only pass a
    # subscriber's try_to_connect on after up to 0.2 s (and then may touch
    # the channel after it is closed); without that private hook, fall back
    # to the public way.
    core = getattr(ch, "_channel", None)
    try:
        core.check_connectivity_state(True)  # type: ignore[union-attr]
        ask = False
    except Exception:
        ask = True
    ch.subscribe(on_change, try_to_connect=ask)
    try:
        done.wait(max(deadline - time.monotonic(), 0.0))
    finally:
        ch.unsubscribe(on_change)
    return states[-1] if states and done.is_set() else None
