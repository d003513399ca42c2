"""MegaFlow's errors as Python exceptions.

Every error the SDK raises is a :class:`MegaflowError`. The heads classify
their errors (Go's ``internal/errs``) and send each class as one gRPC status
code; :func:`from_rpc_error` turns a status back into the class's exception,
so callers catch classes, never match messages::

    try:
        client.submit(graph)
    except megaflow.AlreadyExists:
        ...  # the id holds a different graph

The classes and their gRPC codes:

==========================  ===========================================
exception                   gRPC code (and detail)
==========================  ===========================================
:class:`InvalidArgument`    INVALID_ARGUMENT (also a ``ValueError``)
:class:`InvalidGraph`       raised by the SDK before any RPC: a bad spec
:class:`NotFound`           NOT_FOUND
:class:`AlreadyExists`      ALREADY_EXISTS
:class:`FailedPrecondition` FAILED_PRECONDITION
:class:`Unavailable`        UNAVAILABLE (retried by the client)
:class:`NotLeader`          UNAVAILABLE with ErrorInfo reason NOT_LEADER
:class:`ResourceExhausted`  RESOURCE_EXHAUSTED (rate limit: retry_after)
:class:`OutOfRange`         OUT_OF_RANGE (a watch cursor too old)
:class:`Internal`           INTERNAL
:class:`PermissionDenied`   PERMISSION_DENIED: the token's role or tenant does not allow it
:class:`Unauthenticated`    UNAUTHENTICATED: no token, or one the cluster does not know (a :class:`PermissionDenied`)
:class:`DeadlineExceeded`   DEADLINE_EXCEEDED, or the SDK's own deadline
:class:`Cancelled`          CANCELLED
==========================  ===========================================

Sandbox calls (docs/sandboxes.md) also carry a machine-readable reason in
the status's ErrorInfo (domain megaflow.io); it is kept in
:attr:`MegaflowError.reason` and picks a subclass of the code's class, so
``except megaflow.Unavailable`` still catches :class:`WorkerUnreachable`:

==============================  ======================  =====================
exception                       reason                  subclass of
==============================  ======================  =====================
:class:`SandboxNotFound`        SANDBOX_NOT_FOUND       :class:`NotFound`
:class:`SandboxNotReady`        SANDBOX_NOT_READY       :class:`FailedPrecondition`
:class:`SandboxClosed`          SANDBOX_CLOSED          :class:`SandboxEnded`
:class:`SandboxExpired`         SANDBOX_EXPIRED         :class:`SandboxEnded`
:class:`SandboxLost`            SANDBOX_LOST            :class:`SandboxEnded`
:class:`SandboxFailed`          SANDBOX_FAILED          :class:`SandboxEnded`
:class:`WorkerUnreachable`      WORKER_UNREACHABLE      :class:`Unavailable`
:class:`RuntimeUnavailable`     RUNTIME_UNAVAILABLE     :class:`Unavailable`
:class:`FileNotFound`           FILE_NOT_FOUND          :class:`NotFound`
:class:`FileTooLarge`           FILE_TOO_LARGE          :class:`FailedPrecondition`
:class:`SnapshotNotFound`       SNAPSHOT_NOT_FOUND      :class:`NotFound`
:class:`SnapshotWorkerDown`     SNAPSHOT_WORKER_DOWN    :class:`FailedPrecondition`
:class:`SnapshotInUse`          SNAPSHOT_IN_USE         :class:`FailedPrecondition`
:class:`SnapshotQuotaExceeded`  SNAPSHOT_QUOTA_EXCEEDED :class:`ResourceExhausted`
:class:`SandboxPaused`          SANDBOX_PAUSED          :class:`FailedPrecondition`
:class:`SandboxBusy`            SANDBOX_BUSY            :class:`FailedPrecondition`
==============================  ======================  =====================

:class:`SandboxEnded` is a :class:`FailedPrecondition`: the sandbox is over
and its files and processes are gone; create a new one.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

from ._proto import rpc_status_pb2

__all__ = [
    "MegaflowError",
    "InvalidArgument",
    "InvalidGraph",
    "NotFound",
    "AlreadyExists",
    "FailedPrecondition",
    "Unavailable",
    "NotLeader",
    "ResourceExhausted",
    "OutOfRange",
    "Internal",
    "PermissionDenied",
    "DeadlineExceeded",
    "Cancelled",
    "ChecksumMismatch",
    "SandboxNotFound",
    "SandboxNotReady",
    "SandboxEnded",
    "SandboxClosed",
    "SandboxExpired",
    "SandboxLost",
    "SandboxFailed",
    "WorkerUnreachable",
    "RuntimeUnavailable",
    "FileNotFound",
    "FileTooLarge",
    "SnapshotNotFound",
    "SnapshotWorkerDown",
    "SnapshotInUse",
    "SnapshotQuotaExceeded",
    "SandboxPaused",
    "SandboxBusy",
    "from_rpc_error",
]


class MegaflowError(Exception):
    """Base class of every error the SDK raises.

    Attributes:
        message: the server's message (complete on its own: what was wrong
            and, where it can say, what to do), or the SDK's.
        code: the gRPC status code the head answered with, or None for an
            error raised by the SDK itself.
        reason: the machine-readable cause within the class that the head
            sent in the status's ErrorInfo (e.g. "SANDBOX_CLOSED"), or "".
    """

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        return self.message


class InvalidArgument(MegaflowError, ValueError):
    """The request is malformed; retrying it cannot help."""


class InvalidGraph(InvalidArgument):
    """A graph spec failed the SDK's local checks, before any RPC.

    The message names the graph, the task and the field, as the head's do:
    ``graph "step-42": task "eval": depends_on: unknown task "rollot"``.
    """


class NotFound(MegaflowError, LookupError):
    """The named graph, task, attempt or artifact does not exist."""


class AlreadyExists(MegaflowError):
    """The graph id is taken by a graph with a different spec."""


class FailedPrecondition(MegaflowError):
    """The request is valid but the state forbids it now (e.g. deleting a
    graph that still runs, or reading logs from a head without a store)."""


class Unavailable(MegaflowError):
    """No head answered, or the head has no leader; the client retries these
    within the call's deadline before raising."""


