"""Sandboxes: long-lived containers an agent runs commands in (docs/sandboxes.md).

A sandbox is created from an image on a worker the heads choose; commands
run in it one after another (or several at once), its files and background
processes stay between them, and it ends when closed, at its lifetime, or
after its idle timeout::

    with client.sandbox(image="python:3.12-slim", idle_timeout=600) as sb:
        sb.write_file("/work/main.py", "print(6*7)")
        r = sb.exec(["python", "/work/main.py"], timeout=60)
        print(r.exit_code, r.text)          # 0 42

A READY sandbox can be snapshotted (its files committed into an image on
its worker) and forked: sandboxes created ``from_snapshot`` start with
those files::

    snap = sb.snapshot("after-setup")
    with client.sandbox(from_snapshot=snap.id) as fork:
        print(fork.read_file("/work/main.py"))

A READY sandbox can be paused (its processes frozen, its CPU released)
and resumed; while PAUSED its calls raise :class:`~megaflow.SandboxPaused`::

    sb.pause()
    ...
    sb.resume()

Retries follow Go's ``client/sandbox.go`` and ``client/snapshot.go``:
create, get, list, close, set_timeout, pause, resume, list_snapshots and
delete_snapshot are retried through leader changes and head failures
within their deadline (create is idempotent by the sandbox id the SDK picks before its first
try). An exec, a file call, a directory copy (upload, download) or a
snapshot is sent to one head once: when the SDK cannot connect to a head
it moves on to the next before sending (and a snapshot follows a NOT_LEADER
answer, which says nothing was done), but once sent a failure is raised
(:class:`~megaflow.Unavailable`), never retried, because the command may
have run (a retried snapshot would take a second one).
"""

from __future__ import annotations

import datetime
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from . import _archive, _core
from ._archive import Source
from ._proto import sandbox_pb2 as sbx
from .errors import (DeadlineExceeded, InvalidArgument, MegaflowError, NotLeader, SandboxEnded, Unavailable,
                     error_class, from_rpc_error)
from .graph import _ident_problem, parse_cpu, parse_memory

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Sandbox", "SandboxBase", "ExecResult", "SandboxInfo", "SnapshotInfo", "new_sandbox_id",
           "sandbox_state_name"]

SandboxInfo = sbx.Sandbox
"""A sandbox as the heads show it (the ``megaflow.v1.Sandbox`` message):
``id``, ``state``, ``reason``, ``reason_code``, ``worker_id``, times,
``image``, ``labels``, ``index``."""

SnapshotInfo = sbx.Snapshot
"""A snapshot as the heads show it (the ``megaflow.v1.Snapshot`` message):
``id`` ("snap-..."), ``tenant``, ``name``, ``sandbox_id`` (the sandbox it
was taken of), ``worker_id`` (the worker holding its image: forks run
there), ``image``, ``image_id``, ``size_bytes``, ``create_unix_nanos``,
``create_index``."""

Seconds = Union[int, float, datetime.timedelta]
Data = Union[bytes, bytearray, memoryview, str]

# The bounds of internal/spec/sandbox.go and limits.go, checked before any RPC.
MAX_ID_SUFFIX = 64
MAX_SECONDS = 7 * 24 * 3600  # lifetime, idle timeout
MAX_WAIT_READY_S = 600
MAX_ARGV = 1024
MAX_ENV_ENTRIES = 256
MAX_ENV_BYTES = 32 << 10
MAX_STDIN = 16 << 20
MAX_FILE = 64 << 20
MAX_PATH = 4096
MAX_EXEC_TIMEOUT_S = 24 * 3600
MAX_ARCHIVE = _archive.MAX_ARCHIVE  # one tar stream of upload or download
# The bounds of internal/spec/snapshot.go.
MAX_SNAPSHOT_ID_SUFFIX = 64
MAX_SNAPSHOT_NAME = 128
DEFAULT_EXEC_TIMEOUT_S = 600
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_LIVE = (sbx.SANDBOX_STATE_PENDING, sbx.SANDBOX_STATE_STARTING, sbx.SANDBOX_STATE_READY, sbx.SANDBOX_STATE_PAUSED)
# The states wait_ready returns in: started (a PAUSED sandbox waits for a resume, not for a worker).
_STARTED = (sbx.SANDBOX_STATE_READY, sbx.SANDBOX_STATE_PAUSED)
_CONNECT_TRY_S = 2.0  # how long one head may take to accept a connection before the next is tried
_FILE_RECV = 4 << 20  # ReadFile chunks are at most 1 MiB


def new_sandbox_id() -> str:
    """A fresh sandbox id as the Go client picks: "sbx-" and 16 random
    characters of lowercase Crockford base32."""
    return "sbx-" + "".join(_CROCKFORD[b % 32] for b in os.urandom(16))


def sandbox_state_name(state: Union[int, str]) -> str:
    """Short name of a SandboxState value: ``SANDBOX_STATE_READY`` -> "READY";
    a name (as :attr:`Sandbox.state` gives) is returned short too."""
    if isinstance(state, str):
        return state.replace("SANDBOX_STATE_", "")
    return sbx.SandboxState.Name(state).replace("SANDBOX_STATE_", "")


