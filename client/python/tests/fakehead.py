"""Fake heads for the client's tests: in-process gRPC servers implementing
MegaflowService and SandboxService, scripted to fail before they answer.

Each FakeHead records the requests it got per method. A method's failures
are a queue of (code, message, details) consumed one per call; when the
queue is empty the method answers from its handler. Nothing sleeps: tests
synchronize on the recorded calls and on threading.Event.
"""

from __future__ import annotations

import collections
import threading
from concurrent import futures
from typing import Any, Callable, Deque, Dict, List, Tuple

import grpc
from google.protobuf import any_pb2, duration_pb2

from megaflow._proto import rpc_status_pb2, sandbox_pb2_grpc as sbx_grpc, service_pb2 as svc, \
    service_pb2_grpc as svc_grpc, types_pb2 as pb

Failure = Tuple[grpc.StatusCode, str, List[any_pb2.Any]]


def not_leader(leader_addr: str, leader_id: str = "h2") -> Failure:
    """An UNAVAILABLE with the NOT_LEADER ErrorInfo, as internal/errs sends it."""
    info = rpc_status_pb2.ErrorInfo(reason="NOT_LEADER", domain="megaflow.io",
                                    metadata={"leader_id": leader_id, "leader_addr": leader_addr})
    a = any_pb2.Any(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=info.SerializeToString())
    return grpc.StatusCode.UNAVAILABLE, "head h1 is not the leader; the leader is " + leader_addr, [a]


def rate_limited(seconds: float) -> Failure:
    """A RESOURCE_EXHAUSTED with a RetryInfo, as a head's rate limiter sends it."""
    d = duration_pb2.Duration(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))
    ri = rpc_status_pb2.RetryInfo(retry_delay=d)
    a = any_pb2.Any(type_url="type.googleapis.com/google.rpc.RetryInfo", value=ri.SerializeToString())
    return grpc.StatusCode.RESOURCE_EXHAUSTED, "tenant default: rate limit 10/s exceeded", [a]


def fail(code: grpc.StatusCode, message: str) -> Failure:
    return code, message, []


def with_reason(code: grpc.StatusCode, message: str, reason: str, domain: str = "megaflow.io") -> Failure:
    """A status with an ErrorInfo reason, as internal/errs sends errs.Error.Reason."""
    info = rpc_status_pb2.ErrorInfo(reason=reason, domain=domain)
    a = any_pb2.Any(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=info.SerializeToString())
    return code, message, [a]