class NotLeader(Unavailable):
    """The head is not the leader.

    Attributes:
        leader_id: the leader's head id, when the head knows it.
        leader_addr: the leader's gRPC address (host:port), when known; the
            client follows it.
    """

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None,
                 leader_id: str = "", leader_addr: str = "") -> None:
        super().__init__(message, code)
        self.leader_id = leader_id
        self.leader_addr = leader_addr


class ResourceExhausted(MegaflowError):
    """A rate limit (with ``retry_after``) or a message over gRPC's size limit.

    Attributes:
        retry_after: seconds after which a retry may succeed (a rate
            limit), or None: the same request will fail again.
    """

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None,
                 retry_after: Optional[float] = None) -> None:
        super().__init__(message, code)
        self.retry_after = retry_after


class OutOfRange(MegaflowError):
    """A watch cursor is older than the history the heads retain: re-read the
    state and watch from now."""


class Internal(MegaflowError):
    """A bug or a broken invariant on the head (also: an artifact whose bytes
    do not match its manifest)."""


class PermissionDenied(MegaflowError):
    """Refused: the call's token (its role or tenant) does not allow it, or
    a proxy in front of the heads refused it. :class:`Unauthenticated` is
    a subclass, so ``except PermissionDenied`` catches both."""


class Unauthenticated(PermissionDenied):
    """Refused because the call carried no token, a malformed one, or one
    the cluster does not know (revoked or expired): pass ``token=`` (or set
    ``MEGAFLOW_TOKEN``) with a valid token. A wrong role is
    :class:`PermissionDenied` instead."""