@dataclass
class ExecResult:
    """How an exec ended.

    Attributes:
        exit_code: the command's exit status; 128+N when killed by signal
            N; -1 when unknown.
        stdout, stderr: its output as bytes, each at most its first 16 MiB
            (empty from :meth:`Sandbox.exec_stream`, which yields them).
        timed_out: it was killed at its timeout (exit_code is then the
            signal's, usually 137).
        truncated: output beyond 16 MiB per stream was dropped.
        reason: what the worker knows beyond the code ("" if nothing).
    """

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    truncated: bool = False
    reason: str = ""

    @property
    def ok(self) -> bool:
        """Exit code 0 and not timed out."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced); as :attr:`text`."""
        return self.text

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8 (invalid bytes replaced)."""
        return self.stderr.decode("utf-8", "replace")


ExecChunk = Union[Tuple[str, bytes], ExecResult]


class SandboxBase:
    """What the blocking :class:`Sandbox` and the asyncio
    :class:`megaflow.aio.Sandbox` share: the id, the state last seen, and
    the argument checks of their calls (no I/O here).

    Attributes:
        id: the sandbox's id, "sbx-...".
    """

    def __init__(self, client: Any, sandbox_id: str, info: Optional[SandboxInfo] = None) -> None:
        """A handle without any RPC (prefer ``client.get_sandbox``).

        Raises:
            InvalidArgument: sandbox_id is not "sbx-" then [a-z0-9].
        """
        _check_id("sandbox_id", sandbox_id)
        self._client = client
        self.id = sandbox_id
        self._lock = threading.Lock()
        self._info: SandboxInfo = info if info is not None else sbx.Sandbox(id=sandbox_id)
        self._closed = False

    # -- state ---------------------------------------------------------------

    def _set(self, info: SandboxInfo) -> None:
        with self._lock:
            if info.index >= self._info.index:
                self._info = info

    def _index(self) -> int:
        with self._lock:
            idx = self._info.index
        return max(idx, self._client._read().min_index)

    @property
    def info(self) -> SandboxInfo:
        """The sandbox as this handle last saw it (no RPC; :meth:`refresh`
        reads it again)."""
        with self._lock:
            return self._info

    @property
    def state(self) -> str:
        """The last seen state: "PENDING", "STARTING", "READY", "PAUSED",
        "CLOSED", "EXPIRED", "LOST" or "FAILED"."""
        return sandbox_state_name(self.info.state)

    @property
    def reason(self) -> str:
        """Why it is in its state (prose), as last seen."""
        return self.info.reason

    @property
    def reason_code(self) -> str:
        """The class of :attr:`reason`, e.g. "SANDBOX_IDLE" ("" if none)."""
        from ._proto import types_pb2 as pb
        code = self.info.reason_code
        return pb.ReasonCode.Name(code).replace("REASON_CODE_", "") if code else ""

    @property
    def worker(self) -> str:
        """The worker holding it (or that held it last), as last seen."""
        return self.info.worker_id

    def __repr__(self) -> str:
        mod = type(self).__module__
        name = "megaflow.Sandbox" if mod == __name__ else f"{mod}.{type(self).__qualname__}"
        return f"<{name} {self.id} {self.state}>"

    def _closed_now(self) -> bool:
        with self._lock:
            return self._closed

    def _mark_closed(self) -> None:
        with self._lock:
            self._closed = True

    def _exec_request(self, cmd: Union[Sequence[str], str], timeout: Optional[Seconds],
                      env: Optional[Mapping[str, str]], cwd: Optional[str],
                      stdin: Optional[Data]) -> Tuple[sbx.SandboxExecRequest, float]:
        """The checked Exec request and the seconds its call may take."""
        req = sbx.SandboxExecRequest(sandbox_id=self.id, argv=_argv(self.id, cmd), env=_env(self.id, env),
                                     cwd=_cwd(self.id, cwd), stdin=_data(self.id, "stdin", stdin, MAX_STDIN))
        if timeout is not None:
            t = _seconds(timeout, "exec timeout", MAX_EXEC_TIMEOUT_S)
            if t <= 0:
                raise InvalidArgument(f"megaflow: exec in {self.id}: timeout {timeout!r} must be positive; "
                                      f"None for the default of {DEFAULT_EXEC_TIMEOUT_S} s")
            req.timeout_millis = max(1, math.ceil(t * 1000))
        rpc_timeout = (req.timeout_millis / 1000 if req.timeout_millis else DEFAULT_EXEC_TIMEOUT_S) + self._client.timeout
        return req, rpc_timeout

    def _write_request(self, path: str, data: Data, mode: int) -> sbx.SandboxWriteFileRequest:
        """The checked WriteFile request (min_index set at send time)."""
        _path(self.id, path)
        body = _data(self.id, "data", data, MAX_FILE)
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
            raise InvalidArgument(f"megaflow: sandbox {self.id}: mode {mode!r} is not permission bits; "
                                  f"use 0 to 0o777, e.g. 0o644 or 0o755")
        return sbx.SandboxWriteFileRequest(sandbox_id=self.id, path=path, data=body, mode=mode)

    def _read_request(self, path: str, max_bytes: int) -> sbx.SandboxReadFileRequest:
        """The checked ReadFile request (min_index set at send time)."""
        _path(self.id, path)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not 0 <= max_bytes <= MAX_FILE:
            raise InvalidArgument(f"megaflow: sandbox {self.id}: max_bytes {max_bytes!r} is out of range: "
                                  f"0 (the limit) to {MAX_FILE}")
        return sbx.SandboxReadFileRequest(sandbox_id=self.id, path=path, max_bytes=max_bytes)

    def _snapshot_request(self, name: str) -> sbx.SnapshotSandboxRequest:
        """The checked SnapshotSandbox request (min_index set at send time)."""
        if not isinstance(name, str):
            raise InvalidArgument(f"megaflow: snapshot of {self.id}: name {name!r} is not a string")
        if len(name.encode()) > MAX_SNAPSHOT_NAME:
            raise InvalidArgument(f"megaflow: snapshot of {self.id}: name of {len(name.encode())} bytes; "
                                  f"at most {MAX_SNAPSHOT_NAME}")
        for i, ch in enumerate(name):
            if not " " <= ch < "\x7f":
                raise InvalidArgument(f"megaflow: snapshot of {self.id}: name {name!r}: character {i} is not "
                                      f"printable ASCII")
        return sbx.SnapshotSandboxRequest(sandbox_id=self.id, name=name)

    def _snapshot_failed(self, r: Any, addr: str, e: grpc.RpcError) -> float:
        """After a sent snapshot failed at head addr: the seconds to wait
        before trying again when the head answered NOT_LEADER (nothing was
        done: no leader known, or it stepped down before recording it), as
        Go's Snapshot; otherwise raise, never sending it again.

        Args:
            r: the call's :class:`megaflow._core.Retry`.

        Raises:
            DeadlineExceeded: the deadline passed.
            MegaflowError: any other failure (see :meth:`_sent_error`).
        """
        err = from_rpc_error(e)
        if isinstance(err, NotLeader):
            return r.failed(addr, err)
        raise self._sent_error(addr, "snapshot", e, hint="it may or may not have been taken: list_snapshots() "
                                                        "says whether it was") from None

    def _timeout_request(self, seconds: Seconds) -> sbx.SetSandboxTimeoutRequest:
        """The checked SetSandboxTimeout request: seconds rounded up to whole
        ones, 1 to 7 days (min_index set at send time)."""
        t = _seconds(seconds, f"set_timeout of {self.id}", MAX_SECONDS)
        secs = math.ceil(t)
        if secs < 1:
            raise InvalidArgument(f"megaflow: set_timeout of {self.id}: {seconds!r} s is out of range: "
                                  f"more than 0, at most {MAX_SECONDS} s (7 days)")
        return sbx.SetSandboxTimeoutRequest(id=self.id, timeout_seconds=secs)

    def _upload_spool(self, source: Source, remote_dir: str) -> _archive.Spool:
        """The checked tar of an upload into remote_dir, spooled."""
        _path(self.id, remote_dir)
        return _archive.upload_spool(source, f"upload into {remote_dir} of sandbox {self.id}")

    def _upload_messages(self, spool: _archive.Spool, remote_dir: str) -> Iterator[sbx.SandboxUploadArchiveRequest]:
        """The UploadArchive messages of a spooled tar: the first names the
        sandbox, the directory and the index seen; each carries a chunk."""
        first = sbx.SandboxUploadArchiveRequest(sandbox_id=self.id, path=remote_dir, min_index=self._index())
        for b in spool.chunks():
            if first is not None:
                first.data = b
                yield first
                first = None
            else:
                yield sbx.SandboxUploadArchiveRequest(data=b)
        if first is not None:
            yield first

    def _download_request(self, remote_path: str, local_dir: Any,
                          max_bytes: int) -> Tuple[sbx.SandboxDownloadArchiveRequest, Path, str]:
        """The checked DownloadArchive request (min_index set at send time),
        the local directory and what the call is, for messages."""
        _path(self.id, remote_path)
        what = f"download of {remote_path} from sandbox {self.id}"
        if not isinstance(local_dir, (str, os.PathLike)) or not str(local_dir):
            raise InvalidArgument(f"megaflow: {what}: local_dir {local_dir!r} is not a local directory path")
        return (sbx.SandboxDownloadArchiveRequest(sandbox_id=self.id, path=remote_path,
                                                  max_bytes=_archive.check_max_bytes(what, max_bytes)),
                Path(local_dir), what)

    def _pause_request(self, pause: bool) -> Tuple[str, Any]:
        """The method and request of a pause (or a resume), min_index set."""
        if pause:
            return "PauseSandbox", sbx.PauseSandboxRequest(id=self.id, min_index=self._index())
        return "ResumeSandbox", sbx.ResumeSandboxRequest(id=self.id, min_index=self._index())

    def _set_timeout_done(self, res: Any) -> SandboxInfo:
        self._client._observe(res.sandbox.index)
        self._set(res.sandbox)
        return res.sandbox

    def _wait_ready_timeout(self, timeout: Seconds) -> float:
        t = _seconds(timeout, "wait_ready timeout", 7 * 24 * 3600)
        if t <= 0:
            raise InvalidArgument(f"megaflow: sandbox {self.id}: wait_ready timeout {timeout!r} must be positive")
        return t

    def _sent_error(self, addr: str, what: str, e: grpc.RpcError,
                    hint: str = "it may or may not have run: retry it only if that is safe") -> MegaflowError:
        """Classify the failure of a call that was sent: never retried; a head
        that failed is left for the next call. hint ends the message of a
        call that may or may not have run."""
        err = from_rpc_error(e)
        if isinstance(err, DeadlineExceeded):
            return DeadlineExceeded(f"megaflow: sandbox {self.id}: {what}: deadline passed (head {addr}: "
                                    f"{err.message}); it may or may not have run", err.code, err.reason)
        if isinstance(err, Unavailable) or type(err) is MegaflowError:
            self._client._rotate(addr)
            if type(err) in (Unavailable, MegaflowError):
                if type(err) is Unavailable and "failed to connect to all addresses" in err.message:
                    # gRPC had no connection for it: it was never sent.
                    hint = "it did not run (no connection to the head: nothing was sent)"
                return Unavailable(f"megaflow: sandbox {self.id}: {what}: head {addr}: {err.message}; {hint}",
                                   err.code, err.reason)
        return err

    def _no_exit(self, addr: str) -> MegaflowError:
        return Unavailable(f"megaflow: exec in sandbox {self.id}: the stream from head {addr} ended without an "
                           f"exit; the command may or may not have run: retry it only if that is safe")


def _exec_chunks(m: sbx.SandboxExecResponse) -> List[ExecChunk]:
    """What one Exec message carries: output chunks, then the exit last."""
    out: List[ExecChunk] = []
    if m.stdout:
        out.append(("stdout", m.stdout))
    if m.stderr:
        out.append(("stderr", m.stderr))
    if m.HasField("exit"):
        x = m.exit
        out.append(ExecResult(exit_code=x.exit_code, timed_out=x.timed_out, truncated=x.truncated, reason=x.reason))
    return out


def _collect(items: List[ExecChunk]) -> ExecResult:
    """An exec_stream's items as one ExecResult with stdout and stderr joined."""
    res = items[-1]
    assert isinstance(res, ExecResult)  # exec_stream ends with the result or raises
    res.stdout = b"".join(i[1] for i in items[:-1] if isinstance(i, tuple) and i[0] == "stdout")
    res.stderr = b"".join(i[1] for i in items[:-1] if isinstance(i, tuple) and i[0] == "stderr")
    return res


