from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

ADMISSION_POLICY_SOURCE_CLUSTER: AdmissionPolicySource
ADMISSION_POLICY_SOURCE_DEFAULT: AdmissionPolicySource
ADMISSION_POLICY_SOURCE_DEFAULT_ACL: AdmissionPolicySource
ADMISSION_POLICY_SOURCE_TENANT: AdmissionPolicySource
ADMISSION_POLICY_SOURCE_UNSPECIFIED: AdmissionPolicySource
DESCRIPTOR: _descriptor.FileDescriptor
EXECUTION_MODE_EPHEMERAL: ExecutionMode
EXECUTION_MODE_PERSISTENT: ExecutionMode
EXECUTION_MODE_UNSPECIFIED: ExecutionMode
GRAPH_STATE_CANCELLED: GraphState
GRAPH_STATE_FAILED: GraphState
GRAPH_STATE_RUNNING: GraphState
GRAPH_STATE_SUCCEEDED: GraphState
GRAPH_STATE_UNSPECIFIED: GraphState
REASON_CODE_CANCELLED_BY_USER: ReasonCode
REASON_CODE_CANCELLED_DEADLINE: ReasonCode
REASON_CODE_EXIT_CODE: ReasonCode
REASON_CODE_GANG: ReasonCode
REASON_CODE_GPU_UNHEALTHY: ReasonCode
REASON_CODE_LEASE_LAPSED: ReasonCode
REASON_CODE_NOT_ON_WORKER: ReasonCode
REASON_CODE_OOM: ReasonCode
REASON_CODE_QUEUED: ReasonCode
REASON_CODE_RESULT_NOTE: ReasonCode
REASON_CODE_RESULT_TOO_LARGE: ReasonCode
REASON_CODE_SANDBOX_IDLE: ReasonCode
REASON_CODE_SANDBOX_LOST: ReasonCode
REASON_CODE_SERVICE_GONE: ReasonCode
REASON_CODE_SERVICE_RESTART: ReasonCode
REASON_CODE_SERVING: ReasonCode
REASON_CODE_START_FAILED: ReasonCode
REASON_CODE_STOPPED_BY_WORKER: ReasonCode
REASON_CODE_STOPPED_WITH_GRAPH: ReasonCode
REASON_CODE_TIMEOUT: ReasonCode
REASON_CODE_UNPLACEABLE: ReasonCode
REASON_CODE_UNSPECIFIED: ReasonCode
REASON_CODE_UPSTREAM_FAILED: ReasonCode
REASON_CODE_WORKER_FAILED: ReasonCode
REASON_CODE_WORKER_LOST: ReasonCode
TASK_KIND_BATCH: TaskKind
TASK_KIND_SERVICE: TaskKind
TASK_KIND_UNSPECIFIED: TaskKind
TASK_STATE_ASSIGNED: TaskState
TASK_STATE_CANCELLED: TaskState
TASK_STATE_FAILED: TaskState
TASK_STATE_PENDING: TaskState
TASK_STATE_QUEUED: TaskState
TASK_STATE_RUNNING: TaskState
TASK_STATE_SUCCEEDED: TaskState
TASK_STATE_TIMED_OUT: TaskState
TASK_STATE_UNSPECIFIED: TaskState
TOKEN_ROLE_ADMIN: TokenRole
TOKEN_ROLE_READ: TokenRole
TOKEN_ROLE_SUBMIT: TokenRole
TOKEN_ROLE_UNSPECIFIED: TokenRole
TOKEN_ROLE_WORKER: TokenRole