class DeadlineExceeded(MegaflowError, TimeoutError):
    """The call's deadline passed before a head answered it; the message
    carries the last error seen."""


class Cancelled(MegaflowError):
    """The call was cancelled."""


class ChecksumMismatch(MegaflowError):
    """A downloaded artifact's SHA-256 differs from its manifest's."""


class SandboxNotFound(NotFound):
    """No such sandbox (reason SANDBOX_NOT_FOUND)."""


class SandboxNotReady(FailedPrecondition):
    """The sandbox is PENDING or STARTING: wait (``Sandbox.wait_ready``) and
    try again (reason SANDBOX_NOT_READY)."""


class SandboxEnded(FailedPrecondition):
    """The sandbox has ended: its files and processes are gone; create a new
    one. The subclasses say how it ended; the message says why.

    Attributes:
        sandbox: the :class:`~megaflow.sandbox.Sandbox` handle when the SDK
            raised it from ``Client.sandbox(wait_ready=...)`` (the sandbox
            ended while starting), else None.
    """

    sandbox: object = None


class SandboxClosed(SandboxEnded):
    """The sandbox was closed by a client (reason SANDBOX_CLOSED)."""


class SandboxExpired(SandboxEnded):
    """The sandbox reached its lifetime or idle timeout (reason SANDBOX_EXPIRED)."""


class SandboxLost(SandboxEnded):
    """The sandbox's worker or container was lost, and its state with it
    (reason SANDBOX_LOST)."""


class SandboxFailed(SandboxEnded):
    """The sandbox could not start (image, quota...), or its container exited
    (reason SANDBOX_FAILED)."""


class WorkerUnreachable(Unavailable):
    """The head could not reach the sandbox's worker (reason
    WORKER_UNREACHABLE). An exec or a file write may or may not have run:
    the SDK does not retry it; retry only if running it twice is safe."""


class RuntimeUnavailable(Unavailable):
    """The worker's container runtime did not answer (reason
    RUNTIME_UNAVAILABLE); as :class:`WorkerUnreachable`, not retried."""


class FileNotFound(NotFound):
    """``Sandbox.read_file`` of a path that does not exist (reason FILE_NOT_FOUND)."""


class FileTooLarge(FailedPrecondition):
    """A file over 64 MiB (or ``max_bytes``), or not a regular file (reason
    FILE_TOO_LARGE)."""


class SnapshotNotFound(NotFound):
    """No such snapshot: deleted, another tenant's, or its worker was lost
    and its image with it (reason SNAPSHOT_NOT_FOUND)."""


class SnapshotWorkerDown(FailedPrecondition):
    """The worker holding the snapshot's image is down or left, so no
    sandbox can start from it now; the image stays on the worker, and forks
    work again once it rejoins with the same id (reason
    SNAPSHOT_WORKER_DOWN)."""


class SnapshotInUse(FailedPrecondition):
    """Live sandboxes were created from the snapshot: close them, then
    delete it (reason SNAPSHOT_IN_USE)."""


class SnapshotQuotaExceeded(ResourceExhausted):
    """The tenant holds its maximum of snapshots (the heads'
    ``--max-snapshots``): delete one before taking another (reason
    SNAPSHOT_QUOTA_EXCEEDED). Not retried: ``retry_after`` is None."""


class SandboxPaused(FailedPrecondition):
    """The sandbox is PAUSED (``Sandbox.pause``), or its worker holds its
    container paused: an exec, a file call or a snapshot is refused until
    ``Sandbox.resume`` (reason SANDBOX_PAUSED). Not retried."""


class SandboxBusy(FailedPrecondition):
    """A pause refused because execs or file calls run in the sandbox, which
    it would freeze: pause it once they end (reason SANDBOX_BUSY)."""