class Sandbox(SandboxBase):
    """A handle on one sandbox; made by :meth:`Client.sandbox` or
    :meth:`Client.get_sandbox`. Safe to share between threads (several
    execs may run at once). As a context manager it closes the sandbox on
    exit.

    Attributes:
        id: the sandbox's id, "sbx-...".
    """

    def __init__(self, client: "Client", sandbox_id: str, info: Optional[SandboxInfo] = None) -> None:
        """A handle without any RPC (prefer :meth:`Client.get_sandbox`).

        Raises:
            InvalidArgument: sandbox_id is not "sbx-" then [a-z0-9].
        """
        super().__init__(client, sandbox_id, info)

    def refresh(self, *, timeout: Optional[float] = None) -> SandboxInfo:
        """Read the sandbox's state again.

        Args:
            timeout: deadline in seconds, retries included (default: the
                client's).

        Returns:
            The ``Sandbox`` message (also kept in :attr:`info`).

        Raises:
            SandboxNotFound: no such sandbox.
            DeadlineExceeded: no head answered in time.
        """
        res = self._client._call("GetSandbox", sbx.GetSandboxRequest(id=self.id, min_index=self._index()),
                                 timeout, sandbox=True)
        self._client._observe(res.sandbox.index)
        self._set(res.sandbox)
        return res.sandbox

    def wait_ready(self, timeout: Seconds = 120.0) -> SandboxInfo:
        """Wait until the sandbox is READY (or PAUSED: started, and waiting
        for a :meth:`resume`), reading its state with backoff.

        Args:
            timeout: seconds (or a ``timedelta``) to wait in all.

        Returns:
            The READY (or PAUSED) ``Sandbox`` message.

        Raises:
            SandboxEnded: it ended instead (a subclass says how: e.g.
                :class:`SandboxFailed` when its image could not start).
            DeadlineExceeded: still not READY after ``timeout``.
        """
        t = self._wait_ready_timeout(timeout)
        deadline = time.monotonic() + t
        delay = 0.1
        while True:
            left = deadline - time.monotonic()
            info = self.refresh(timeout=max(min(self._client.timeout, left), 0.001))
            if info.state in _STARTED:
                return info
            if info.state not in _LIVE:
                raise _ended(self, info)
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(f"megaflow: sandbox {self.id} is still {sandbox_state_name(info.state)} "
                                       f"after {t:g} s ({info.reason or 'waiting for a worker'})")
            time.sleep(min(delay, left))
            delay = min(2 * delay, 1.0)

    def close(self, *, timeout: Optional[float] = None) -> None:
        """Close the sandbox: its container is stopped and removed, its files
        and processes are gone. Idempotent: closing a closed or ended sandbox
        is no error, and a handle that closed it makes no second call.
        Retried through head failures like :meth:`refresh`.

        Args:
            timeout: deadline in seconds (default: the client's).

        Raises:
            SandboxNotFound: no such sandbox.
            DeadlineExceeded: no head answered in time.
        """
        if self._closed_now():
            return
        res = self._client._call("CloseSandbox", sbx.CloseSandboxRequest(id=self.id, min_index=self._index()),
                                 timeout, sandbox=True)
        self._client._observe(res.sandbox.index)
        self._set(res.sandbox)
        self._mark_closed()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # the body's exception matters more than a failed close
            self.close()
        except MegaflowError:
            pass


    # -- exec ----------------------------------------------------------------

    def exec(self, cmd: Union[Sequence[str], str], *, timeout: Optional[Seconds] = None,
             env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             stdin: Optional[Data] = None) -> ExecResult:
        """Run a command in the sandbox and return its output and exit.

        Not retried once sent (the command may have run); see the module.

        Args:
            cmd: argv as a list (``["python", "main.py"]``; argv[0] looked
                up in PATH), or a string run by ``sh -c`` (the image needs
                ``sh``). 1 to 1024 elements.
            timeout: seconds (or a ``timedelta``) after which the command is
                killed with its process group (``timed_out`` set); None: the
                server's default, 10 minutes; at most 24 hours. The call's
                own deadline is this plus the client's timeout.
            env: added to the sandbox's environment (at most 256 entries,
                32 KiB).
            cwd: absolute working directory; None: the sandbox's.
            stdin: bytes (or str, sent as UTF-8) written to its stdin, then
                closed; at most 16 MiB.

        Returns:
            An :class:`ExecResult`. A non-zero exit is a result, not an
            error.

        Raises:
            InvalidArgument: a bad argument (before any RPC).
            SandboxNotFound: no such sandbox.
            SandboxNotReady: PENDING or STARTING: wait and retry.
            SandboxEnded: closed, expired, lost or failed (a subclass says
                which: :class:`SandboxClosed`...).
            Unavailable: no head could be reached (nothing was sent), or
                the head or worker failed after it was sent
                (:class:`WorkerUnreachable`): it may or may not have run.
            DeadlineExceeded: the call's deadline passed.
        """
        return _collect(list(self.exec_stream(cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin)))

    def exec_stream(self, cmd: Union[Sequence[str], str], *, timeout: Optional[Seconds] = None,
                    env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                    stdin: Optional[Data] = None) -> Iterator[ExecChunk]:
        """Run a command as :meth:`exec` does, yielding its output as it comes.

        The arguments are checked now (before any RPC); the exec starts on
        the first ``next()``. Closing the iterator early (``break``) cancels
        the exec: the worker kills the command.

        Args:
            cmd, timeout, env, cwd, stdin: as :meth:`exec`.

        Returns:
            An iterator of ``("stdout", bytes)`` and ``("stderr", bytes)``
            chunks, each stream in order, then one :class:`ExecResult` (its
            stdout and stderr empty) as the last item.

        Raises:
            As :meth:`exec` (InvalidArgument at once, the others from the
            iterator).
        """
        return self._exec(*self._exec_request(cmd, timeout, env, cwd, stdin))

    def _exec(self, req: sbx.SandboxExecRequest, rpc_timeout: float) -> Iterator[ExecChunk]:
        deadline = time.monotonic() + rpc_timeout
        addr, stub = self._client._connect(deadline, f"exec in {self.id}")
        req.min_index = self._index()
        stream = stub.Exec(req, timeout=max(deadline - time.monotonic(), 0.001))
        try:
            for m in stream:
                for item in _exec_chunks(m):
                    yield item
                    if isinstance(item, ExecResult):
                        return
        except grpc.RpcError as e:
            raise self._sent_error(addr, "exec", e) from None
        finally:
            stream.cancel()
        raise self._no_exit(addr)

    # -- files ---------------------------------------------------------------

    def write_file(self, path: str, data: Data, mode: int = 0o644, *, timeout: Optional[float] = None) -> None:
        """Create or replace a file in the sandbox; missing parent
        directories are created. Not retried once sent (see the module).

        Args:
            path: absolute path, e.g. "/work/main.py" (at most 4096 bytes).
            data: the content: bytes, or str written as UTF-8; at most 64 MiB.
            mode: permission bits, 0 to 0o777 (0: 0o644).
            timeout: deadline in seconds (default: the client's).

        Raises:
            InvalidArgument: a bad path, size or mode (before any RPC).
            SandboxNotFound, SandboxNotReady, SandboxEnded, Unavailable,
            DeadlineExceeded: as :meth:`exec`.
        """
        req = self._write_request(path, data, mode)
        deadline = self._client._deadline(timeout)
        addr, stub = self._client._connect(deadline, f"write {path} in {self.id}")
        req.min_index = self._index()
        try:
            stub.WriteFile(req, timeout=max(deadline - time.monotonic(), 0.001))
        except grpc.RpcError as e:
            raise self._sent_error(addr, f"write {path}", e) from None

    def read_file(self, path: str, *, max_bytes: int = 0, timeout: Optional[float] = None) -> bytes:
        """Read a regular file of the sandbox. Not retried once sent.

        Args:
            path: absolute path (at most 4096 bytes).
            max_bytes: refuse a larger file (:class:`FileTooLarge`); 0:
                the limit, 64 MiB.
            timeout: deadline in seconds (default: the client's).

        Returns:
            The file's bytes.

        Raises:
            InvalidArgument: a bad path or max_bytes (before any RPC).
            FileNotFound: no such file.
            FileTooLarge: over max_bytes, or not a regular file.
            SandboxNotFound, SandboxNotReady, SandboxEnded, Unavailable,
            DeadlineExceeded: as :meth:`exec`.
        """
        req = self._read_request(path, max_bytes)
        deadline = self._client._deadline(timeout)
        addr, stub = self._client._connect(deadline, f"read {path} in {self.id}")
        req.min_index = self._index()
        stream = stub.ReadFile(req, timeout=max(deadline - time.monotonic(), 0.001))
        chunks: List[bytes] = []
        try:
            for m in stream:
                chunks.append(m.data)
        except grpc.RpcError as e:
            raise self._sent_error(addr, f"read {path}", e) from None
        finally:
            stream.cancel()
        return b"".join(chunks)

    # -- directories -----------------------------------------------------------

    def upload(self, source: Source, remote_dir: str, *, timeout: Optional[float] = None) -> int:
        """Copy a local directory (or a file, or a tar stream) into a
        directory of the sandbox, as ``megaflow sandbox cp``. Not retried
        once sent (see the module).

        The tar is built (or the one given checked) and spooled before
        anything is sent, so a bad source fails with nothing changed.

        Args:
            source: a local directory, whose contents go into remote_dir
                (regular files with their modes, directories, symbolic
                links; a device, FIFO or socket is refused); a local file
                (or symbolic link), copied to remote_dir/<its name>; or an
                uncompressed tar stream as bytes or a binary file object,
                its entries relative to remote_dir. At most 256 MiB of tar.
            remote_dir: absolute directory of the sandbox (created, with
                missing parents).
            timeout: deadline in seconds of the whole copy (default: the
                client's).

        Returns:
            The bytes of tar sent.

        Raises:
            InvalidArgument: a bad remote_dir or source, a local path that
                cannot be read, a tar entry the worker would refuse (an
                absolute name, one leaving remote_dir, a device), or over
                256 MiB of tar (before any RPC); or the worker refused an
                entry (the entries before it were written, as with tar -x).
            SandboxNotFound, SandboxNotReady, SandboxEnded, Unavailable,
            DeadlineExceeded: as :meth:`exec`.
        """
        with self._upload_spool(source, remote_dir) as spool:
            deadline = self._client._deadline(timeout)
            addr, stub = self._client._connect(deadline, f"upload into {remote_dir} of {self.id}")
            try:
                stub.UploadArchive(self._upload_messages(spool, remote_dir),
                                   timeout=max(deadline - time.monotonic(), 0.001))
            except grpc.RpcError as e:
                raise self._sent_error(addr, f"upload into {remote_dir}", e) from None
            return spool.size

    def download(self, remote_path: str, local_dir: Union[str, "os.PathLike[str]"], *, max_bytes: int = 0,
                 timeout: Optional[float] = None) -> int:
        """Copy a directory (or a file) of the sandbox into a local
        directory, as ``megaflow sandbox cp``. Not retried once sent.

        The tar stream is received whole (spooled, at most 256 MiB) and
        every entry checked before anything is written: none may land
        outside local_dir.

        Args:
            remote_path: absolute path of the sandbox: a directory, whose
                contents go into local_dir, or a file, written to
                local_dir/<its name>.
            local_dir: the local directory (created if missing); existing
                files at the entries' paths are replaced.
            max_bytes: refuse a larger tar (:class:`FileTooLarge`); 0: the
                limit, 256 MiB.
            timeout: deadline in seconds of the whole copy (default: the
                client's).

        Returns:
            The bytes of tar received.

        Raises:
            InvalidArgument: a bad argument (before any RPC); or an entry
                that would land outside local_dir: an absolute name, one
                with "..", a symbolic link pointing outside local_dir
                (absolute, or climbing out), a hard link to something
                outside the directory downloaded, a device, FIFO or sparse
                file (nothing is written), or a path through a symbolic link
                already in local_dir that leads out (the entries before it
                are written).
            FileNotFound: no such path in the sandbox.
            FileTooLarge: the tar is over max_bytes (nothing is written).
            SandboxNotFound, SandboxNotReady, SandboxEnded, Unavailable,
            DeadlineExceeded: as :meth:`exec`.
            OSError: writing local_dir failed.
        """
        req, dest, what = self._download_request(remote_path, local_dir, max_bytes)
        deadline = self._client._deadline(timeout)
        addr, stub = self._client._connect(deadline, f"download {remote_path} from {self.id}")
        req.min_index = self._index()
        with _archive.Receiver(what, req.max_bytes or MAX_ARCHIVE) as recv:
            stream = stub.DownloadArchive(req, timeout=max(deadline - time.monotonic(), 0.001))
            try:
                for m in stream:
                    recv.add(m.data)
            except grpc.RpcError as e:
                raise self._sent_error(addr, f"download {remote_path}", e) from None
            finally:
                stream.cancel()
            _archive.extract(recv.spool(), dest, _archive.base_name(remote_path), what)
            return recv.n

    # -- snapshots and lifetime ------------------------------------------------

    def snapshot(self, name: str = "", *, timeout: Optional[float] = None) -> SnapshotInfo:
        """Commit the READY sandbox's files into an image on its worker (the
        container is paused while they are copied; memory and processes are
        not kept) and record it as a snapshot, from which new sandboxes
        start with those files (``client.sandbox(from_snapshot=snap.id)``).

        Not retried once sent (a retry would take a second snapshot): after
        :class:`Unavailable`, :meth:`Client.list_snapshots` says whether it
        was taken. A NOT_LEADER answer (nothing was done) is followed.

        Args:
            name: for people, at most 128 bytes of printable ASCII; may be "".
            timeout: deadline in seconds (default: the client's); committing
                a large sandbox takes a while.

        Returns:
            The snapshot (:data:`SnapshotInfo`: ``id``, ``name``,
            ``worker_id``, ``size_bytes``...).

        Raises:
            InvalidArgument: a bad name (before any RPC).
            SnapshotQuotaExceeded: the tenant holds its maximum of
                snapshots: delete one.
            SandboxNotFound, SandboxNotReady, SandboxEnded, Unavailable,
            DeadlineExceeded: as :meth:`exec`.
        """
        req = self._snapshot_request(name)
        deadline = self._client._deadline(timeout)
        r = _core.Retry(self._client._core, "SnapshotSandbox", deadline)
        while True:
            addr, stub = self._client._connect(deadline, f"snapshot of {self.id}")
            req.min_index = self._index()
            try:
                res = stub.SnapshotSandbox(req, timeout=max(deadline - time.monotonic(), 0.001))
                break
            except grpc.RpcError as e:
                pause = self._snapshot_failed(r, addr, e)
            if pause > 0:
                time.sleep(pause)
        self._client._observe(res.index)
        return res.snapshot

    def set_timeout(self, seconds: Seconds, *, timeout: Optional[float] = None) -> SandboxInfo:
        """Make the live sandbox end (EXPIRED) this long from now, sooner or
        later than before. Retried through leader changes (a retry moves
        the end by its delay only).

        Args:
            seconds: seconds (or a ``timedelta``) from now, rounded up to
                whole seconds: 1 s to 7 days; its whole lifetime from
                creation stays within 7 days.
            timeout: deadline of the call in seconds (default: the
                client's).

        Returns:
            The ``Sandbox`` message with its new ``lifetime_seconds`` (from
            creation; also kept in :attr:`info`).

        Raises:
            InvalidArgument: out of bounds (before any RPC; or the head's,
                whose message says the most it may be now).
            SandboxNotFound: no such sandbox.
            SandboxEnded: it ended (a subclass says how).
            DeadlineExceeded: no head answered in time.
        """
        req = self._timeout_request(seconds)
        req.min_index = self._index()
        return self._set_timeout_done(self._client._call("SetSandboxTimeout", req, timeout, sandbox=True))

    def pause(self, *, timeout: Optional[float] = None) -> SandboxInfo:
        """Freeze the sandbox's processes (docker pause: its CPU is released,
        its memory, files and processes kept). It is PAUSED on every head
        until :meth:`resume`: its execs, file calls and snapshots raise
        :class:`~megaflow.SandboxPaused` meanwhile, and its idle timeout
        does not count (its lifetime does). Pausing a PAUSED sandbox
        changes nothing. Retried through leader changes and head failures
        (it is idempotent).

        Args:
            timeout: deadline of the call in seconds (default: the
                client's).

        Returns:
            The ``Sandbox`` message, PAUSED (also kept in :attr:`info`).

        Raises:
            SandboxNotFound: no such sandbox.
            SandboxNotReady: it has not started yet.
            SandboxBusy: execs or file calls run in it: pause it once they end.
            SandboxEnded: it ended (a subclass says how).
            DeadlineExceeded: no head answered in time.
        """
        method, req = self._pause_request(True)
        return self._set_timeout_done(self._client._call(method, req, timeout, sandbox=True))

    def resume(self, *, timeout: Optional[float] = None) -> SandboxInfo:
        """Thaw a PAUSED sandbox: it is READY again, and its idle timeout
        counts afresh from now. Resuming a READY sandbox changes nothing.
        Retried as :meth:`pause`.

        Returns:
            The ``Sandbox`` message, READY (also kept in :attr:`info`).

        Raises:
            SandboxNotFound, SandboxNotReady, SandboxEnded, DeadlineExceeded:
                as :meth:`pause`.
        """
        method, req = self._pause_request(False)
        return self._set_timeout_done(self._client._call(method, req, timeout, sandbox=True))

