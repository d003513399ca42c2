"""MegaFlow's Python SDK: submit rollout graphs to a MegaFlow cluster and
collect their results.

    import megaflow

    g = megaflow.Graph("step-42")
    gen = g.task("generate", ["python", "gen.py"], image="env:v1", cpu="500m", memory="1Gi")
    g.task("score", ["python", "score.py"], image="env:v1", after=[gen], type="eval", retries=2)
    with megaflow.Client(["127.0.0.1:7070"]) as c:
        gid = c.submit(g)
        graph = c.wait(gid, timeout=600)
        print(c.results(gid)["score"].result, graph.metrics.mean)

Sandboxes (long-lived containers an agent runs commands in) come from
``Client.sandbox(image=...)``; see :mod:`megaflow.sandbox`. The same API on
asyncio is :mod:`megaflow.aio` (``import megaflow.aio``), and
:mod:`megaflow.env` (the same classes as :mod:`megaflow.gym`) wraps a
sandbox in a Gymnasium-style environment.

The messages returned (``Graph``, ``Task``, ``Event``...) are the protobuf
messages of proto/megaflow/v1, re-exported here; docs/python.md is the guide.
"""

from ._proto.service_pb2 import ArtifactListResponse, ClusterStatusResponse, ReadMeta
from ._proto.types_pb2 import (Attempt, Event, GraphMetrics, GraphSpec, GraphState, ReasonCode, Resources,
                               ServiceSpec, StateCounts, TaskSpec, TaskState)
from ._proto.types_pb2 import Graph as GraphRow
from ._proto.types_pb2 import Task as TaskRow
from ._proto.types_pb2 import (GRAPH_STATE_CANCELLED, GRAPH_STATE_FAILED, GRAPH_STATE_RUNNING,
                               GRAPH_STATE_SUCCEEDED, TASK_STATE_ASSIGNED, TASK_STATE_CANCELLED,
                               TASK_STATE_FAILED, TASK_STATE_PENDING, TASK_STATE_QUEUED, TASK_STATE_RUNNING,
                               TASK_STATE_SUCCEEDED, TASK_STATE_TIMED_OUT)
from .client import Client, Cursor, EnvHeads, TaskResult, graph_state_name, new_graph_id, task_state_name
from .errors import (AlreadyExists, Cancelled, ChecksumMismatch, DeadlineExceeded, FailedPrecondition, FileNotFound,
                     FileTooLarge, Internal, InvalidArgument, InvalidGraph, MegaflowError, NotFound, NotLeader,
                     OutOfRange, PermissionDenied, ResourceExhausted, RuntimeUnavailable, SandboxClosed, SandboxEnded,
                     SandboxBusy, SandboxExpired, SandboxFailed, SandboxLost, SandboxNotFound, SandboxNotReady,
                     SandboxPaused, SnapshotInUse, SnapshotNotFound, SnapshotQuotaExceeded, SnapshotWorkerDown,
                     Unauthenticated, Unavailable, WorkerUnreachable)
from .graph import Graph, Service, Task, parse_cpu, parse_memory, parse_seconds
from .sandbox import ExecResult, Sandbox, SandboxInfo, SnapshotInfo, new_sandbox_id, sandbox_state_name
from ._proto.sandbox_pb2 import (SANDBOX_STATE_CLOSED, SANDBOX_STATE_EXPIRED, SANDBOX_STATE_FAILED,
                                 SANDBOX_STATE_LOST, SANDBOX_STATE_PAUSED, SANDBOX_STATE_PENDING,
                                 SANDBOX_STATE_READY, SANDBOX_STATE_STARTING, SandboxState)

__version__ = "0.1.0"

__all__ = [
    "Client", "Cursor", "EnvHeads", "TaskResult", "Graph", "Task", "Service",
    "parse_cpu", "parse_memory", "parse_seconds", "new_graph_id", "task_state_name", "graph_state_name",
    "MegaflowError", "InvalidArgument", "InvalidGraph", "NotFound", "AlreadyExists", "FailedPrecondition",
    "Unavailable", "NotLeader", "ResourceExhausted", "OutOfRange", "Internal", "PermissionDenied", "Unauthenticated",
    "DeadlineExceeded", "Cancelled", "ChecksumMismatch",
    "Sandbox", "ExecResult", "SandboxInfo", "SnapshotInfo", "SandboxState", "new_sandbox_id", "sandbox_state_name",
    "SandboxNotFound", "SandboxNotReady", "SandboxEnded", "SandboxClosed", "SandboxExpired", "SandboxLost",
    "SandboxFailed", "WorkerUnreachable", "RuntimeUnavailable", "FileNotFound", "FileTooLarge",
    "SnapshotNotFound", "SnapshotWorkerDown", "SnapshotInUse", "SnapshotQuotaExceeded", "SandboxPaused", "SandboxBusy",
    "SANDBOX_STATE_PENDING", "SANDBOX_STATE_STARTING", "SANDBOX_STATE_READY", "SANDBOX_STATE_CLOSED",
    "SANDBOX_STATE_EXPIRED", "SANDBOX_STATE_LOST", "SANDBOX_STATE_FAILED", "SANDBOX_STATE_PAUSED",
    "GraphSpec", "TaskSpec", "Resources", "ServiceSpec", "GraphRow", "TaskRow", "Attempt", "Event",
    "GraphMetrics", "StateCounts", "GraphState", "TaskState", "ReasonCode", "ReadMeta",
    "ClusterStatusResponse", "ArtifactListResponse",
    "GRAPH_STATE_RUNNING", "GRAPH_STATE_SUCCEEDED", "GRAPH_STATE_FAILED", "GRAPH_STATE_CANCELLED",
    "TASK_STATE_PENDING", "TASK_STATE_QUEUED", "TASK_STATE_ASSIGNED", "TASK_STATE_RUNNING",
    "TASK_STATE_SUCCEEDED", "TASK_STATE_FAILED", "TASK_STATE_CANCELLED", "TASK_STATE_TIMED_OUT",
]