class FakeHead(svc_grpc.MegaflowServiceServicer):
    """One fake head on 127.0.0.1:<free port>."""

    def __init__(self, server_credentials: Any = None) -> None:
        self.lock = threading.Lock()
        self.calls: Dict[str, List[Any]] = collections.defaultdict(list)
        # The metadata of each call, by method: {key: value}.
        self.metadata: Dict[str, List[Dict[str, str]]] = collections.defaultdict(list)
        self.failures: Dict[str, Deque[Failure]] = collections.defaultdict(collections.deque)
        self.handlers: Dict[str, Callable[[Any, grpc.ServicerContext], Any]] = {}
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        svc_grpc.add_MegaflowServiceServicer_to_server(self, self.server)
        sbx_grpc.add_SandboxServiceServicer_to_server(self, self.server)
        if server_credentials is not None:
            port = self.server.add_secure_port("127.0.0.1:0", server_credentials)
        else:
            port = self.server.add_insecure_port("127.0.0.1:0")
        self.addr = f"127.0.0.1:{port}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0).wait(5)

    def fail_next(self, method: str, *failures: Failure) -> None:
        with self.lock:
            self.failures[method].extend(failures)

    def count(self, method: str) -> int:
        with self.lock:
            return len(self.calls[method])

    def _enter(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
        with self.lock:
            self.calls[method].append(request)
            self.metadata[method].append({k: v for k, v in context.invocation_metadata()})
            f = self.failures[method].popleft() if self.failures[method] else None
        if f is not None:
            _abort(context, *f)

    def _unary(self, method: str, request: Any, context: grpc.ServicerContext) -> Any:
        self._enter(method, request, context)
        h = self.handlers.get(method)
        if h is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, f"fake head: {method} has no handler")
        return h(request, context)

    def _stream(self, method: str, request: Any, context: grpc.ServicerContext):
        self._enter(method, request, context)
        h = self.handlers.get(method)
        if h is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, f"fake head: {method} has no handler")
        yield from h(request, context)

    def SubmitGraph(self, request, context):
        return self._unary("SubmitGraph", request, context)

    def GetGraph(self, request, context):
        return self._unary("GetGraph", request, context)

    def ListGraphs(self, request, context):
        return self._unary("ListGraphs", request, context)

    def GetTask(self, request, context):
        return self._unary("GetTask", request, context)

    def ListTasks(self, request, context):
        return self._unary("ListTasks", request, context)

    def CancelGraph(self, request, context):
        return self._unary("CancelGraph", request, context)

    def ClusterStatus(self, request, context):
        return self._unary("ClusterStatus", request, context)

    def ArtifactList(self, request, context):
        return self._unary("ArtifactList", request, context)

    def GetLimits(self, request, context):
        """As the others; with no handler set, a leader's answer at index 0
        (what Client.sync_session reads)."""
        if "GetLimits" not in self.handlers:
            self._enter("GetLimits", request, context)
            return svc.GetLimitsResponse(head_id="h1", meta=svc.ReadMeta(index=0, head_id="h1"))
        return self._unary("GetLimits", request, context)

    def Watch(self, request, context):
        return self._stream("Watch", request, context)

    def Logs(self, request, context):
        return self._stream("Logs", request, context)

    def ArtifactGet(self, request, context):
        return self._stream("ArtifactGet", request, context)

    # SandboxService (its method names differ from MegaflowService's).

    def CreateSandbox(self, request, context):
        return self._unary("CreateSandbox", request, context)

    def GetSandbox(self, request, context):
        return self._unary("GetSandbox", request, context)

    def ListSandboxes(self, request, context):
        return self._unary("ListSandboxes", request, context)

    def CloseSandbox(self, request, context):
        return self._unary("CloseSandbox", request, context)

    def Exec(self, request, context):
        return self._stream("Exec", request, context)

    def WriteFile(self, request, context):
        return self._unary("WriteFile", request, context)

    def ReadFile(self, request, context):
        return self._stream("ReadFile", request, context)

    def UploadArchive(self, request_iterator, context):
        return self._unary("UploadArchive", request_iterator, context)

    def DownloadArchive(self, request, context):
        return self._stream("DownloadArchive", request, context)

    def SnapshotSandbox(self, request, context):
        return self._unary("SnapshotSandbox", request, context)

    def ListSnapshots(self, request, context):
        return self._unary("ListSnapshots", request, context)

    def DeleteSnapshot(self, request, context):
        return self._unary("DeleteSnapshot", request, context)

    def SetSandboxTimeout(self, request, context):
        return self._unary("SetSandboxTimeout", request, context)

    def PauseSandbox(self, request, context):
        return self._unary("PauseSandbox", request, context)

    def ResumeSandbox(self, request, context):
        return self._unary("ResumeSandbox", request, context)


def abort(context: grpc.ServicerContext, failure: Failure) -> None:
    """Abort a handler with a Failure (for handlers that fail mid-stream)."""
    _abort(context, *failure)


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str, details: List[any_pb2.Any]) -> None:
    if details:
        st = rpc_status_pb2.Status(code=code.value[0], message=message, details=details)
        context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),))
    context.abort(code, message)


def submitted(request: svc.SubmitGraphRequest, context: Any) -> svc.SubmitGraphResponse:
    """A SubmitGraph handler that accepts any graph at index 7."""
    return svc.SubmitGraphResponse(graph_id=request.graph.id, index=7)


def graph_row(gid: str, state: int, **counts: int) -> svc.GetGraphResponse:
    return svc.GetGraphResponse(graph=pb.Graph(id=gid, state=state, task_count=sum(counts.values()),
                                               counts=pb.StateCounts(**counts)),
                                meta=svc.ReadMeta(index=10))