# -- client side -------------------------------------------------------------


def create(client: "Client", *, image: Optional[str], cpu_millis: Optional[int] = None, cpu: Optional[Any] = None,
           memory: Optional[Any] = None, env: Optional[Mapping[str, str]] = None, working_dir: Optional[str] = None,
           network: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
           lifetime: Optional[Seconds] = None, idle_timeout: Optional[Seconds] = None,
           wait_ready: Optional[Seconds] = 120.0, id: Optional[str] = None, tenant: Optional[str] = None,
           from_snapshot: Optional[Union[str, SnapshotInfo]] = None, timeout: Optional[float] = None) -> Sandbox:
    """:meth:`Client.sandbox`'s body (documented there)."""
    sid, req, wait_s, call_timeout = create_request(
        client, image=image, cpu_millis=cpu_millis, cpu=cpu, memory=memory, env=env, working_dir=working_dir,
        network=network, labels=labels, lifetime=lifetime, idle_timeout=idle_timeout, wait_ready=wait_ready, id=id,
        tenant=tenant, from_snapshot=from_snapshot, timeout=timeout)
    res = client._call("CreateSandbox", req, call_timeout, sandbox=True)
    return created(client, Sandbox(client, sid, res.sandbox), wait_s)


def created(client: Any, s: SandboxBase, wait_s: float) -> Any:
    """The handle of a sandbox just created: the index noted, and with
    wait_s, an error raised if it ended instead of starting.

    Raises:
        SandboxEnded: the subclass of how it ended, with the handle.
    """
    client._observe(s.info.index)
    if wait_s > 0 and s.info.state not in _LIVE:
        raise _ended(s, s.info)
    return s


