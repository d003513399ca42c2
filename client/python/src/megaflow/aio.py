"""The asyncio client: :class:`megaflow.Client`'s API on ``grpc.aio``, for a
trainer that steps many sandboxes (or waits for many graphs) at once from
one process::

    import asyncio, megaflow.aio

    async def main():
        async with megaflow.aio.Client(["127.0.0.1:7070"]) as c:
            async with c.sandbox(image="python:3.12-slim") as sb:
                r = await sb.exec("python -V")
                print(r.exit_code, r.text)
            gid = await c.submit(graph)
            g = await c.wait(gid, timeout=600)

    asyncio.run(main())

Every method is the blocking client's, awaited; iterators (``watch``,
``tasks``, ``list_graphs``, ``stream_logs``, ``Sandbox.exec_stream``) are
async iterators. Failover, retries, deadlines, the errors raised and the
rule that an exec, a file call, a directory copy or a snapshot is never
sent twice are the blocking client's: both run the same policy
(:mod:`megaflow._core`, :mod:`megaflow.sandbox`); tars are built, checked
and extracted in a thread.

A client belongs to one event loop: make it (or at least first use it) in
the loop that runs its calls. Its connections open on first use.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path
from typing import (Any, AsyncIterator, Awaitable, Callable, Dict, Generator, List, Mapping, Optional, Sequence,
                    TextIO, Tuple, TypeVar, Union)

import grpc
import grpc.aio

from . import _archive, _core, _token
from . import sandbox as _sbx
from ._archive import Source
from ._core import Cursor, TaskResult, check_attempt, check_id, check_task_id
from ._proto import sandbox_pb2 as sbx
from ._proto import sandbox_pb2_grpc as sbx_grpc
from ._proto import service_pb2 as svc
from ._proto import service_pb2_grpc as svc_grpc
from ._proto import types_pb2 as pb
from .errors import ChecksumMismatch, DeadlineExceeded, MegaflowError, OutOfRange, from_rpc_error
from .graph import Graph
from .sandbox import Data, ExecChunk, ExecResult, SandboxInfo, Seconds, SnapshotInfo

__all__ = ["Client", "Sandbox"]

_T = TypeVar("_T")


class Client:
    """An asyncio connection to a MegaFlow head cluster.

    Args:
        heads, tenant, timeout, backoff, credentials, tls_ca, tls_cert,
            tls_key, token, options: as :class:`megaflow.Client`.

    Raises:
        InvalidArgument: no head address given, or a malformed one.

    Use it as an async context manager, or ``await client.close()``.
    """

    def __init__(self, heads: Optional[Sequence[str]] = None, *, tenant: Optional[str] = None,
                 timeout: float = 30.0, backoff: Tuple[float, float] = (0.05, 2.0),
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 token: Optional[str] = None, options: Sequence[Tuple[str, Any]] = ()) -> None:
        self._core = _core.Core(heads, tenant, timeout, backoff)
        self._credentials, self._options = _token.tls_credentials(credentials, tls_ca, tls_cert, tls_key, options)
        self._interceptors = _token.aio_interceptors(_token.resolve(token))
        self._channels: Dict[str, grpc.aio.Channel] = {}
        self._stubs: Dict[str, svc_grpc.MegaflowServiceStub] = {}
        self._sbx_stubs: Dict[str, sbx_grpc.SandboxServiceStub] = {}

    @property
    def tenant(self) -> str:
        """The client's tenant ("" for the head's default)."""
        return self._core.tenant

    @property
    def timeout(self) -> float:
        """The default deadline of each call, in seconds."""
        return self._core.timeout

    @property
    def heads(self) -> List[str]:
        """The head addresses the client knows, the one it calls now first."""
        return self._core.heads

    # -- connection management -------------------------------------------

    def _channel(self, addr: str) -> Tuple[grpc.aio.Channel, Any, Any]:
        if self._core.closed:
            raise MegaflowError("megaflow: the client is closed")
        ch = self._channels.get(addr)
        if ch is None:
            if self._credentials is not None:
                ch = grpc.aio.secure_channel(addr, self._credentials, options=self._options,
                                             interceptors=self._interceptors or None)
            else:
                ch = grpc.aio.insecure_channel(addr, options=self._options, interceptors=self._interceptors or None)
            self._channels[addr] = ch
            self._stubs[addr] = svc_grpc.MegaflowServiceStub(ch)
            self._sbx_stubs[addr] = sbx_grpc.SandboxServiceStub(ch)
        return ch, self._stubs[addr], self._sbx_stubs[addr]

    async def close(self) -> None:
        """Close the connections to every head (calls in flight are
        cancelled); later calls raise :class:`MegaflowError` ("the client is
        closed")."""
        self._core.close()
        chans = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        self._sbx_stubs.clear()
        for ch in chans:
            await ch.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _pick(self, sandbox: bool = False) -> Tuple[str, Any]:
        addr = self._core.pick()
        _, stub, sbx_stub = self._channel(addr)
        return addr, (sbx_stub if sandbox else stub)

    async def _connect(self, deadline: float, what: str) -> Tuple[str, sbx_grpc.SandboxServiceStub]:
        """As :meth:`megaflow.Client._connect`: a head whose connection is
        up, for a call that must not be sent twice; nothing is sent here."""
        delay = self._core.backoff[0]
        last = "none"
        while True:
            addr = self._core.pick()
            ch, _, stub = self._channel(addr)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded(f"megaflow: {what}: deadline passed before a head accepted a connection "
                                       f"(last: {last}); nothing was sent")
            state = await _wait_connected(ch, min(remaining, _sbx._CONNECT_TRY_S))
            if state == grpc.ChannelConnectivity.READY:
                return addr, stub
            last = f"head {addr} is {state.name if state else 'not answering'}"
            self._core.rotate(addr)
            pause = min(_core.jitter(delay), deadline - time.monotonic())
            if pause > 0:
                await asyncio.sleep(pause)
            delay = min(2 * delay, self._core.backoff[1])

    def _rotate(self, frm: str) -> None:
        self._core.rotate(frm)

    def _observe(self, index: int) -> None:
        self._core.observe(index)

    def _read(self) -> svc.ReadOptions:
        return self._core.read()

    def _deadline(self, timeout: Optional[float]) -> float:
        return self._core.deadline(timeout)

    async def _call(self, method: str, request: Any, timeout: Optional[float] = None,
                    run: Optional[Callable[[Any, Any, float], Awaitable[_T]]] = None, sandbox: bool = False) -> Any:
        """As :meth:`megaflow.Client._call`, awaiting (run is a coroutine
        function)."""
        r = _core.Retry(self._core, method, self._core.deadline(timeout))
        while True:
            addr, stub = self._pick(sandbox)
            remaining = r.remaining()
            fn = getattr(stub, method)
            try:
                if run is not None:
                    return await run(fn, request, remaining)
                return await fn(request, timeout=remaining)
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            pause = r.failed(addr, err)
            if pause > 0:
                await asyncio.sleep(pause)

    # -- graphs ------------------------------------------------------------

    async def submit(self, graph: Union[Graph, pb.GraphSpec], *, timeout: Optional[float] = None) -> str:
        """As :meth:`megaflow.Client.submit`: validate, then commit; returns
        the graph id (idempotent by id)."""
        res = await self._call("SubmitGraph", _core.submit_request(graph, self.tenant), timeout)
        self._observe(res.index)
        return res.graph_id

    async def get_graph(self, graph_id: str, *, timeout: Optional[float] = None) -> pb.Graph:
        """As :meth:`megaflow.Client.get_graph`."""
        return (await self._get_graph(graph_id, timeout))[0]

    async def _get_graph(self, graph_id: str, timeout: Optional[float]) -> Tuple[pb.Graph, svc.ReadMeta]:
        check_id("graph_id", graph_id)
        res = await self._call("GetGraph", svc.GetGraphRequest(graph_id=graph_id, read=self._read()), timeout)
        self._observe(res.meta.index)
        return res.graph, res.meta

    async def metrics(self, graph_id: str, *, timeout: Optional[float] = None) -> pb.GraphMetrics:
        """As :meth:`megaflow.Client.metrics`."""
        return (await self.get_graph(graph_id, timeout=timeout)).metrics

    async def list_graphs(self, *, tenant: Optional[str] = None, state: int = 0,
                          include_archived: bool = False,
                          timeout: Optional[float] = None) -> AsyncIterator[pb.Graph]:
        """As :meth:`megaflow.Client.list_graphs`, an async iterator."""
        token = ""
        while True:
            res = await self._call("ListGraphs", svc.ListGraphsRequest(
                tenant=self.tenant if tenant is None else tenant, state=state, page_token=token,
                read=self._read(), include_archived=include_archived), timeout)
            self._observe(res.meta.index)
            for g in res.graphs:
                yield g
            token = res.next_page_token
            if not token:
                return

    async def cancel_graph(self, graph_id: str, reason: str = "", *, timeout: Optional[float] = None) -> int:
        """As :meth:`megaflow.Client.cancel_graph`."""
        check_id("graph_id", graph_id)
        res = await self._call("CancelGraph", svc.CancelGraphRequest(graph_id=graph_id, reason=reason), timeout)
        self._observe(res.index)
        return res.cancelled

    async def delete_graph(self, graph_id: str, *, timeout: Optional[float] = None) -> None:
        """As :meth:`megaflow.Client.delete_graph`."""
        check_id("graph_id", graph_id)
        res = await self._call("DeleteGraph", svc.DeleteGraphRequest(graph_id=graph_id), timeout)
        self._observe(res.index)

    async def cluster_status(self, *, timeout: Optional[float] = None) -> svc.ClusterStatusResponse:
        """As :meth:`megaflow.Client.cluster_status`."""
        return await self._call("ClusterStatus", svc.ClusterStatusRequest(), timeout)

    # -- tasks -------------------------------------------------------------

    async def get_task(self, task_id: str, *, timeout: Optional[float] = None) -> pb.Task:
        """As :meth:`megaflow.Client.get_task`."""
        check_task_id(task_id)
        res = await self._call("GetTask", svc.GetTaskRequest(task_id=task_id, read=self._read()), timeout)
        self._observe(res.meta.index)
        return res.task

    async def tasks(self, graph_id: str, *, state: int = 0,
                    timeout: Optional[float] = None) -> AsyncIterator[pb.Task]:
        """As :meth:`megaflow.Client.tasks`, an async iterator."""
        check_id("graph_id", graph_id)
        token = ""
        while True:
            res = await self._call("ListTasks", svc.ListTasksRequest(graph_id=graph_id, state=state,
                                                                     page_token=token, omit_spec=True,
                                                                     read=self._read()), timeout)
            self._observe(res.meta.index)
            for t in res.tasks:
                yield t
            token = res.next_page_token
            if not token:
                return

    async def results(self, graph_id: str, *, timeout: Optional[float] = None) -> Dict[str, TaskResult]:
        """As :meth:`megaflow.Client.results`: task name -> TaskResult."""
        return {t.id.split("/", 1)[-1]: _core.task_result(t) async for t in self.tasks(graph_id, timeout=timeout)}

    async def cancel_task(self, task_id: str, reason: str = "", *, timeout: Optional[float] = None) -> int:
        """As :meth:`megaflow.Client.cancel_task`."""
        check_task_id(task_id)
        res = await self._call("CancelTask", svc.CancelTaskRequest(task_id=task_id, reason=reason), timeout)
        self._observe(res.index)
        return res.cancelled

    # -- events ------------------------------------------------------------

    def watch(self, graph_id: Optional[str] = None, *, after: Optional[Tuple[int, int]] = None,
              from_now: bool = False, timeout: Optional[float] = None) -> AsyncIterator[pb.Event]:
        """As :meth:`megaflow.Client.watch`, an async iterator: committed
        events in commit order, resumed at another head without gap or
        duplicate. Arguments are checked at the call.

        Raises:
            InvalidArgument: a bad graph id, cursor or timeout (at once).
            OutOfRange, NotFound, DeadlineExceeded: from the iterator.
        """
        cur = _core.watch_cursor(graph_id, after)
        deadline = None if timeout is None else self._deadline(timeout)
        return self._watch(graph_id, cur, from_now, deadline)

    async def _watch(self, graph_id: Optional[str], cur: Cursor, from_now: bool,
                     deadline: Optional[float]) -> AsyncIterator[pb.Event]:
        r = _core.StreamRetry(self._core, "watch", deadline, any_error=True)
        while True:
            addr, stub = self._pick()
            call = stub.Watch(svc.WatchRequest(after_index=cur.index, after_seq=cur.seq, graph_id=graph_id or "",
                                               from_now=from_now), timeout=r.remaining())
            err: Optional[MegaflowError] = None  # None: the head ended the stream (shutting down)
            try:
                async for res in call:
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
                call.cancel()
            await asyncio.sleep(r.failed(addr, err))

    async def wait(self, graph_id: str, *, timeout: Optional[float] = None,
                   progress: Optional[bool] = None, out: Optional[TextIO] = None) -> pb.Graph:
        """As :meth:`megaflow.Client.wait`: the terminal graph; reads it,
        then watches its events (30 s windows) until one says it is
        terminal.

        Raises:
            NotFound: no such graph.
            DeadlineExceeded: the timeout passed first.
        """
        check_id("graph_id", graph_id)
        prog = _core.Progress(out, progress)
        deadline = None if timeout is None else self._deadline(timeout)
        while True:
            left = _core.wait_left(deadline, graph_id, timeout)
            g, meta = await self._get_graph(graph_id, min(self.timeout, left) if left else None)
            if g.state in _core.TERMINAL_GRAPH:
                prog.report(g, final=True)
                return g
            prog.report(g)
            window = min(_core.WAIT_WINDOW_S, left) if left else _core.WAIT_WINDOW_S
            events = self.watch(graph_id, after=Cursor(meta.index, _core.MAX_SEQ), timeout=window)
            try:
                async for ev in events:
                    if not ev.task_id and ev.graph_state in _core.TERMINAL_GRAPH:
                        break
                    if prog.due():
                        left = _core.wait_left(deadline, graph_id, timeout)
                        prog.report(await self.get_graph(graph_id, timeout=min(self.timeout, left or self.timeout)))
            except (DeadlineExceeded, OutOfRange):
                pass  # window over, or fell behind the history: read again
            finally:
                await events.aclose()  # type: ignore[attr-defined]

    # -- logs and artifacts --------------------------------------------------

    def stream_logs(self, task_id: str, *, attempt: int = 0, follow: bool = False,
                    timeout: Optional[float] = None) -> AsyncIterator[bytes]:
        """As :meth:`megaflow.Client.stream_logs`, an async iterator of
        chunks; arguments are checked at the call."""
        check_task_id(task_id)
        check_attempt(attempt)
        deadline = None if (timeout is None and follow) else self._deadline(timeout)
        return self._logs(task_id, attempt, follow, deadline)

    async def _logs(self, task_id: str, number: int, follow: bool, deadline: Optional[float]) -> AsyncIterator[bytes]:
        r = _core.StreamRetry(self._core, f"logs of {task_id}", deadline, any_error=False)
        after = 0
        while True:
            addr, stub = self._pick()
            call = stub.Logs(svc.LogsRequest(task_id=task_id, attempt=number, follow=follow, after_chunk=after,
                                             read=self._read()), timeout=r.remaining())
            try:
                async for res in call:
                    r.progressed()
                    number, after = res.attempt, res.chunk
                    yield res.data
                return
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            finally:
                call.cancel()
            await asyncio.sleep(r.failed(addr, err))

    async def logs(self, task_id: str, *, attempt: int = 0, timeout: Optional[float] = None) -> str:
        """As :meth:`megaflow.Client.logs`: the attempt's log as text."""
        chunks = [c async for c in self.stream_logs(task_id, attempt=attempt, timeout=timeout)]
        return b"".join(chunks).decode("utf-8", "replace")

    async def artifacts(self, task_id: str, *, attempt: int = 0,
                        timeout: Optional[float] = None) -> svc.ArtifactListResponse:
        """As :meth:`megaflow.Client.artifacts`: the attempt's manifest."""
        check_task_id(task_id)
        check_attempt(attempt)
        return await self._call("ArtifactList", svc.ArtifactListRequest(task_id=task_id, attempt=attempt,
                                                                        read=self._read()), timeout)

    async def download(self, task_id: str, dest: Union[str, os.PathLike], *, attempt: int = 0,
                       paths: Optional[Sequence[str]] = None, timeout: Optional[float] = None) -> List[Path]:
        """As :meth:`megaflow.Client.download`: the files written, each
        checked against its SHA-256 (:class:`ChecksumMismatch` leaves
        nothing at its path). Files are written from the event loop's
        thread, chunk by chunk."""
        manifest = await self.artifacts(task_id, attempt=attempt, timeout=timeout)
        sums = {f.path: f.sha256 for f in manifest.files}
        wanted = _core.wanted_artifacts(task_id, manifest, paths)
        root = Path(dest)
        root.mkdir(parents=True, exist_ok=True)
        written = []
        for p in wanted:
            target = _core.artifact_target(root, p)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".part")

            async def fetch(fn: Any, req: Any, remaining: float, tmp: Path = tmp) -> str:
                h = hashlib.sha256()
                with open(tmp, "wb") as f:
                    async for res in fn(req, timeout=remaining):
                        if res.HasField("file"):
                            continue
                        h.update(res.data)
                        f.write(res.data)
                return h.hexdigest()

            try:
                digest = await self._call("ArtifactGet", svc.ArtifactGetRequest(
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
                timeout: Optional[float] = None) -> "_Creating":
        """Create a sandbox as :meth:`megaflow.Client.sandbox` does (same
        arguments, checks, retries and errors). The arguments are checked
        at the call; the sandbox is created when the result is awaited or
        entered::

            sb = await client.sandbox(image="busybox")          # close it yourself
            async with client.sandbox(image="busybox") as sb:   # closed on exit
                r = await sb.exec("echo hi")
            fork = await client.sandbox(from_snapshot=snap.id)  # from a snapshot

        Raises:
            InvalidArgument: a bad argument (at once, before any RPC).
            SandboxEnded, ResourceExhausted, DeadlineExceeded: when awaited.
        """
        sid, req, wait_s, call_timeout = _sbx.create_request(
            self, image=image, cpu_millis=cpu_millis, cpu=cpu, memory=memory, env=env, working_dir=working_dir,
            network=network, labels=labels, lifetime=lifetime, idle_timeout=idle_timeout, wait_ready=wait_ready,
            id=id, tenant=tenant, from_snapshot=from_snapshot, timeout=timeout)
        return _Creating(self, sid, req, wait_s, call_timeout)

    async def get_sandbox(self, sandbox_id: str, *, timeout: Optional[float] = None) -> "Sandbox":
        """As :meth:`megaflow.Client.get_sandbox`: a handle with its state
        read now, after :meth:`sync_session`."""
        s = Sandbox(self, sandbox_id)  # checks the id before any RPC
        await self.sync_session(timeout=timeout)
        await s.refresh(timeout=timeout)
        return s

    async def sync_session(self, *, timeout: Optional[float] = None) -> None:
        """As :meth:`megaflow.Client.sync_session`."""
        res = await self._call("GetLimits", svc.GetLimitsRequest(read=svc.ReadOptions(require_leader=True)), timeout)
        self._observe(res.meta.index)

    async def list_sandboxes(self, all: bool = False, *, tenant: Optional[str] = None,
                             timeout: Optional[float] = None) -> List[SandboxInfo]:
        """As :meth:`megaflow.Client.list_sandboxes`."""
        out: List[SandboxInfo] = []
        token = ""
        while True:  # every page: the heads answer at most 1000 per call
            res = await self._call("ListSandboxes", _sbx.list_request(self, tenant, all, token), timeout, sandbox=True)
            out.extend(res.sandboxes)
            token = res.next_page_token
            if not token:
                return out

    async def list_snapshots(self, *, tenant: Optional[str] = None,
                             timeout: Optional[float] = None) -> List[SnapshotInfo]:
        """As :meth:`megaflow.Client.list_snapshots`: oldest first; tenant
        None the client's, "" every tenant's."""
        res = await self._call("ListSnapshots", _sbx.list_snapshots_request(self, tenant), timeout, sandbox=True)
        return list(res.snapshots)

    async def delete_snapshot(self, snapshot: Union[str, SnapshotInfo], *, timeout: Optional[float] = None) -> None:
        """As :meth:`megaflow.Client.delete_snapshot`: its image, then its
        row; retried.

        Raises:
            InvalidArgument: not a snapshot id (at once).
            SnapshotNotFound, SnapshotInUse, DeadlineExceeded: when awaited.
        """
        res = await self._call("DeleteSnapshot", _sbx.delete_snapshot_request(self, snapshot), timeout, sandbox=True)
        self._observe(res.index)


class _Creating:
    """What :meth:`Client.sandbox` returns: await it for the
    :class:`Sandbox`, or use it with ``async with`` to close the sandbox on
    exit. Awaiting it twice creates nothing more (the id is fixed)."""

    def __init__(self, client: Client, sid: str, req: sbx.CreateSandboxRequest, wait_s: float,
                 call_timeout: float) -> None:
        self._client = client
        self.id = sid
        self._req = req
        self._wait_s = wait_s
        self._timeout = call_timeout
        self._sandbox: Optional[Sandbox] = None

    async def _create(self) -> "Sandbox":
        if self._sandbox is None:
            res = await self._client._call("CreateSandbox", self._req, self._timeout, sandbox=True)
            self._sandbox = _sbx.created(self._client, Sandbox(self._client, self.id, res.sandbox), self._wait_s)
        return self._sandbox

    def __await__(self) -> Generator[Any, None, "Sandbox"]:
        return self._create().__await__()

    async def __aenter__(self) -> "Sandbox":
        return await self._create()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._sandbox is not None
        await self._sandbox.__aexit__(exc_type, exc, tb)


class Sandbox(_sbx.SandboxBase):
    """An asyncio handle on one sandbox, from :meth:`Client.sandbox` or
    :meth:`Client.get_sandbox`; :class:`megaflow.Sandbox`'s methods,
    awaited. Several execs may run at once (``asyncio.gather``). As an
    async context manager it closes the sandbox on exit.

    Attributes:
        id: the sandbox's id, "sbx-...".
    """

    def __init__(self, client: Client, sandbox_id: str, info: Optional[SandboxInfo] = None) -> None:
        """A handle without any RPC (prefer :meth:`Client.get_sandbox`).

        Raises:
            InvalidArgument: sandbox_id is not "sbx-" then [a-z0-9].
        """
        super().__init__(client, sandbox_id, info)

    async def refresh(self, *, timeout: Optional[float] = None) -> SandboxInfo:
        """As :meth:`megaflow.Sandbox.refresh`: read the state again."""
        res = await self._client._call("GetSandbox", sbx.GetSandboxRequest(id=self.id, min_index=self._index()),
                                       timeout, sandbox=True)
        self._client._observe(res.sandbox.index)
        self._set(res.sandbox)
        return res.sandbox

    async def wait_ready(self, timeout: Seconds = 120.0) -> SandboxInfo:
        """As :meth:`megaflow.Sandbox.wait_ready`: poll until READY (or PAUSED).

        Raises:
            SandboxEnded: it ended instead.
            DeadlineExceeded: still not READY after timeout.
        """
        t = self._wait_ready_timeout(timeout)
        deadline = time.monotonic() + t
        delay = 0.1
        while True:
            left = deadline - time.monotonic()
            info = await self.refresh(timeout=max(min(self._client.timeout, left), 0.001))
            if info.state in _sbx._STARTED:
                return info
            if info.state not in _sbx._LIVE:
                raise _sbx._ended(self, info)
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(f"megaflow: sandbox {self.id} is still {_sbx.sandbox_state_name(info.state)} "
                                       f"after {t:g} s ({info.reason or 'waiting for a worker'})")
            await asyncio.sleep(min(delay, left))
            delay = min(2 * delay, 1.0)

    async def close(self, *, timeout: Optional[float] = None) -> None:
        """As :meth:`megaflow.Sandbox.close`: idempotent, retried."""
        if self._closed_now():
            return
        res = await self._client._call("CloseSandbox", sbx.CloseSandboxRequest(id=self.id, min_index=self._index()),
                                       timeout, sandbox=True)
        self._client._observe(res.sandbox.index)
        self._set(res.sandbox)
        self._mark_closed()

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self.close()
            return
        try:  # the body's exception matters more than a failed close
            await self.close()
        except MegaflowError:
            pass

    async def exec(self, cmd: Union[Sequence[str], str], *, timeout: Optional[Seconds] = None,
                   env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                   stdin: Optional[Data] = None) -> ExecResult:
        """As :meth:`megaflow.Sandbox.exec`: run a command, return its
        :class:`ExecResult`. Never sent twice."""
        return _sbx._collect([item async for item in self.exec_stream(cmd, timeout=timeout, env=env, cwd=cwd,
                                                                        stdin=stdin)])

    def exec_stream(self, cmd: Union[Sequence[str], str], *, timeout: Optional[Seconds] = None,
                    env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                    stdin: Optional[Data] = None) -> AsyncIterator[ExecChunk]:
        """As :meth:`megaflow.Sandbox.exec_stream`, an async iterator:
        ``("stdout", bytes)`` / ``("stderr", bytes)`` chunks, then the
        :class:`ExecResult`. Arguments are checked at the call; closing the
        iterator early (``aclose()``, or leaving ``async for``) cancels the
        exec.

        Raises:
            InvalidArgument: at once; the others from the iterator.
        """
        return self._exec(*self._exec_request(cmd, timeout, env, cwd, stdin))

    async def _exec(self, req: sbx.SandboxExecRequest, rpc_timeout: float) -> AsyncIterator[ExecChunk]:
        deadline = time.monotonic() + rpc_timeout
        addr, stub = await self._client._connect(deadline, f"exec in {self.id}")
        req.min_index = self._index()
        call = stub.Exec(req, timeout=max(deadline - time.monotonic(), 0.001))
        try:
            async for m in call:
                for item in _sbx._exec_chunks(m):
                    yield item
                    if isinstance(item, ExecResult):
                        return
        except grpc.RpcError as e:
            raise self._sent_error(addr, "exec", e) from None
        finally:
            call.cancel()
        raise self._no_exit(addr)

    async def write_file(self, path: str, data: Data, mode: int = 0o644, *,
                         timeout: Optional[float] = None) -> None:
        """As :meth:`megaflow.Sandbox.write_file`. Never sent twice."""
        req = self._write_request(path, data, mode)
        deadline = self._client._deadline(timeout)
        addr, stub = await self._client._connect(deadline, f"write {path} in {self.id}")
        req.min_index = self._index()
        try:
            await stub.WriteFile(req, timeout=max(deadline - time.monotonic(), 0.001))
        except grpc.RpcError as e:
            raise self._sent_error(addr, f"write {path}", e) from None

    async def read_file(self, path: str, *, max_bytes: int = 0, timeout: Optional[float] = None) -> bytes:
        """As :meth:`megaflow.Sandbox.read_file`. Never sent twice."""
        req = self._read_request(path, max_bytes)
        deadline = self._client._deadline(timeout)
        addr, stub = await self._client._connect(deadline, f"read {path} in {self.id}")
        req.min_index = self._index()
        call = stub.ReadFile(req, timeout=max(deadline - time.monotonic(), 0.001))
        chunks: List[bytes] = []
        try:
            async for m in call:
                chunks.append(m.data)
        except grpc.RpcError as e:
            raise self._sent_error(addr, f"read {path}", e) from None
        finally:
            call.cancel()
        return b"".join(chunks)

    async def upload(self, source: Source, remote_dir: str, *, timeout: Optional[float] = None) -> int:
        """As :meth:`megaflow.Sandbox.upload`: a local directory, a file or
        a tar stream into remote_dir; the bytes of tar sent. The tar is
        built and checked in a thread before anything is sent. Never sent
        twice."""
        spool = await asyncio.to_thread(self._upload_spool, source, remote_dir)
        try:
            deadline = self._client._deadline(timeout)
            addr, stub = await self._client._connect(deadline, f"upload into {remote_dir} of {self.id}")
            try:
                await stub.UploadArchive(self._upload_chunks(spool, remote_dir),
                                         timeout=max(deadline - time.monotonic(), 0.001))
            except grpc.RpcError as e:
                raise self._sent_error(addr, f"upload into {remote_dir}", e) from None
            return spool.size
        finally:
            spool.close()

    async def _upload_chunks(self, spool: _archive.Spool,
                             remote_dir: str) -> AsyncIterator[sbx.SandboxUploadArchiveRequest]:
        """The upload's messages, each chunk read in a thread."""
        it = self._upload_messages(spool, remote_dir)
        while True:
            m = await asyncio.to_thread(next, it, None)
            if m is None:
                return
            yield m

    async def download(self, remote_path: str, local_dir: Union[str, "os.PathLike[str]"], *, max_bytes: int = 0,
                       timeout: Optional[float] = None) -> int:
        """As :meth:`megaflow.Sandbox.download`: remote_path into local_dir;
        the bytes of tar received. Every entry is checked before anything
        is written (in a thread): none lands outside local_dir. Never sent
        twice."""
        req, dest, what = self._download_request(remote_path, local_dir, max_bytes)
        deadline = self._client._deadline(timeout)
        addr, stub = await self._client._connect(deadline, f"download {remote_path} from {self.id}")
        req.min_index = self._index()
        with _archive.Receiver(what, req.max_bytes or _sbx.MAX_ARCHIVE) as recv:
            call = stub.DownloadArchive(req, timeout=max(deadline - time.monotonic(), 0.001))
            try:
                async for m in call:
                    recv.add(m.data)
            except grpc.RpcError as e:
                raise self._sent_error(addr, f"download {remote_path}", e) from None
            finally:
                call.cancel()
            await asyncio.to_thread(_archive.extract, recv.spool(), dest, _archive.base_name(remote_path), what)
            return recv.n

    async def snapshot(self, name: str = "", *, timeout: Optional[float] = None) -> SnapshotInfo:
        """As :meth:`megaflow.Sandbox.snapshot`: commit its files into a
        snapshot. Never sent twice (a NOT_LEADER answer is followed)."""
        req = self._snapshot_request(name)
        deadline = self._client._deadline(timeout)
        r = _core.Retry(self._client._core, "SnapshotSandbox", deadline)
        while True:
            addr, stub = await self._client._connect(deadline, f"snapshot of {self.id}")
            req.min_index = self._index()
            try:
                res = await stub.SnapshotSandbox(req, timeout=max(deadline - time.monotonic(), 0.001))
                break
            except grpc.RpcError as e:
                pause = self._snapshot_failed(r, addr, e)
            if pause > 0:
                await asyncio.sleep(pause)
        self._client._observe(res.index)
        return res.snapshot

    async def set_timeout(self, seconds: Seconds, *, timeout: Optional[float] = None) -> SandboxInfo:
        """As :meth:`megaflow.Sandbox.set_timeout`: end it this long from
        now (1 s to 7 days, rounded up); retried. Returns the new state."""
        req = self._timeout_request(seconds)
        req.min_index = self._index()
        return self._set_timeout_done(await self._client._call("SetSandboxTimeout", req, timeout, sandbox=True))

    async def pause(self, *, timeout: Optional[float] = None) -> SandboxInfo:
        """As :meth:`megaflow.Sandbox.pause`: freeze it, PAUSED until
        :meth:`resume` (its calls raise SandboxPaused meanwhile); retried.
        Returns the new state."""
        method, req = self._pause_request(True)
        return self._set_timeout_done(await self._client._call(method, req, timeout, sandbox=True))

    async def resume(self, *, timeout: Optional[float] = None) -> SandboxInfo:
        """As :meth:`megaflow.Sandbox.resume`: READY again, its idle timeout
        counting afresh; retried. Returns the new state."""
        method, req = self._pause_request(False)
        return self._set_timeout_done(await self._client._call(method, req, timeout, sandbox=True))


async def _wait_connected(ch: grpc.aio.Channel, timeout: float) -> Optional[grpc.ChannelConnectivity]:
    """Wait up to timeout for a channel to be READY, asking it to connect,
    or for a connection attempt made after the call to fail; return the
    state reached (None: no answer in time)."""
    deadline = time.monotonic() + timeout
    state = ch.get_state(try_to_connect=True)
    changed = False
    while True:
        if state in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.SHUTDOWN):
            return state
        # A TRANSIENT_FAILURE seen first may be an old attempt's: wait for the next.
        if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE and changed:
            return state
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            await asyncio.wait_for(ch.wait_for_state_change(state), left)
        except asyncio.TimeoutError:
            return None
        changed = True
        state = ch.get_state(try_to_connect=True)
