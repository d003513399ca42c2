from . import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
SANDBOX_STATE_CLOSED: SandboxState
SANDBOX_STATE_EXPIRED: SandboxState
SANDBOX_STATE_FAILED: SandboxState
SANDBOX_STATE_LOST: SandboxState
SANDBOX_STATE_PAUSED: SandboxState
SANDBOX_STATE_PENDING: SandboxState
SANDBOX_STATE_READY: SandboxState
SANDBOX_STATE_STARTING: SandboxState
SANDBOX_STATE_UNSPECIFIED: SandboxState

class CloseSandboxRequest(_message.Message):
    __slots__ = ["id", "min_index"]
    ID_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    min_index: int
    def __init__(self, id: _Optional[str] = ..., min_index: _Optional[int] = ...) -> None: ...

class CloseSandboxResponse(_message.Message):
    __slots__ = ["sandbox"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class CommitSnapshotRequest(_message.Message):
    __slots__ = ["attempt", "image", "sandbox_id", "snapshot_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    image: str
    sandbox_id: str
    snapshot_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., attempt: _Optional[int] = ..., snapshot_id: _Optional[str] = ..., image: _Optional[str] = ...) -> None: ...

class CommitSnapshotResponse(_message.Message):
    __slots__ = ["image_id", "size_bytes"]
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    image_id: str
    size_bytes: int
    def __init__(self, image_id: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class CreateSandboxRequest(_message.Message):
    __slots__ = ["min_index", "spec", "wait_ready_millis"]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    WAIT_READY_MILLIS_FIELD_NUMBER: _ClassVar[int]
    min_index: int
    spec: SandboxCreateSpec
    wait_ready_millis: int
    def __init__(self, spec: _Optional[_Union[SandboxCreateSpec, _Mapping]] = ..., wait_ready_millis: _Optional[int] = ..., min_index: _Optional[int] = ...) -> None: ...

class CreateSandboxResponse(_message.Message):
    __slots__ = ["existed", "sandbox"]
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ..., existed: bool = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ["id", "min_index"]
    ID_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    min_index: int
    def __init__(self, id: _Optional[str] = ..., min_index: _Optional[int] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ["index"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class GetSandboxRequest(_message.Message):
    __slots__ = ["id", "min_index"]
    ID_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    min_index: int
    def __init__(self, id: _Optional[str] = ..., min_index: _Optional[int] = ...) -> None: ...

class GetSandboxResponse(_message.Message):
    __slots__ = ["sandbox"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class ListSandboxesRequest(_message.Message):
    __slots__ = ["all", "min_index", "page_size", "page_token", "tenant"]
    ALL_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    all: bool
    min_index: int
    page_size: int
    page_token: str
    tenant: str
    def __init__(self, tenant: _Optional[str] = ..., all: bool = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., min_index: _Optional[int] = ...) -> None: ...

class ListSandboxesResponse(_message.Message):
    __slots__ = ["next_page_token", "sandboxes"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    sandboxes: _containers.RepeatedCompositeFieldContainer[Sandbox]
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[Sandbox, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ["min_index", "tenant"]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    min_index: int
    tenant: str
    def __init__(self, tenant: _Optional[str] = ..., min_index: _Optional[int] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ["snapshots"]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[Snapshot]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[Snapshot, _Mapping]]] = ...) -> None: ...

class PauseSandboxRequest(_message.Message):
    __slots__ = ["id", "min_index"]
    ID_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    min_index: int
    def __init__(self, id: _Optional[str] = ..., min_index: _Optional[int] = ...) -> None: ...

class PauseSandboxResponse(_message.Message):
    __slots__ = ["sandbox"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class RemoveSnapshotRequest(_message.Message):
    __slots__ = ["image", "snapshot_id"]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    image: str
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ..., image: _Optional[str] = ...) -> None: ...

class RemoveSnapshotResponse(_message.Message):
    __slots__ = ["existed"]
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: bool = ...) -> None: ...

class ResumeSandboxRequest(_message.Message):
    __slots__ = ["id", "min_index"]
    ID_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    min_index: int
    def __init__(self, id: _Optional[str] = ..., min_index: _Optional[int] = ...) -> None: ...

class ResumeSandboxResponse(_message.Message):
    __slots__ = ["sandbox"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class Sandbox(_message.Message):
    __slots__ = ["create_unix_nanos", "finish_unix_nanos", "from_snapshot", "id", "idle_timeout_seconds", "image", "index", "labels", "lifetime_seconds", "ready_unix_nanos", "reason", "reason_code", "state", "tenant", "worker_id"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CREATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    FINISH_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    FROM_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    READY_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    create_unix_nanos: int
    finish_unix_nanos: int
    from_snapshot: str
    id: str
    idle_timeout_seconds: int
    image: str
    index: int
    labels: _containers.ScalarMap[str, str]
    lifetime_seconds: int
    ready_unix_nanos: int
    reason: str
    reason_code: _types_pb2.ReasonCode
    state: SandboxState
    tenant: str
    worker_id: str
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., state: _Optional[_Union[SandboxState, str]] = ..., reason: _Optional[str] = ..., reason_code: _Optional[_Union[_types_pb2.ReasonCode, str]] = ..., worker_id: _Optional[str] = ..., create_unix_nanos: _Optional[int] = ..., ready_unix_nanos: _Optional[int] = ..., finish_unix_nanos: _Optional[int] = ..., image: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., lifetime_seconds: _Optional[int] = ..., idle_timeout_seconds: _Optional[int] = ..., index: _Optional[int] = ..., from_snapshot: _Optional[str] = ...) -> None: ...

class SandboxCreateSpec(_message.Message):
    __slots__ = ["cpu_millis", "env", "from_snapshot", "id", "idle_timeout_seconds", "image", "labels", "lifetime_seconds", "memory_bytes", "network", "tenant", "working_dir"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    FROM_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    env: _containers.ScalarMap[str, str]
    from_snapshot: str
    id: str
    idle_timeout_seconds: int
    image: str
    labels: _containers.ScalarMap[str, str]
    lifetime_seconds: int
    memory_bytes: int
    network: str
    tenant: str
    working_dir: str
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., image: _Optional[str] = ..., cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., env: _Optional[_Mapping[str, str]] = ..., working_dir: _Optional[str] = ..., network: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., lifetime_seconds: _Optional[int] = ..., idle_timeout_seconds: _Optional[int] = ..., from_snapshot: _Optional[str] = ...) -> None: ...

class SandboxDownloadArchiveRequest(_message.Message):
    __slots__ = ["attempt", "max_bytes", "min_index", "path", "sandbox_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    max_bytes: int
    min_index: int
    path: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., max_bytes: _Optional[int] = ..., min_index: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class SandboxDownloadArchiveResponse(_message.Message):
    __slots__ = ["data"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class SandboxExecExit(_message.Message):
    __slots__ = ["exit_code", "reason", "timed_out", "truncated"]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    reason: str
    timed_out: bool
    truncated: bool
    def __init__(self, exit_code: _Optional[int] = ..., timed_out: bool = ..., truncated: bool = ..., reason: _Optional[str] = ...) -> None: ...

class SandboxExecRequest(_message.Message):
    __slots__ = ["argv", "attempt", "cwd", "env", "min_index", "sandbox_id", "stdin", "timeout_millis"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    attempt: int
    cwd: str
    env: _containers.ScalarMap[str, str]
    min_index: int
    sandbox_id: str
    stdin: bytes
    timeout_millis: int
    def __init__(self, sandbox_id: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., stdin: _Optional[bytes] = ..., timeout_millis: _Optional[int] = ..., min_index: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class SandboxExecResponse(_message.Message):
    __slots__ = ["exit", "stderr", "stdout"]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    exit: SandboxExecExit
    stderr: bytes
    stdout: bytes
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[SandboxExecExit, _Mapping]] = ...) -> None: ...

class SandboxPauseCommand(_message.Message):
    __slots__ = ["attempt", "graph_id", "paused", "unix_nanos"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    graph_id: str
    paused: bool
    unix_nanos: int
    def __init__(self, graph_id: _Optional[str] = ..., attempt: _Optional[int] = ..., paused: bool = ..., unix_nanos: _Optional[int] = ...) -> None: ...

class SandboxReadFileRequest(_message.Message):
    __slots__ = ["attempt", "max_bytes", "min_index", "path", "sandbox_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    max_bytes: int
    min_index: int
    path: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., max_bytes: _Optional[int] = ..., min_index: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class SandboxReadFileResponse(_message.Message):
    __slots__ = ["data", "mode", "size"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mode: int
    size: int
    def __init__(self, data: _Optional[bytes] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ...) -> None: ...

class SandboxSetDeadlineCommand(_message.Message):
    __slots__ = ["deadline_seconds", "graph_id", "unix_nanos"]
    DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    deadline_seconds: int
    graph_id: str
    unix_nanos: int
    def __init__(self, graph_id: _Optional[str] = ..., deadline_seconds: _Optional[int] = ..., unix_nanos: _Optional[int] = ...) -> None: ...

class SandboxSetPausedRequest(_message.Message):
    __slots__ = ["attempt", "paused", "sandbox_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    paused: bool
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., attempt: _Optional[int] = ..., paused: bool = ...) -> None: ...

class SandboxSetPausedResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SandboxUploadArchiveRequest(_message.Message):
    __slots__ = ["attempt", "data", "min_index", "path", "sandbox_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    data: bytes
    min_index: int
    path: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., data: _Optional[bytes] = ..., min_index: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class SandboxUploadArchiveResponse(_message.Message):
    __slots__ = ["bytes"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    def __init__(self, bytes: _Optional[int] = ...) -> None: ...

class SandboxWriteFileRequest(_message.Message):
    __slots__ = ["attempt", "data", "min_index", "mode", "path", "sandbox_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    data: bytes
    min_index: int
    mode: int
    path: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., data: _Optional[bytes] = ..., mode: _Optional[int] = ..., min_index: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class SandboxWriteFileResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SetSandboxTimeoutRequest(_message.Message):
    __slots__ = ["id", "min_index", "timeout_seconds"]
    ID_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    id: str
    min_index: int
    timeout_seconds: int
    def __init__(self, id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., min_index: _Optional[int] = ...) -> None: ...

class SetSandboxTimeoutResponse(_message.Message):
    __slots__ = ["sandbox"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ["create_index", "create_unix_nanos", "id", "image", "image_id", "name", "sandbox_id", "size_bytes", "tenant", "unavailable", "worker_id"]
    CREATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    CREATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    create_index: int
    create_unix_nanos: int
    id: str
    image: str
    image_id: str
    name: str
    sandbox_id: str
    size_bytes: int
    tenant: str
    unavailable: str
    worker_id: str
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., image: _Optional[str] = ..., image_id: _Optional[str] = ..., size_bytes: _Optional[int] = ..., create_unix_nanos: _Optional[int] = ..., create_index: _Optional[int] = ..., unavailable: _Optional[str] = ...) -> None: ...

class SnapshotAddCommand(_message.Message):
    __slots__ = ["max_per_tenant", "snapshot"]
    MAX_PER_TENANT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    max_per_tenant: int
    snapshot: Snapshot
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., max_per_tenant: _Optional[int] = ...) -> None: ...

class SnapshotDeleteCommand(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class SnapshotSandboxRequest(_message.Message):
    __slots__ = ["min_index", "name", "sandbox_id"]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    min_index: int
    name: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., min_index: _Optional[int] = ...) -> None: ...

class SnapshotSandboxResponse(_message.Message):
    __slots__ = ["index", "snapshot"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    index: int
    snapshot: Snapshot
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., index: _Optional[int] = ...) -> None: ...

class SandboxState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