def create_request(client: Any, *, image: Optional[str], cpu_millis: Optional[int], cpu: Optional[Any], memory: Optional[Any],
                   env: Optional[Mapping[str, str]], working_dir: Optional[str], network: Optional[str],
                   labels: Optional[Mapping[str, str]], lifetime: Optional[Seconds], idle_timeout: Optional[Seconds],
                   wait_ready: Optional[Seconds], id: Optional[str], tenant: Optional[str],
                   timeout: Optional[float],
                   from_snapshot: Optional[Union[str, SnapshotInfo]] = None
                   ) -> Tuple[str, sbx.CreateSandboxRequest, float, float]:
    """The checked CreateSandbox request of ``client.sandbox(...)``: image
    or from_snapshot (a snapshot id or its :data:`SnapshotInfo`), not
    both; min_index the newest index the client has seen, so that a fork
    of a snapshot just taken through another head finds it.

    Returns:
        (sandbox id, request, seconds to wait for READY, the call's timeout).

    Raises:
        InvalidArgument: a bad argument.
    """
    sid = id or new_sandbox_id()
    _check_id("id", sid)
    if from_snapshot is not None:
        if image:
            raise InvalidArgument(f"megaflow: sandbox {sid}: both image {image!r} and from_snapshot given; give one "
                                  f"(a snapshot brings its own image)")
        spec = sbx.SandboxCreateSpec(id=sid, from_snapshot=snapshot_id(f"sandbox {sid}: from_snapshot", from_snapshot))
    elif not isinstance(image, str) or not image.strip():
        raise InvalidArgument(f"megaflow: sandbox {sid}: image is empty; name the image to run, e.g. "
                              f"python:3.12-slim, or give from_snapshot")
    else:
        spec = sbx.SandboxCreateSpec(id=sid, image=image)
    t = client.tenant if tenant is None else tenant
    if t:
        if p := _ident_problem(t):
            raise InvalidArgument(f"megaflow: sandbox {sid}: tenant: {p}")
        spec.tenant = t
    if cpu_millis is not None and cpu is not None:
        raise InvalidArgument(f"megaflow: sandbox {sid}: give cpu_millis or cpu, not both")
    if cpu_millis is not None:
        if isinstance(cpu_millis, bool) or not isinstance(cpu_millis, int) or not 0 <= cpu_millis <= 1 << 40:
            raise InvalidArgument(f"megaflow: sandbox {sid}: cpu_millis {cpu_millis!r} is out of range: "
                                  f"millicores, 0 (the cluster's default) to {1 << 40}")
        spec.cpu_millis = cpu_millis
    try:
        if cpu is not None:
            spec.cpu_millis = parse_cpu(cpu)
        if memory is not None:
            spec.memory_bytes = parse_memory(memory)
    except InvalidArgument as e:
        raise InvalidArgument(f"megaflow: sandbox {sid}: {e.message}") from None
    if spec.memory_bytes > 1 << 50:
        raise InvalidArgument(f"megaflow: sandbox {sid}: memory {memory!r} is over the limit of {1 << 50} bytes")
    spec.env.update(_env(sid, env))
    if working_dir:
        if not isinstance(working_dir, str) or not working_dir.startswith("/") or len(working_dir.encode()) > MAX_PATH:
            raise InvalidArgument(f"megaflow: sandbox {sid}: working_dir {working_dir!r} must be an absolute path "
                                  f"of at most {MAX_PATH} bytes")
        spec.working_dir = working_dir
    if network:
        if not isinstance(network, str):
            raise InvalidArgument(f"megaflow: sandbox {sid}: network {network!r} is not a network mode, e.g. \"none\" or \"bridge\"")
        spec.network = network
    for k, v in (labels or {}).items():
        if not isinstance(k, str) or not isinstance(v, str) or not k:
            raise InvalidArgument(f"megaflow: sandbox {sid}: label {k!r}={v!r}: keys and values must be strings, keys non-empty")
        spec.labels[k] = v
    if lifetime is not None:
        spec.lifetime_seconds = math.ceil(_seconds(lifetime, "lifetime", MAX_SECONDS))
    if idle_timeout is not None:
        spec.idle_timeout_seconds = math.ceil(_seconds(idle_timeout, "idle_timeout", MAX_SECONDS))
    wait_s = 0.0 if wait_ready is None else _seconds(wait_ready, "wait_ready", MAX_WAIT_READY_S)
    req = sbx.CreateSandboxRequest(spec=spec, wait_ready_millis=math.ceil(wait_s * 1000),
                                   min_index=client._read().min_index)
    if timeout is not None:
        client._deadline(timeout)  # checks it
    return sid, req, wait_s, (client.timeout + wait_s) if timeout is None else timeout


