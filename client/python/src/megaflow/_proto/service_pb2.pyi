from . import types_pb2 as _types_pb2
from . import worker_pb2 as _worker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ArtifactFile(_message.Message):
    __slots__ = ["content_type", "path", "sha256", "size"]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    content_type: str
    path: str
    sha256: str
    size: int
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ..., content_type: _Optional[str] = ...) -> None: ...

class ArtifactGetRequest(_message.Message):
    __slots__ = ["attempt", "path", "read", "task_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    path: str
    read: ReadOptions
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., path: _Optional[str] = ..., read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class ArtifactGetResponse(_message.Message):
    __slots__ = ["data", "file"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    file: ArtifactFile
    def __init__(self, file: _Optional[_Union[ArtifactFile, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ArtifactListRequest(_message.Message):
    __slots__ = ["attempt", "read", "task_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    read: ReadOptions
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class ArtifactListResponse(_message.Message):
    __slots__ = ["attempt", "files", "log_bytes", "log_chunks", "notes"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    LOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOG_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    files: _containers.RepeatedCompositeFieldContainer[ArtifactFile]
    log_bytes: int
    log_chunks: int
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, attempt: _Optional[int] = ..., files: _Optional[_Iterable[_Union[ArtifactFile, _Mapping]]] = ..., log_bytes: _Optional[int] = ..., log_chunks: _Optional[int] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class BootstrapACLRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class CancelGraphRequest(_message.Message):
    __slots__ = ["graph_id", "reason"]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    reason: str
    def __init__(self, graph_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelGraphResponse(_message.Message):
    __slots__ = ["cancelled", "index"]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    index: int
    def __init__(self, index: _Optional[int] = ..., cancelled: _Optional[int] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ["reason", "task_id"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    reason: str
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelTaskResponse(_message.Message):
    __slots__ = ["cancelled", "index"]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    index: int
    def __init__(self, index: _Optional[int] = ..., cancelled: _Optional[int] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ["acl_enabled", "applied_index", "cluster_id", "commit_index", "head_id", "heads", "last_log_index", "last_snapshot_index", "leader_grpc_addr", "leader_id", "raft_state", "rules", "term"]
    ACL_ENABLED_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    HEAD_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_GRPC_ADDR_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_STATE_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    acl_enabled: bool
    applied_index: int
    cluster_id: str
    commit_index: int
    head_id: str
    heads: _containers.RepeatedCompositeFieldContainer[_types_pb2.HeadInfo]
    last_log_index: int
    last_snapshot_index: int
    leader_grpc_addr: str
    leader_id: str
    raft_state: str
    rules: int
    term: int
    def __init__(self, heads: _Optional[_Iterable[_Union[_types_pb2.HeadInfo, _Mapping]]] = ..., leader_id: _Optional[str] = ..., leader_grpc_addr: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., last_log_index: _Optional[int] = ..., raft_state: _Optional[str] = ..., head_id: _Optional[str] = ..., last_snapshot_index: _Optional[int] = ..., cluster_id: _Optional[str] = ..., rules: _Optional[int] = ..., acl_enabled: bool = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ["role", "tenant", "ttl_seconds"]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    role: _types_pb2.TokenRole
    tenant: str
    ttl_seconds: int
    def __init__(self, tenant: _Optional[str] = ..., role: _Optional[_Union[_types_pb2.TokenRole, str]] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ["index", "secret", "token"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    index: int
    secret: str
    token: _types_pb2.Token
    def __init__(self, token: _Optional[_Union[_types_pb2.Token, _Mapping]] = ..., secret: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class DeleteGraphRequest(_message.Message):
    __slots__ = ["graph_id"]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    def __init__(self, graph_id: _Optional[str] = ...) -> None: ...

class DeleteGraphResponse(_message.Message):
    __slots__ = ["artifacts", "index", "tasks"]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    artifacts: int
    index: int
    tasks: int
    def __init__(self, index: _Optional[int] = ..., tasks: _Optional[int] = ..., artifacts: _Optional[int] = ...) -> None: ...

class GetAdmissionPolicyRequest(_message.Message):
    __slots__ = ["read", "tenant"]
    READ_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    read: ReadOptions
    tenant: str
    def __init__(self, tenant: _Optional[str] = ..., read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class GetAdmissionPolicyResponse(_message.Message):
    __slots__ = ["meta", "policy", "source"]
    META_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    meta: ReadMeta
    policy: _types_pb2.AdmissionPolicy
    source: _types_pb2.AdmissionPolicySource
    def __init__(self, policy: _Optional[_Union[_types_pb2.AdmissionPolicy, _Mapping]] = ..., source: _Optional[_Union[_types_pb2.AdmissionPolicySource, str]] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class GetGraphRequest(_message.Message):
    __slots__ = ["graph_id", "read"]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    read: ReadOptions
    def __init__(self, graph_id: _Optional[str] = ..., read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class GetGraphResponse(_message.Message):
    __slots__ = ["graph", "meta"]
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    graph: _types_pb2.Graph
    meta: ReadMeta
    def __init__(self, graph: _Optional[_Union[_types_pb2.Graph, _Mapping]] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class GetLimitsRequest(_message.Message):
    __slots__ = ["read"]
    READ_FIELD_NUMBER: _ClassVar[int]
    read: ReadOptions
    def __init__(self, read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class GetLimitsResponse(_message.Message):
    __slots__ = ["cluster", "head_id", "max_queue_wait_millis", "meta", "rate_burst", "rate_limit"]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    HEAD_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_WAIT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    RATE_BURST_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    cluster: _types_pb2.Quota
    head_id: str
    max_queue_wait_millis: int
    meta: ReadMeta
    rate_burst: int
    rate_limit: float
    def __init__(self, head_id: _Optional[str] = ..., rate_limit: _Optional[float] = ..., rate_burst: _Optional[int] = ..., cluster: _Optional[_Union[_types_pb2.Quota, _Mapping]] = ..., max_queue_wait_millis: _Optional[int] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class GetQuotasRequest(_message.Message):
    __slots__ = ["read"]
    READ_FIELD_NUMBER: _ClassVar[int]
    read: ReadOptions
    def __init__(self, read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class GetQuotasResponse(_message.Message):
    __slots__ = ["cluster", "meta", "quotas", "unlimited"]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    UNLIMITED_FIELD_NUMBER: _ClassVar[int]
    cluster: _types_pb2.QuotaUsage
    meta: ReadMeta
    quotas: _containers.RepeatedCompositeFieldContainer[_types_pb2.QuotaUsage]
    unlimited: _containers.RepeatedCompositeFieldContainer[_types_pb2.QuotaUsage]
    def __init__(self, quotas: _Optional[_Iterable[_Union[_types_pb2.QuotaUsage, _Mapping]]] = ..., cluster: _Optional[_Union[_types_pb2.QuotaUsage, _Mapping]] = ..., unlimited: _Optional[_Iterable[_Union[_types_pb2.QuotaUsage, _Mapping]]] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ["read", "task_id"]
    READ_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    read: ReadOptions
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ["meta", "task"]
    META_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    meta: ReadMeta
    task: _types_pb2.Task
    def __init__(self, task: _Optional[_Union[_types_pb2.Task, _Mapping]] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class ListAdmissionPoliciesRequest(_message.Message):
    __slots__ = ["read"]
    READ_FIELD_NUMBER: _ClassVar[int]
    read: ReadOptions
    def __init__(self, read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class ListAdmissionPoliciesResponse(_message.Message):
    __slots__ = ["meta", "policies"]
    META_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    meta: ReadMeta
    policies: _containers.RepeatedCompositeFieldContainer[_types_pb2.AdmissionPolicy]
    def __init__(self, policies: _Optional[_Iterable[_Union[_types_pb2.AdmissionPolicy, _Mapping]]] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class ListGraphsRequest(_message.Message):
    __slots__ = ["include_archived", "page_size", "page_token", "read", "state", "tenant"]
    INCLUDE_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    include_archived: bool
    page_size: int
    page_token: str
    read: ReadOptions
    state: _types_pb2.GraphState
    tenant: str
    def __init__(self, tenant: _Optional[str] = ..., state: _Optional[_Union[_types_pb2.GraphState, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., read: _Optional[_Union[ReadOptions, _Mapping]] = ..., include_archived: bool = ...) -> None: ...

class ListGraphsResponse(_message.Message):
    __slots__ = ["graphs", "meta", "next_page_token"]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    graphs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Graph]
    meta: ReadMeta
    next_page_token: str
    def __init__(self, graphs: _Optional[_Iterable[_Union[_types_pb2.Graph, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ["graph_id", "omit_spec", "page_size", "page_token", "read", "state", "tenant", "worker_id"]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    OMIT_SPEC_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    omit_spec: bool
    page_size: int
    page_token: str
    read: ReadOptions
    state: _types_pb2.TaskState
    tenant: str
    worker_id: str
    def __init__(self, graph_id: _Optional[str] = ..., state: _Optional[_Union[_types_pb2.TaskState, str]] = ..., tenant: _Optional[str] = ..., worker_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., read: _Optional[_Union[ReadOptions, _Mapping]] = ..., omit_spec: bool = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ["meta", "next_page_token", "tasks"]
    META_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    meta: ReadMeta
    next_page_token: str
    tasks: _containers.RepeatedCompositeFieldContainer[_types_pb2.Task]
    def __init__(self, tasks: _Optional[_Iterable[_Union[_types_pb2.Task, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ["read"]
    READ_FIELD_NUMBER: _ClassVar[int]
    read: ReadOptions
    def __init__(self, read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ["tokens"]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[_types_pb2.Token]
    def __init__(self, tokens: _Optional[_Iterable[_Union[_types_pb2.Token, _Mapping]]] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ["read"]
    READ_FIELD_NUMBER: _ClassVar[int]
    read: ReadOptions
    def __init__(self, read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ["meta", "workers"]
    META_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    meta: ReadMeta
    workers: _containers.RepeatedCompositeFieldContainer[_worker_pb2.Worker]
    def __init__(self, workers: _Optional[_Iterable[_Union[_worker_pb2.Worker, _Mapping]]] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class LogsRequest(_message.Message):
    __slots__ = ["after_chunk", "attempt", "follow", "read", "task_id"]
    AFTER_CHUNK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    after_chunk: int
    attempt: int
    follow: bool
    read: ReadOptions
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., follow: bool = ..., after_chunk: _Optional[int] = ..., read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class LogsResponse(_message.Message):
    __slots__ = ["attempt", "chunk", "data"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    chunk: int
    data: bytes
    def __init__(self, data: _Optional[bytes] = ..., attempt: _Optional[int] = ..., chunk: _Optional[int] = ...) -> None: ...

class PoolListRequest(_message.Message):
    __slots__ = ["read"]
    READ_FIELD_NUMBER: _ClassVar[int]
    read: ReadOptions
    def __init__(self, read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class PoolListResponse(_message.Message):
    __slots__ = ["targets"]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[_types_pb2.PoolTarget]
    def __init__(self, targets: _Optional[_Iterable[_Union[_types_pb2.PoolTarget, _Mapping]]] = ...) -> None: ...

class PoolWarmRequest(_message.Message):
    __slots__ = ["target"]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    target: _types_pb2.PoolTarget
    def __init__(self, target: _Optional[_Union[_types_pb2.PoolTarget, _Mapping]] = ...) -> None: ...

class PoolWarmResponse(_message.Message):
    __slots__ = ["index"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class ReadMeta(_message.Message):
    __slots__ = ["from_leader", "head_id", "index", "last_contact_millis", "leader_http", "leader_id"]
    FROM_LEADER_FIELD_NUMBER: _ClassVar[int]
    HEAD_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_CONTACT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    LEADER_HTTP_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    from_leader: bool
    head_id: str
    index: int
    last_contact_millis: int
    leader_http: str
    leader_id: str
    def __init__(self, index: _Optional[int] = ..., head_id: _Optional[str] = ..., from_leader: bool = ..., leader_id: _Optional[str] = ..., last_contact_millis: _Optional[int] = ..., leader_http: _Optional[str] = ...) -> None: ...

class ReadOptions(_message.Message):
    __slots__ = ["max_wait_millis", "min_index", "require_leader"]
    MAX_WAIT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_LEADER_FIELD_NUMBER: _ClassVar[int]
    max_wait_millis: int
    min_index: int
    require_leader: bool
    def __init__(self, min_index: _Optional[int] = ..., max_wait_millis: _Optional[int] = ..., require_leader: bool = ...) -> None: ...

class RemoveHeadRequest(_message.Message):
    __slots__ = ["head_id"]
    HEAD_ID_FIELD_NUMBER: _ClassVar[int]
    head_id: str
    def __init__(self, head_id: _Optional[str] = ...) -> None: ...

class RemoveHeadResponse(_message.Message):
    __slots__ = ["index"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ["accessor"]
    ACCESSOR_FIELD_NUMBER: _ClassVar[int]
    accessor: str
    def __init__(self, accessor: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ["index"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class ServiceEndpoint(_message.Message):
    __slots__ = ["attempt", "ready_unix_nanos", "task_id", "url", "worker_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    READY_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    ready_unix_nanos: int
    task_id: str
    url: str
    worker_id: str
    def __init__(self, url: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., worker_id: _Optional[str] = ..., ready_unix_nanos: _Optional[int] = ...) -> None: ...

class ServiceListRequest(_message.Message):
    __slots__ = ["name", "read"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    name: str
    read: ReadOptions
    def __init__(self, name: _Optional[str] = ..., read: _Optional[_Union[ReadOptions, _Mapping]] = ...) -> None: ...

class ServiceListResponse(_message.Message):
    __slots__ = ["meta", "services"]
    META_FIELD_NUMBER: _ClassVar[int]
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    meta: ReadMeta
    services: _containers.RepeatedCompositeFieldContainer[ServiceStatus]
    def __init__(self, services: _Optional[_Iterable[_Union[ServiceStatus, _Mapping]]] = ..., meta: _Optional[_Union[ReadMeta, _Mapping]] = ...) -> None: ...

class ServiceStatus(_message.Message):
    __slots__ = ["endpoints", "name", "task_ids"]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    endpoints: _containers.RepeatedCompositeFieldContainer[ServiceEndpoint]
    name: str
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., endpoints: _Optional[_Iterable[_Union[ServiceEndpoint, _Mapping]]] = ..., task_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class SetAdmissionPolicyRequest(_message.Message):
    __slots__ = ["cluster", "policy"]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    cluster: bool
    policy: _types_pb2.AdmissionPolicy
    def __init__(self, policy: _Optional[_Union[_types_pb2.AdmissionPolicy, _Mapping]] = ..., cluster: bool = ...) -> None: ...

class SetAdmissionPolicyResponse(_message.Message):
    __slots__ = ["index", "removed"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    index: int
    removed: bool
    def __init__(self, index: _Optional[int] = ..., removed: bool = ...) -> None: ...

class SetQuotaRequest(_message.Message):
    __slots__ = ["cluster", "quota"]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    cluster: bool
    quota: _types_pb2.Quota
    def __init__(self, quota: _Optional[_Union[_types_pb2.Quota, _Mapping]] = ..., cluster: bool = ...) -> None: ...

class SetQuotaResponse(_message.Message):
    __slots__ = ["index"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class SubmitGraphRequest(_message.Message):
    __slots__ = ["graph"]
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    graph: _types_pb2.GraphSpec
    def __init__(self, graph: _Optional[_Union[_types_pb2.GraphSpec, _Mapping]] = ...) -> None: ...

class SubmitGraphResponse(_message.Message):
    __slots__ = ["existed", "graph_id", "index"]
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    graph_id: str
    index: int
    def __init__(self, graph_id: _Optional[str] = ..., index: _Optional[int] = ..., existed: bool = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ["after_index", "after_seq", "from_now", "graph_id"]
    AFTER_INDEX_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    FROM_NOW_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    after_index: int
    after_seq: int
    from_now: bool
    graph_id: str
    def __init__(self, after_index: _Optional[int] = ..., after_seq: _Optional[int] = ..., graph_id: _Optional[str] = ..., from_now: bool = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ["applied_index", "events"]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    events: _containers.RepeatedCompositeFieldContainer[_types_pb2.Event]
    def __init__(self, events: _Optional[_Iterable[_Union[_types_pb2.Event, _Mapping]]] = ..., applied_index: _Optional[int] = ...) -> None: ...