_CODES: Dict[grpc.StatusCode, Type[MegaflowError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
}

_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_NOT_LEADER = "NOT_LEADER"
_DOMAIN = "megaflow.io"

_REASONS: Dict[str, Type[MegaflowError]] = {
    "SANDBOX_NOT_FOUND": SandboxNotFound,
    "SANDBOX_NOT_READY": SandboxNotReady,
    "SANDBOX_CLOSED": SandboxClosed,
    "SANDBOX_EXPIRED": SandboxExpired,
    "SANDBOX_LOST": SandboxLost,
    "SANDBOX_FAILED": SandboxFailed,
    "WORKER_UNREACHABLE": WorkerUnreachable,
    "RUNTIME_UNAVAILABLE": RuntimeUnavailable,
    "FILE_NOT_FOUND": FileNotFound,
    "FILE_TOO_LARGE": FileTooLarge,
    "SNAPSHOT_NOT_FOUND": SnapshotNotFound,
    "SNAPSHOT_WORKER_DOWN": SnapshotWorkerDown,
    "SNAPSHOT_IN_USE": SnapshotInUse,
    "SNAPSHOT_QUOTA_EXCEEDED": SnapshotQuotaExceeded,
    "SANDBOX_PAUSED": SandboxPaused,
    "SANDBOX_BUSY": SandboxBusy,
}


def error_class(code: Optional[grpc.StatusCode], reason: str = "") -> Type[MegaflowError]:
    """The exception class for a gRPC code and an ErrorInfo reason: the
    reason's class when it is one of the code's class (a reason sent with an
    unexpected code keeps the code's class), else the code's."""
    base = _CODES.get(code, MegaflowError) if code is not None else MegaflowError
    cls = _REASONS.get(reason)
    if cls is not None and issubclass(cls, base):
        return cls
    return base


def from_rpc_error(err: grpc.RpcError) -> MegaflowError:
    """Convert a gRPC error from a head into the matching exception.

    Args:
        err: the ``grpc.RpcError`` a stub raised (a ``grpc.Call``).

    Returns:
        The exception of the error's class, its message the server's. An
        UNAVAILABLE with the NOT_LEADER detail becomes :class:`NotLeader`
        with the leader's address; a RetryInfo detail sets
        ``retry_after`` on :class:`ResourceExhausted`; another ErrorInfo of
        domain megaflow.io sets ``reason`` and, for a known reason, picks
        its subclass (:class:`SandboxClosed`...).
    """
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else None) or str(code)
    leader_id = leader_addr = ""
    not_leader = False
    reason = ""
    retry_after: Optional[float] = None
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for key, value in trailers or ():
        if key != _DETAILS_KEY:
            continue
        try:
            st = rpc_status_pb2.Status.FromString(value)
        except Exception:  # a malformed detail: keep the code and message
            continue
        for d in st.details:
            if d.type_url == _ERROR_INFO:
                info = rpc_status_pb2.ErrorInfo.FromString(d.value)
                if info.reason == _NOT_LEADER:
                    not_leader = True
                    leader_id = info.metadata.get("leader_id", "")
                    leader_addr = info.metadata.get("leader_addr", "")
                elif info.domain == _DOMAIN:
                    reason = info.reason
            elif d.type_url == _RETRY_INFO:
                ri = rpc_status_pb2.RetryInfo.FromString(d.value)
                retry_after = ri.retry_delay.seconds + ri.retry_delay.nanos / 1e9
    if not_leader:
        return NotLeader(message, code, leader_id=leader_id, leader_addr=leader_addr)
    cls = error_class(code, reason)
    if issubclass(cls, ResourceExhausted):
        e: MegaflowError = cls(message, code, retry_after=retry_after)
        e.reason = reason
        return e
    return cls(message, code, reason)


def retryable(err: MegaflowError) -> bool:
    """Whether the same request may succeed at another head or later:
    Unavailable, NotLeader, and ResourceExhausted with a retry_after (a rate
    limit), as Go's errs.Retryable."""
    if isinstance(err, Unavailable):
        return True
    return isinstance(err, ResourceExhausted) and bool(err.retry_after)