def get(client: "Client", sandbox_id: str, timeout: Optional[float]) -> Sandbox:
    """:meth:`Client.get_sandbox`'s body."""
    _check_id("sandbox_id", sandbox_id)
    s = Sandbox(client, sandbox_id)
    s.refresh(timeout=timeout)
    return s


def list_(client: "Client", tenant: Optional[str], all: bool, timeout: Optional[float]) -> List[SandboxInfo]:
    """:meth:`Client.list_sandboxes`'s body."""
    out: List[SandboxInfo] = []
    token = ""
    while True:  # every page: the heads answer at most 1000 per call
        res = client._call("ListSandboxes", list_request(client, tenant, all, token), timeout, sandbox=True)
        out.extend(res.sandboxes)
        token = res.next_page_token
        if not token:
            return out


def list_request(client: Any, tenant: Optional[str], all: bool, page_token: str = "") -> sbx.ListSandboxesRequest:
    """The checked ListSandboxes request for the page after page_token
    ("" for the first), of up to 1000 sandboxes (the heads' bound).

    Raises:
        InvalidArgument: a malformed tenant.
    """
    t = client.tenant if tenant is None else tenant
    if t and (p := _ident_problem(t)):
        raise InvalidArgument(f"megaflow: list_sandboxes: tenant: {p}")
    # min_index: the client's session index, so that a follower's answer
    # is not older than this client's own writes (or its sync_session).
    return sbx.ListSandboxesRequest(tenant=t, all=bool(all), page_size=1000, page_token=page_token,
                                    min_index=client._read().min_index)


