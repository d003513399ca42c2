from . import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

ATTEMPT_EVENT_KIND_ARTIFACTS_LANDED: AttemptEventKind
ATTEMPT_EVENT_KIND_EXITED: AttemptEventKind
ATTEMPT_EVENT_KIND_FAILED: AttemptEventKind
ATTEMPT_EVENT_KIND_SERVICE_READY: AttemptEventKind
ATTEMPT_EVENT_KIND_STARTED: AttemptEventKind
ATTEMPT_EVENT_KIND_STOPPED: AttemptEventKind
ATTEMPT_EVENT_KIND_TIMED_OUT: AttemptEventKind
ATTEMPT_EVENT_KIND_UNSPECIFIED: AttemptEventKind
DESCRIPTOR: _descriptor.FileDescriptor
WORKER_STATUS_ALIVE: WorkerStatus
WORKER_STATUS_DOWN: WorkerStatus
WORKER_STATUS_LEFT: WorkerStatus
WORKER_STATUS_UNSPECIFIED: WorkerStatus

class Ack(_message.Message):
    __slots__ = ["seq"]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ["admission_policy", "admission_source", "artifact_inputs", "attempt", "env", "gpu_uuids", "graph_id", "leader_term", "session_ends", "spec", "task_id", "tenant"]
    class ArtifactInputsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ADMISSION_POLICY_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_SOURCE_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_INPUTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    GPU_UUIDS_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_TERM_FIELD_NUMBER: _ClassVar[int]
    SESSION_ENDS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    admission_policy: _types_pb2.AdmissionPolicy
    admission_source: _types_pb2.AdmissionPolicySource
    artifact_inputs: _containers.ScalarMap[str, int]
    attempt: int
    env: _containers.ScalarMap[str, str]
    gpu_uuids: _containers.RepeatedScalarFieldContainer[str]
    graph_id: str
    leader_term: int
    session_ends: bool
    spec: _types_pb2.TaskSpec
    task_id: str
    tenant: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., leader_term: _Optional[int] = ..., graph_id: _Optional[str] = ..., tenant: _Optional[str] = ..., spec: _Optional[_Union[_types_pb2.TaskSpec, _Mapping]] = ..., gpu_uuids: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., session_ends: bool = ..., artifact_inputs: _Optional[_Mapping[str, int]] = ..., admission_policy: _Optional[_Union[_types_pb2.AdmissionPolicy, _Mapping]] = ..., admission_source: _Optional[_Union[_types_pb2.AdmissionPolicySource, str]] = ...) -> None: ...

class AssignmentBatch(_message.Message):
    __slots__ = ["assignments"]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    def __init__(self, assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ...) -> None: ...

class AttemptEvent(_message.Message):
    __slots__ = ["artifacts_pending", "attempt", "container_id", "endpoint", "exit_code", "kind", "not_retryable", "oom_killed", "reason", "reason_code", "result", "task_id", "unix_nanos"]
    ARTIFACTS_PENDING_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NOT_RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    artifacts_pending: bool
    attempt: int
    container_id: str
    endpoint: str
    exit_code: int
    kind: AttemptEventKind
    not_retryable: bool
    oom_killed: bool
    reason: str
    reason_code: _types_pb2.ReasonCode
    result: bytes
    task_id: str
    unix_nanos: int
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., kind: _Optional[_Union[AttemptEventKind, str]] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., result: _Optional[bytes] = ..., unix_nanos: _Optional[int] = ..., oom_killed: bool = ..., container_id: _Optional[str] = ..., not_retryable: bool = ..., artifacts_pending: bool = ..., endpoint: _Optional[str] = ..., reason_code: _Optional[_Union[_types_pb2.ReasonCode, str]] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ["events", "seq"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AttemptEvent]
    seq: int
    def __init__(self, seq: _Optional[int] = ..., events: _Optional[_Iterable[_Union[AttemptEvent, _Mapping]]] = ...) -> None: ...

class GpuDevice(_message.Message):
    __slots__ = ["memory_bytes", "model", "nvlink_peers", "unhealthy", "uuid"]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NVLINK_PEERS_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    memory_bytes: int
    model: str
    nvlink_peers: _containers.RepeatedScalarFieldContainer[str]
    unhealthy: str
    uuid: str
    def __init__(self, uuid: _Optional[str] = ..., model: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., nvlink_peers: _Optional[_Iterable[str]] = ..., unhealthy: _Optional[str] = ...) -> None: ...

class GpuHealthReport(_message.Message):
    __slots__ = ["unhealthy"]
    class UnhealthyEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    UNHEALTHY_FIELD_NUMBER: _ClassVar[int]
    unhealthy: _containers.ScalarMap[str, str]
    def __init__(self, unhealthy: _Optional[_Mapping[str, str]] = ...) -> None: ...