class AdmissionPolicy(_message.Message):
    __slots__ = ["allowed_capabilities", "allowed_networks", "max_pids", "modify_index", "read_only_root_fs", "run_as_user", "tenant", "update_unix_nanos"]
    ALLOWED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_NETWORKS_FIELD_NUMBER: _ClassVar[int]
    MAX_PIDS_FIELD_NUMBER: _ClassVar[int]
    MODIFY_INDEX_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_ROOT_FS_FIELD_NUMBER: _ClassVar[int]
    RUN_AS_USER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    allowed_capabilities: _containers.RepeatedScalarFieldContainer[str]
    allowed_networks: _containers.RepeatedScalarFieldContainer[str]
    max_pids: int
    modify_index: int
    read_only_root_fs: bool
    run_as_user: str
    tenant: str
    update_unix_nanos: int
    def __init__(self, tenant: _Optional[str] = ..., allowed_networks: _Optional[_Iterable[str]] = ..., allowed_capabilities: _Optional[_Iterable[str]] = ..., read_only_root_fs: bool = ..., run_as_user: _Optional[str] = ..., max_pids: _Optional[int] = ..., modify_index: _Optional[int] = ..., update_unix_nanos: _Optional[int] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ["artifacts_pending", "assign_unix_nanos", "endpoint", "exit_code", "finish_unix_nanos", "gpu_uuids", "leader_term", "number", "paused", "ready_unix_nanos", "reason", "reason_code", "start_unix_nanos", "state", "worker_id"]
    ARTIFACTS_PENDING_FIELD_NUMBER: _ClassVar[int]
    ASSIGN_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    FINISH_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    GPU_UUIDS_FIELD_NUMBER: _ClassVar[int]
    LEADER_TERM_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    READY_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    START_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    artifacts_pending: bool
    assign_unix_nanos: int
    endpoint: str
    exit_code: int
    finish_unix_nanos: int
    gpu_uuids: _containers.RepeatedScalarFieldContainer[str]
    leader_term: int
    number: int
    paused: bool
    ready_unix_nanos: int
    reason: str
    reason_code: ReasonCode
    start_unix_nanos: int
    state: TaskState
    worker_id: str
    def __init__(self, number: _Optional[int] = ..., worker_id: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., reason: _Optional[str] = ..., assign_unix_nanos: _Optional[int] = ..., start_unix_nanos: _Optional[int] = ..., finish_unix_nanos: _Optional[int] = ..., exit_code: _Optional[int] = ..., leader_term: _Optional[int] = ..., gpu_uuids: _Optional[_Iterable[str]] = ..., artifacts_pending: bool = ..., endpoint: _Optional[str] = ..., ready_unix_nanos: _Optional[int] = ..., reason_code: _Optional[_Union[ReasonCode, str]] = ..., paused: bool = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ["attempt", "graph_id", "graph_state", "index", "reason", "reason_code", "seq", "task_id", "task_state", "unix_nanos", "worker_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_STATE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_STATE_FIELD_NUMBER: _ClassVar[int]
    UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    graph_id: str
    graph_state: GraphState
    index: int
    reason: str
    reason_code: ReasonCode
    seq: int
    task_id: str
    task_state: TaskState
    unix_nanos: int
    worker_id: str
    def __init__(self, index: _Optional[int] = ..., seq: _Optional[int] = ..., unix_nanos: _Optional[int] = ..., graph_id: _Optional[str] = ..., task_id: _Optional[str] = ..., task_state: _Optional[_Union[TaskState, str]] = ..., graph_state: _Optional[_Union[GraphState, str]] = ..., attempt: _Optional[int] = ..., reason: _Optional[str] = ..., worker_id: _Optional[str] = ..., reason_code: _Optional[_Union[ReasonCode, str]] = ...) -> None: ...

class Graph(_message.Message):
    __slots__ = ["archived_unix_nanos", "counts", "create_index", "create_unix_nanos", "deadline_seconds", "finish_unix_nanos", "id", "labels", "metrics", "modify_index", "name", "priority", "reason", "spec_digest", "state", "task_count", "tenant"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARCHIVED_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    CREATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    CREATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    MODIFY_INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    archived_unix_nanos: int
    counts: StateCounts
    create_index: int
    create_unix_nanos: int
    deadline_seconds: int
    finish_unix_nanos: int
    id: str
    labels: _containers.ScalarMap[str, str]
    metrics: GraphMetrics
    modify_index: int
    name: str
    priority: int
    reason: str
    spec_digest: bytes
    state: GraphState
    task_count: int
    tenant: str
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ..., priority: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., state: _Optional[_Union[GraphState, str]] = ..., task_count: _Optional[int] = ..., counts: _Optional[_Union[StateCounts, _Mapping]] = ..., create_unix_nanos: _Optional[int] = ..., finish_unix_nanos: _Optional[int] = ..., create_index: _Optional[int] = ..., modify_index: _Optional[int] = ..., deadline_seconds: _Optional[int] = ..., spec_digest: _Optional[bytes] = ..., reason: _Optional[str] = ..., metrics: _Optional[_Union[GraphMetrics, _Mapping]] = ..., archived_unix_nanos: _Optional[int] = ...) -> None: ...

class GraphMetrics(_message.Message):
    __slots__ = ["count", "field", "finished", "first_start_unix_nanos", "histogram", "last_finish_unix_nanos", "max", "mean", "min", "succeeded", "success_rate", "sum", "wall_millis"]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    FIRST_START_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    HISTOGRAM_FIELD_NUMBER: _ClassVar[int]
    LAST_FINISH_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_RATE_FIELD_NUMBER: _ClassVar[int]
    SUM_FIELD_NUMBER: _ClassVar[int]
    WALL_MILLIS_FIELD_NUMBER: _ClassVar[int]
    count: int
    field: str
    finished: int
    first_start_unix_nanos: int
    histogram: _containers.RepeatedScalarFieldContainer[int]
    last_finish_unix_nanos: int
    max: float
    mean: float
    min: float
    succeeded: int
    success_rate: float
    sum: float
    wall_millis: int
    def __init__(self, field: _Optional[str] = ..., finished: _Optional[int] = ..., succeeded: _Optional[int] = ..., success_rate: _Optional[float] = ..., count: _Optional[int] = ..., sum: _Optional[float] = ..., mean: _Optional[float] = ..., min: _Optional[float] = ..., max: _Optional[float] = ..., histogram: _Optional[_Iterable[int]] = ..., first_start_unix_nanos: _Optional[int] = ..., last_finish_unix_nanos: _Optional[int] = ..., wall_millis: _Optional[int] = ...) -> None: ...

class GraphSpec(_message.Message):
    __slots__ = ["deadline_seconds", "id", "labels", "name", "priority", "tasks", "tenant"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    deadline_seconds: int
    id: str
    labels: _containers.ScalarMap[str, str]
    name: str
    priority: int
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    tenant: str
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., priority: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., deadline_seconds: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ..., name: _Optional[str] = ...) -> None: ...

class HeadInfo(_message.Message):
    __slots__ = ["grpc_addr", "id", "leader", "raft_addr", "rules", "status", "suffrage", "version"]
    GRPC_ADDR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUFFRAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    grpc_addr: str
    id: str
    leader: bool
    raft_addr: str
    rules: int
    status: str
    suffrage: str
    version: str
    def __init__(self, id: _Optional[str] = ..., raft_addr: _Optional[str] = ..., grpc_addr: _Optional[str] = ..., suffrage: _Optional[str] = ..., leader: bool = ..., status: _Optional[str] = ..., version: _Optional[str] = ..., rules: _Optional[int] = ...) -> None: ...

class PoolTarget(_message.Message):
    __slots__ = ["admission_policy", "admission_source", "cpu_millis", "image", "memory_bytes", "modify_index", "size", "tenant", "update_unix_nanos", "worker_selector"]
    class WorkerSelectorEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ADMISSION_POLICY_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_SOURCE_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MODIFY_INDEX_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    WORKER_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    admission_policy: AdmissionPolicy
    admission_source: AdmissionPolicySource
    cpu_millis: int
    image: str
    memory_bytes: int
    modify_index: int
    size: int
    tenant: str
    update_unix_nanos: int
    worker_selector: _containers.ScalarMap[str, str]
    def __init__(self, image: _Optional[str] = ..., size: _Optional[int] = ..., worker_selector: _Optional[_Mapping[str, str]] = ..., tenant: _Optional[str] = ..., cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., modify_index: _Optional[int] = ..., update_unix_nanos: _Optional[int] = ..., admission_policy: _Optional[_Union[AdmissionPolicy, _Mapping]] = ..., admission_source: _Optional[_Union[AdmissionPolicySource, str]] = ...) -> None: ...

class Quota(_message.Message):
    __slots__ = ["cpu_millis", "gpus", "max_running", "memory_bytes", "modify_index", "tenant", "update_unix_nanos"]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MODIFY_INDEX_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    gpus: int
    max_running: int
    memory_bytes: int
    modify_index: int
    tenant: str
    update_unix_nanos: int
    def __init__(self, tenant: _Optional[str] = ..., max_running: _Optional[int] = ..., cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., gpus: _Optional[int] = ..., modify_index: _Optional[int] = ..., update_unix_nanos: _Optional[int] = ...) -> None: ...

class QuotaUsage(_message.Message):
    __slots__ = ["quota", "running", "used"]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    quota: Quota
    running: int
    used: Resources
    def __init__(self, quota: _Optional[_Union[Quota, _Mapping]] = ..., running: _Optional[int] = ..., used: _Optional[_Union[Resources, _Mapping]] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ["cpu_millis", "gpu_memory_bytes", "gpu_model", "gpus", "memory_bytes"]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    gpu_memory_bytes: int
    gpu_model: str
    gpus: int
    memory_bytes: int
    def __init__(self, cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., gpus: _Optional[int] = ..., gpu_model: _Optional[str] = ..., gpu_memory_bytes: _Optional[int] = ...) -> None: ...

class SandboxSpec(_message.Message):
    __slots__ = ["from_snapshot", "idle_timeout_seconds", "snapshot_worker"]
    FROM_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_WORKER_FIELD_NUMBER: _ClassVar[int]
    from_snapshot: str
    idle_timeout_seconds: int
    snapshot_worker: str
    def __init__(self, idle_timeout_seconds: _Optional[int] = ..., from_snapshot: _Optional[str] = ..., snapshot_worker: _Optional[str] = ...) -> None: ...

class ServiceSpec(_message.Message):
    __slots__ = ["name", "port", "readiness_http_path", "restart_policy", "tcp_probe"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    READINESS_HTTP_PATH_FIELD_NUMBER: _ClassVar[int]
    RESTART_POLICY_FIELD_NUMBER: _ClassVar[int]
    TCP_PROBE_FIELD_NUMBER: _ClassVar[int]
    name: str
    port: int
    readiness_http_path: str
    restart_policy: str
    tcp_probe: bool
    def __init__(self, name: _Optional[str] = ..., port: _Optional[int] = ..., readiness_http_path: _Optional[str] = ..., tcp_probe: bool = ..., restart_policy: _Optional[str] = ...) -> None: ...

class StateCounts(_message.Message):
    __slots__ = ["assigned", "cancelled", "failed", "pending", "queued", "running", "succeeded", "timed_out"]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    assigned: int
    cancelled: int
    failed: int
    pending: int
    queued: int
    running: int
    succeeded: int
    timed_out: int
    def __init__(self, pending: _Optional[int] = ..., queued: _Optional[int] = ..., assigned: _Optional[int] = ..., running: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., timed_out: _Optional[int] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ["attempts", "create_index", "create_unix_nanos", "dependents", "deps_remaining", "graph_id", "id", "lost_count", "modify_index", "not_before_unix_nanos", "priority", "queue_seq", "queued_unix_nanos", "reason", "reason_code", "restarts", "result", "retries_used", "spec", "state", "tenant", "update_unix_nanos"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    CREATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    DEPENDENTS_FIELD_NUMBER: _ClassVar[int]
    DEPS_REMAINING_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LOST_COUNT_FIELD_NUMBER: _ClassVar[int]
    MODIFY_INDEX_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QUEUED_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RETRIES_USED_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    create_index: int
    create_unix_nanos: int
    dependents: _containers.RepeatedScalarFieldContainer[str]
    deps_remaining: int
    graph_id: str
    id: str
    lost_count: int
    modify_index: int
    not_before_unix_nanos: int
    priority: int
    queue_seq: int
    queued_unix_nanos: int
    reason: str
    reason_code: ReasonCode
    restarts: int
    result: bytes
    retries_used: int
    spec: TaskSpec
    state: TaskState
    tenant: str
    update_unix_nanos: int
    def __init__(self, id: _Optional[str] = ..., graph_id: _Optional[str] = ..., tenant: _Optional[str] = ..., spec: _Optional[_Union[TaskSpec, _Mapping]] = ..., state: _Optional[_Union[TaskState, str]] = ..., reason: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., create_unix_nanos: _Optional[int] = ..., update_unix_nanos: _Optional[int] = ..., create_index: _Optional[int] = ..., modify_index: _Optional[int] = ..., result: _Optional[bytes] = ..., deps_remaining: _Optional[int] = ..., retries_used: _Optional[int] = ..., lost_count: _Optional[int] = ..., queue_seq: _Optional[int] = ..., priority: _Optional[int] = ..., dependents: _Optional[_Iterable[str]] = ..., not_before_unix_nanos: _Optional[int] = ..., queued_unix_nanos: _Optional[int] = ..., restarts: _Optional[int] = ..., reason_code: _Optional[_Union[ReasonCode, str]] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ["capabilities", "command", "depends_on", "env", "gang", "image", "kind", "max_retries", "mode", "name", "network", "node_selector", "output_paths", "priority", "resources", "run_on_upstream_failure", "runtime", "sandbox", "service", "session", "timeout_seconds", "type", "uses_services", "working_dir"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class NodeSelectorEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    GANG_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    NODE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PATHS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    RUN_ON_UPSTREAM_FAILURE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    USES_SERVICES_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    command: _containers.RepeatedScalarFieldContainer[str]
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    gang: str
    image: str
    kind: TaskKind
    max_retries: int
    mode: ExecutionMode
    name: str
    network: str
    node_selector: _containers.ScalarMap[str, str]
    output_paths: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    resources: Resources
    run_on_upstream_failure: bool
    runtime: str
    sandbox: SandboxSpec
    service: ServiceSpec
    session: str
    timeout_seconds: int
    type: str
    uses_services: _containers.RepeatedScalarFieldContainer[str]
    working_dir: str
    def __init__(self, name: _Optional[str] = ..., image: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., depends_on: _Optional[_Iterable[str]] = ..., type: _Optional[str] = ..., priority: _Optional[int] = ..., max_retries: _Optional[int] = ..., timeout_seconds: _Optional[int] = ..., mode: _Optional[_Union[ExecutionMode, str]] = ..., session: _Optional[str] = ..., run_on_upstream_failure: bool = ..., node_selector: _Optional[_Mapping[str, str]] = ..., output_paths: _Optional[_Iterable[str]] = ..., working_dir: _Optional[str] = ..., kind: _Optional[_Union[TaskKind, str]] = ..., service: _Optional[_Union[ServiceSpec, _Mapping]] = ..., uses_services: _Optional[_Iterable[str]] = ..., network: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ..., runtime: _Optional[str] = ..., gang: _Optional[str] = ..., sandbox: _Optional[_Union[SandboxSpec, _Mapping]] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ["accessor", "create_index", "create_unix_nanos", "expire_unix_nanos", "relay_key", "role", "secret_hash", "tenant"]
    ACCESSOR_FIELD_NUMBER: _ClassVar[int]
    CREATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    CREATE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    RELAY_KEY_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SECRET_HASH_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    accessor: str
    create_index: int
    create_unix_nanos: int
    expire_unix_nanos: int
    relay_key: bytes
    role: TokenRole
    secret_hash: bytes
    tenant: str
    def __init__(self, accessor: _Optional[str] = ..., secret_hash: _Optional[bytes] = ..., tenant: _Optional[str] = ..., role: _Optional[_Union[TokenRole, str]] = ..., create_unix_nanos: _Optional[int] = ..., expire_unix_nanos: _Optional[int] = ..., create_index: _Optional[int] = ..., relay_key: _Optional[bytes] = ...) -> None: ...

class TaskKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ExecutionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class GraphState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ReasonCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class AdmissionPolicySource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TokenRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