def snapshot_id(field: str, snap: Any) -> str:
    """The id of a snapshot given as its id or its :data:`SnapshotInfo`.

    Raises:
        InvalidArgument: not "snap-" then 1 to 64 of [a-z0-9].
    """
    sid = snap.id if isinstance(snap, SnapshotInfo) else snap
    rest = sid[5:] if isinstance(sid, str) and sid.startswith("snap-") else None
    if not rest or len(rest) > MAX_SNAPSHOT_ID_SUFFIX or not set(rest) <= _ID_CHARS:
        raise InvalidArgument(f"megaflow: {field} {sid!r} is not a snapshot id: want \"snap-\" then 1 to "
                              f"{MAX_SNAPSHOT_ID_SUFFIX} of [a-z0-9], as Sandbox.snapshot returns")
    return sid


def list_snapshots(client: "Client", tenant: Optional[str], timeout: Optional[float]) -> List[SnapshotInfo]:
    """:meth:`Client.list_snapshots`'s body."""
    res = client._call("ListSnapshots", list_snapshots_request(client, tenant), timeout, sandbox=True)
    return list(res.snapshots)


def list_snapshots_request(client: Any, tenant: Optional[str]) -> sbx.ListSnapshotsRequest:
    """The checked ListSnapshots request: tenant None is the client's,
    "" every tenant's.

    Raises:
        InvalidArgument: a malformed tenant.
    """
    t = client.tenant if tenant is None else tenant
    if not isinstance(t, str):
        raise InvalidArgument(f"megaflow: list_snapshots: tenant {t!r} is not a string")
    if t and (p := _ident_problem(t)):
        raise InvalidArgument(f"megaflow: list_snapshots: tenant: {p}")
    return sbx.ListSnapshotsRequest(tenant=t, min_index=client._read().min_index)