class HeadMessage(_message.Message):
    __slots__ = ["ack", "assign", "assignments", "lease_ack", "pool_targets", "snapshots", "stop", "welcome"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    ASSIGN_FIELD_NUMBER: _ClassVar[int]
    LEASE_ACK_FIELD_NUMBER: _ClassVar[int]
    POOL_TARGETS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ack: Ack
    assign: Assignment
    assignments: AssignmentBatch
    lease_ack: LeaseAck
    pool_targets: PoolTargets
    snapshots: WorkerSnapshots
    stop: StopAttempt
    welcome: Welcome
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., assign: _Optional[_Union[Assignment, _Mapping]] = ..., stop: _Optional[_Union[StopAttempt, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., pool_targets: _Optional[_Union[PoolTargets, _Mapping]] = ..., lease_ack: _Optional[_Union[LeaseAck, _Mapping]] = ..., snapshots: _Optional[_Union[WorkerSnapshots, _Mapping]] = ..., assignments: _Optional[_Union[AssignmentBatch, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ["info", "unix_nanos"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    info: WorkerInfo
    unix_nanos: int
    def __init__(self, unix_nanos: _Optional[int] = ..., info: _Optional[_Union[WorkerInfo, _Mapping]] = ...) -> None: ...

class LeaseAck(_message.Message):
    __slots__ = ["heartbeat_unix_nanos", "lease_margin_millis", "lease_millis"]
    HEARTBEAT_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MARGIN_MILLIS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MILLIS_FIELD_NUMBER: _ClassVar[int]
    heartbeat_unix_nanos: int
    lease_margin_millis: int
    lease_millis: int
    def __init__(self, heartbeat_unix_nanos: _Optional[int] = ..., lease_millis: _Optional[int] = ..., lease_margin_millis: _Optional[int] = ...) -> None: ...

class PoolTargets(_message.Message):
    __slots__ = ["targets"]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[_types_pb2.PoolTarget]
    def __init__(self, targets: _Optional[_Iterable[_Union[_types_pb2.PoolTarget, _Mapping]]] = ...) -> None: ...

class RunningAttempt(_message.Message):
    __slots__ = ["attempt", "container_id", "started", "task_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    container_id: str
    started: bool
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., container_id: _Optional[str] = ..., started: bool = ...) -> None: ...

class StopAttempt(_message.Message):
    __slots__ = ["attempt", "reason", "task_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    reason: str
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ["cluster_id", "leader_id", "lease_margin_millis", "lease_millis", "relay_key", "stops", "term"]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_MARGIN_MILLIS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MILLIS_FIELD_NUMBER: _ClassVar[int]
    RELAY_KEY_FIELD_NUMBER: _ClassVar[int]
    STOPS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    leader_id: str
    lease_margin_millis: int
    lease_millis: int
    relay_key: bytes
    stops: _containers.RepeatedCompositeFieldContainer[StopAttempt]
    term: int
    def __init__(self, leader_id: _Optional[str] = ..., term: _Optional[int] = ..., stops: _Optional[_Iterable[_Union[StopAttempt, _Mapping]]] = ..., cluster_id: _Optional[str] = ..., lease_millis: _Optional[int] = ..., lease_margin_millis: _Optional[int] = ..., relay_key: _Optional[bytes] = ...) -> None: ...

class Worker(_message.Message):
    __slots__ = ["active_attempts", "allocated", "info", "lease_expires_unix_nanos", "lease_renewed_unix_nanos", "modify_index", "reason", "status", "update_unix_nanos"]
    ACTIVE_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    LEASE_RENEWED_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    MODIFY_INDEX_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    active_attempts: int
    allocated: _types_pb2.Resources
    info: WorkerInfo
    lease_expires_unix_nanos: int
    lease_renewed_unix_nanos: int
    modify_index: int
    reason: str
    status: WorkerStatus
    update_unix_nanos: int
    def __init__(self, info: _Optional[_Union[WorkerInfo, _Mapping]] = ..., status: _Optional[_Union[WorkerStatus, str]] = ..., reason: _Optional[str] = ..., allocated: _Optional[_Union[_types_pb2.Resources, _Mapping]] = ..., update_unix_nanos: _Optional[int] = ..., modify_index: _Optional[int] = ..., active_attempts: _Optional[int] = ..., lease_renewed_unix_nanos: _Optional[int] = ..., lease_expires_unix_nanos: _Optional[int] = ...) -> None: ...

class WorkerHello(_message.Message):
    __slots__ = ["accepts_assignment_batches", "info", "running", "wire_version"]
    ACCEPTS_ASSIGNMENT_BATCHES_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WIRE_VERSION_FIELD_NUMBER: _ClassVar[int]
    accepts_assignment_batches: bool
    info: WorkerInfo
    running: _containers.RepeatedCompositeFieldContainer[RunningAttempt]
    wire_version: int
    def __init__(self, info: _Optional[_Union[WorkerInfo, _Mapping]] = ..., running: _Optional[_Iterable[_Union[RunningAttempt, _Mapping]]] = ..., wire_version: _Optional[int] = ..., accepts_assignment_batches: bool = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ["addr", "capacity", "gpus", "host", "id", "images", "instance", "labels", "max_concurrent_starts", "runtime", "version"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ADDR_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_STARTS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    addr: str
    capacity: _types_pb2.Resources
    gpus: _containers.RepeatedCompositeFieldContainer[GpuDevice]
    host: str
    id: str
    images: _containers.RepeatedScalarFieldContainer[str]
    instance: str
    labels: _containers.ScalarMap[str, str]
    max_concurrent_starts: int
    runtime: str
    version: str
    def __init__(self, id: _Optional[str] = ..., capacity: _Optional[_Union[_types_pb2.Resources, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., runtime: _Optional[str] = ..., images: _Optional[_Iterable[str]] = ..., max_concurrent_starts: _Optional[int] = ..., addr: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[GpuDevice, _Mapping]]] = ..., instance: _Optional[str] = ..., host: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ["events", "gpu_health", "heartbeat", "hello"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    GPU_HEALTH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    events: EventBatch
    gpu_health: GpuHealthReport
    heartbeat: Heartbeat
    hello: WorkerHello
    def __init__(self, hello: _Optional[_Union[WorkerHello, _Mapping]] = ..., events: _Optional[_Union[EventBatch, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., gpu_health: _Optional[_Union[GpuHealthReport, _Mapping]] = ...) -> None: ...

class WorkerSnapshots(_message.Message):
    __slots__ = ["ids", "truncated"]
    IDS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., truncated: bool = ...) -> None: ...

class WorkerStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class AttemptEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