def delete_snapshot(client: "Client", snap: Union[str, SnapshotInfo], timeout: Optional[float]) -> None:
    """:meth:`Client.delete_snapshot`'s body."""
    res = client._call("DeleteSnapshot", delete_snapshot_request(client, snap), timeout, sandbox=True)
    client._observe(res.index)


def delete_snapshot_request(client: Any, snap: Union[str, SnapshotInfo]) -> sbx.DeleteSnapshotRequest:
    """The checked DeleteSnapshot request.

    Raises:
        InvalidArgument: not a snapshot id.
    """
    return sbx.DeleteSnapshotRequest(id=snapshot_id("delete_snapshot:", snap),
                                     min_index=client._read().min_index)


def _ended(s: SandboxBase, info: SandboxInfo) -> MegaflowError:
    name = sandbox_state_name(info.state)
    reason = "SANDBOX_" + name
    from ._proto import types_pb2 as pb
    code = pb.ReasonCode.Name(info.reason_code).replace("REASON_CODE_", "") if info.reason_code else "-"
    cls = error_class(grpc.StatusCode.FAILED_PRECONDITION, reason)
    e = cls(f"megaflow: sandbox {s.id} is {name} ({code}: {info.reason or 'no reason given'}); "
            f"its files and processes are gone: create a new sandbox", grpc.StatusCode.FAILED_PRECONDITION, reason)
    if isinstance(e, SandboxEnded):
        e.sandbox = s
    return e


# -- local checks (the head's, before any RPC) ---------------------------------


def _check_id(field: str, sid: Any) -> None:
    rest = sid[4:] if isinstance(sid, str) and sid.startswith("sbx-") else None
    if not rest or len(rest) > MAX_ID_SUFFIX or not set(rest) <= _ID_CHARS:
        raise InvalidArgument(f"megaflow: {field} {sid!r} is not a sandbox id: want \"sbx-\" then 1 to "
                              f"{MAX_ID_SUFFIX} of [a-z0-9], as Client.sandbox returns")


def _seconds(value: Any, field: str, maximum: float) -> float:
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise InvalidArgument(f"megaflow: {field}: {value!r} is not a duration; use seconds or a datetime.timedelta")
    if not 0 <= value <= maximum:
        raise InvalidArgument(f"megaflow: {field}: {value!r} s is out of range: 0 to {maximum:g} s")
    return float(value)


def _argv(sid: str, cmd: Any) -> List[str]:
    if isinstance(cmd, str):
        if not cmd.strip():
            raise InvalidArgument(f"megaflow: exec in {sid}: the command is empty")
        return ["sh", "-c", cmd]
    if isinstance(cmd, (bytes, bytearray)) or not isinstance(cmd, Sequence):
        raise InvalidArgument(f"megaflow: exec in {sid}: cmd {cmd!r} is neither a list of strings (argv) nor a "
                              f"string (run by sh -c)")
    argv = list(cmd)
    if not argv or len(argv) > MAX_ARGV:
        raise InvalidArgument(f"megaflow: exec in {sid}: argv has {len(argv)} elements; give 1 to {MAX_ARGV}")
    for a in argv:
        if not isinstance(a, str) or "\x00" in a:
            raise InvalidArgument(f"megaflow: exec in {sid}: argv element {a!r} is not a string without NUL")
    if not argv[0]:
        raise InvalidArgument(f"megaflow: exec in {sid}: argv[0] is empty; name the program")
    return argv


def _env(sid: str, env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise InvalidArgument(f"megaflow: sandbox {sid}: env must be a mapping of str to str, not {type(env).__name__}")
    if len(env) > MAX_ENV_ENTRIES:
        raise InvalidArgument(f"megaflow: sandbox {sid}: env has {len(env)} entries; the limit is {MAX_ENV_ENTRIES}")
    size = 0
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or "=" in k or "\x00" in k + v:
            raise InvalidArgument(f"megaflow: sandbox {sid}: env {k!r}={v!r}: names and values must be strings, "
                                  f"names non-empty without '=', no NUL")
        size += len(k.encode()) + len(v.encode())
    if size > MAX_ENV_BYTES:
        raise InvalidArgument(f"megaflow: sandbox {sid}: env holds {size} bytes; the limit is {MAX_ENV_BYTES}")
    return dict(env)


def _cwd(sid: str, cwd: Optional[str]) -> str:
    if cwd is None or cwd == "":
        return ""
    if not isinstance(cwd, str) or not cwd.startswith("/") or len(cwd.encode()) > MAX_PATH or "\x00" in cwd:
        raise InvalidArgument(f"megaflow: exec in {sid}: cwd {cwd!r} must be an absolute path of at most {MAX_PATH} bytes")
    return cwd


def _path(sid: str, path: Any) -> None:
    import posixpath
    if (not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) in ("/", "//")
            or len(path.encode()) > MAX_PATH or "\x00" in path):
        raise InvalidArgument(f"megaflow: sandbox {sid}: path {path!r} must be an absolute file path of at most "
                              f"{MAX_PATH} bytes, e.g. /tmp/main.py")


def _data(sid: str, field: str, data: Any, limit: int) -> bytes:
    if data is None:
        return b""
    if isinstance(data, str):
        b = data.encode("utf-8")
    elif isinstance(data, (bytes, bytearray, memoryview)):
        b = bytes(data)
    else:
        raise InvalidArgument(f"megaflow: sandbox {sid}: {field} must be bytes or str, not {type(data).__name__}")
    if len(b) > limit:
        raise InvalidArgument(f"megaflow: sandbox {sid}: {field} of {len(b)} bytes; the limit is {limit}")
    return b

