package spec

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/megaflow/megaflow/internal/errs"
)

// Bounds on the fields of the wire API's requests and worker messages
// other than a graph's spec (which Validate bounds). CheckRequest enforces
// them; docs/limits.md lists them. Every string, bytes, repeated and map
// field that a request or worker message can carry has a bound in
// wireBounds (TestWireBoundsCoverEveryField checks it), so no accepted
// input can grow a stored row or a response without limit.
const (
	// MaxIDBytes bounds ids and names that are not a task id: graph ids,
	// tenants, worker, head and container ids, hosts, addresses, GPU UUIDs,
	// service names.
	MaxIDBytes = 256
	// MaxTaskIDBytes bounds a task id (<graph id>/<task name>).
	MaxTaskIDBytes = 512
	// MaxReasonBytes bounds a free-text reason a client gives (a cancel's)
	// and a GPU's unhealthy text.
	MaxReasonBytes = 4 << 10
	// MaxEventReasonBytes bounds the reason of a worker's attempt event.
	MaxEventReasonBytes = 16 << 10
	// MaxEventResultBytes bounds an attempt event's result: the largest
	// MEGAFLOW_RESULT a worker reads (the table holds up to 64 KiB; a
	// worker with an artifact store sends a reference to result.json for a
	// larger one).
	MaxEventResultBytes = 1 << 20
	// MaxPageTokenBytes bounds a page token.
	MaxPageTokenBytes = 1 << 10
	// MaxPathBytes bounds an artifact path.
	MaxPathBytes = 4 << 10
	// MaxImageBytes bounds an image reference and a URL.
	MaxImageBytes = 1 << 10
	// MaxLabelKeyBytes and MaxLabelValueBytes bound each entry of a label
	// map (worker labels, selectors); MaxWireLabels bounds its entries.
	MaxLabelKeyBytes   = 128
	MaxLabelValueBytes = 1 << 10
	MaxWireLabels      = 64
	// MaxReadWaitMillis is the longest ReadOptions.max_wait_millis.
	MaxReadWaitMillis = 5 * 60 * 1000
	// MaxWorkerCPUMillis, MaxWorkerMemoryBytes, MaxWorkerGPUs and
	// MaxGPUMemoryBytes bound what one worker may offer.
	MaxWorkerCPUMillis   = 16_384_000 // 16,384 cores
	MaxWorkerMemoryBytes = 1 << 50    // 1 PiB
	MaxWorkerGPUs        = 1024
	MaxGPUMemoryBytes    = 1 << 44 // 16 TiB
	// MaxSnapshotChunkBytes bounds one message of a snapshot restore
	// (OperatorService.SnapshotRestore); the clients send 1 MiB.
	MaxSnapshotChunkBytes = 4 << 20
	// MaxUnknownBytes bounds the unknown fields (from a newer client) one
	// message may carry: they travel with a stored row (WorkerInfo).
	MaxUnknownBytes = 4 << 10
)

// bound is the limit on one field: bytes for a string or bytes field (per
// element of a list; per value of a map, whose keys take keyBytes), items
// for a list or map; a numeric field with ranged lies in [min, max].
type bound struct {
	bytes, keyBytes, items int
	ranged                 bool
	min, max               int64
}

func text(n int) bound           { return bound{bytes: n} }
func list(items, each int) bound { return bound{items: items, bytes: each} }
func labels() bound {
	return bound{items: MaxWireLabels, keyBytes: MaxLabelKeyBytes, bytes: MaxLabelValueBytes}
}
func between(lo, hi int64) bound        { return bound{ranged: true, min: lo, max: hi} }
func entries(items, key, val int) bound { return bound{items: items, keyBytes: key, bytes: val} }

// delegated names the messages CheckRequest does not walk, with who bounds
// them instead.
var delegated = map[protoreflect.FullName]string{
	"megaflow.v1.GraphSpec": "spec.Validate",
}

// wireBounds maps a field's full name to its bound. Numeric fields not
// listed take any value their type holds (other checks may refuse some);
// every string, bytes, list and map field is listed.
var wireBounds = map[protoreflect.FullName]bound{
	"megaflow.v1.GetGraphRequest.graph_id":     text(MaxIDBytes),
	"megaflow.v1.ReadOptions.max_wait_millis":  between(0, MaxReadWaitMillis),
	"megaflow.v1.ListGraphsRequest.tenant":     text(MaxIDBytes),
	"megaflow.v1.ListGraphsRequest.page_token": text(MaxPageTokenBytes),
	"megaflow.v1.GetTaskRequest.task_id":       text(MaxTaskIDBytes),
	"megaflow.v1.ListTasksRequest.graph_id":    text(MaxIDBytes),
	"megaflow.v1.ListTasksRequest.tenant":      text(MaxIDBytes),
	"megaflow.v1.ListTasksRequest.worker_id":   text(MaxIDBytes),
	"megaflow.v1.ListTasksRequest.page_token":  text(MaxPageTokenBytes),
	"megaflow.v1.WatchRequest.graph_id":        text(MaxIDBytes),
	"megaflow.v1.CancelGraphRequest.graph_id":  text(MaxIDBytes),
	"megaflow.v1.CancelGraphRequest.reason":    text(MaxReasonBytes),
	"megaflow.v1.CancelTaskRequest.task_id":    text(MaxTaskIDBytes),
	"megaflow.v1.CancelTaskRequest.reason":     text(MaxReasonBytes),
	"megaflow.v1.RemoveHeadRequest.head_id":    text(MaxIDBytes),
	"megaflow.v1.Quota.tenant":                 text(MaxIDBytes),
	// Admission policies (internal/admission bounds the values).
	"megaflow.v1.AdmissionPolicy.tenant":               text(MaxIDBytes),
	"megaflow.v1.AdmissionPolicy.allowed_networks":     list(32, 64),
	"megaflow.v1.AdmissionPolicy.allowed_capabilities": list(64, 64),
	"megaflow.v1.AdmissionPolicy.run_as_user":          text(32),
	"megaflow.v1.AdmissionPolicy.max_pids":             between(0, 1<<22),
	"megaflow.v1.GetAdmissionPolicyRequest.tenant":     text(MaxIDBytes),
	"megaflow.v1.CreateTokenRequest.tenant":            text(MaxIDBytes),
	"megaflow.v1.CreateTokenRequest.ttl_seconds":       between(0, 5*365*24*3600),
	"megaflow.v1.RevokeTokenRequest.accessor":          text(MaxIDBytes),
	"megaflow.v1.PoolTarget.image":                     text(MaxImageBytes),
	"megaflow.v1.PoolTarget.worker_selector":           labels(),
	"megaflow.v1.PoolTarget.tenant":                    text(MaxIDBytes),
	"megaflow.v1.PoolTarget.cpu_millis":                between(0, MaxWorkerCPUMillis),
	"megaflow.v1.PoolTarget.memory_bytes":              between(0, MaxWorkerMemoryBytes),
	"megaflow.v1.LogsRequest.task_id":                  text(MaxTaskIDBytes),
	"megaflow.v1.ArtifactListRequest.task_id":          text(MaxTaskIDBytes),
	"megaflow.v1.ArtifactGetRequest.task_id":           text(MaxTaskIDBytes),
	"megaflow.v1.ArtifactGetRequest.path":              text(MaxPathBytes),
	"megaflow.v1.DeleteGraphRequest.graph_id":          text(MaxIDBytes),
	"megaflow.v1.ServiceListRequest.name":              text(MaxIDBytes),

	// Sandboxes (sandbox.go bounds the rest: SandboxGraph, CheckSandboxExec).
	"megaflow.v1.SandboxCreateSpec.id":                   text(MaxIDBytes),
	"megaflow.v1.SandboxCreateSpec.tenant":               text(MaxIDBytes),
	"megaflow.v1.SandboxCreateSpec.image":                text(MaxImageBytes),
	"megaflow.v1.SandboxCreateSpec.env":                  entries(256, 1<<10, 32<<10),
	"megaflow.v1.SandboxCreateSpec.working_dir":          text(SandboxMaxPath),
	"megaflow.v1.SandboxCreateSpec.network":              text(MaxIDBytes),
	"megaflow.v1.SandboxCreateSpec.labels":               labels(),
	"megaflow.v1.SandboxCreateSpec.lifetime_seconds":     between(0, SandboxMaxSeconds),
	"megaflow.v1.SandboxCreateSpec.idle_timeout_seconds": between(0, SandboxMaxSeconds),
	"megaflow.v1.SandboxCreateSpec.cpu_millis":           between(0, MaxWorkerCPUMillis),
	"megaflow.v1.SandboxCreateSpec.memory_bytes":         between(0, MaxWorkerMemoryBytes),
	"megaflow.v1.CreateSandboxRequest.wait_ready_millis": between(0, SandboxMaxWaitReadyMillis),
	"megaflow.v1.GetSandboxRequest.id":                   text(MaxIDBytes),
	"megaflow.v1.ListSandboxesRequest.tenant":            text(MaxIDBytes),
	"megaflow.v1.CloseSandboxRequest.id":                 text(MaxIDBytes),
	"megaflow.v1.SandboxExecRequest.sandbox_id":          text(MaxIDBytes),
	"megaflow.v1.SandboxExecRequest.argv":                list(1024, 128<<10),
	"megaflow.v1.SandboxExecRequest.env":                 entries(256, 1<<10, 32<<10),
	"megaflow.v1.SandboxExecRequest.cwd":                 text(SandboxMaxPath),
	"megaflow.v1.SandboxExecRequest.stdin":               text(SandboxMaxStdin),
	"megaflow.v1.SandboxExecRequest.timeout_millis":      between(0, SandboxMaxExecTimeoutMillis),
	"megaflow.v1.SandboxWriteFileRequest.sandbox_id":     text(MaxIDBytes),
	"megaflow.v1.SandboxWriteFileRequest.path":           text(SandboxMaxPath),
	"megaflow.v1.SandboxWriteFileRequest.data":           text(SandboxMaxFile),
	"megaflow.v1.SandboxWriteFileRequest.mode":           between(0, 0o7777),
	"megaflow.v1.SandboxReadFileRequest.sandbox_id":      text(MaxIDBytes),
	"megaflow.v1.SandboxReadFileRequest.path":            text(SandboxMaxPath),
	"megaflow.v1.SandboxReadFileRequest.max_bytes":       between(0, SandboxMaxFile),
	// Snapshots (snapshot.go bounds the rest: CheckSnapshotID, CheckSnapshot).
	"megaflow.v1.SandboxCreateSpec.from_snapshot":          text(MaxIDBytes),
	"megaflow.v1.SandboxSpec.from_snapshot":                text(MaxIDBytes),
	"megaflow.v1.SandboxSpec.snapshot_worker":              text(MaxIDBytes),
	"megaflow.v1.SnapshotSandboxRequest.sandbox_id":        text(MaxIDBytes),
	"megaflow.v1.SnapshotSandboxRequest.name":              text(SnapshotMaxName),
	"megaflow.v1.ListSnapshotsRequest.tenant":              text(MaxIDBytes),
	"megaflow.v1.DeleteSnapshotRequest.id":                 text(MaxIDBytes),
	"megaflow.v1.CommitSnapshotRequest.sandbox_id":         text(MaxIDBytes),
	"megaflow.v1.CommitSnapshotRequest.snapshot_id":        text(MaxIDBytes),
	"megaflow.v1.CommitSnapshotRequest.image":              text(MaxImageBytes),
	"megaflow.v1.RemoveSnapshotRequest.snapshot_id":        text(MaxIDBytes),
	"megaflow.v1.RemoveSnapshotRequest.image":              text(MaxImageBytes),
	"megaflow.v1.SetSandboxTimeoutRequest.id":              text(MaxIDBytes),
	"megaflow.v1.SetSandboxTimeoutRequest.timeout_seconds": between(0, SandboxMaxSeconds),
	"megaflow.v1.PauseSandboxRequest.id":                   text(MaxIDBytes),
	"megaflow.v1.ResumeSandboxRequest.id":                  text(MaxIDBytes),
	"megaflow.v1.SandboxSetPausedRequest.sandbox_id":       text(MaxIDBytes),
	"megaflow.v1.ListSandboxesRequest.page_size":           between(0, SandboxMaxPageSize),
	"megaflow.v1.ListSandboxesRequest.page_token":          text(MaxIDBytes + 32),
	"megaflow.v1.SandboxUploadArchiveRequest.sandbox_id":   text(MaxIDBytes),
	"megaflow.v1.SandboxUploadArchiveRequest.path":         text(SandboxMaxPath),
	"megaflow.v1.SandboxUploadArchiveRequest.data":         text(SandboxArchiveChunk),
	"megaflow.v1.SandboxDownloadArchiveRequest.sandbox_id": text(MaxIDBytes),
	"megaflow.v1.SandboxDownloadArchiveRequest.path":       text(SandboxMaxPath),
	"megaflow.v1.SandboxDownloadArchiveRequest.max_bytes":  between(0, SandboxMaxArchive),
	// The worker stream.
	"megaflow.v1.WorkerInfo.id":                    text(MaxIDBytes),
	"megaflow.v1.WorkerInfo.labels":                labels(),
	"megaflow.v1.WorkerInfo.runtime":               text(MaxIDBytes),
	"megaflow.v1.WorkerInfo.images":                list(4096, MaxImageBytes),
	"megaflow.v1.WorkerInfo.max_concurrent_starts": between(0, 10_000),
	"megaflow.v1.WorkerInfo.addr":                  text(MaxIDBytes),
	"megaflow.v1.WorkerInfo.gpus":                  list(MaxWorkerGPUs, 0),
	"megaflow.v1.WorkerInfo.instance":              text(MaxIDBytes),
	"megaflow.v1.WorkerInfo.host":                  text(MaxIDBytes),
	"megaflow.v1.WorkerInfo.version":               text(MaxIDBytes),
	"megaflow.v1.Resources.cpu_millis":             between(0, MaxWorkerCPUMillis),
	"megaflow.v1.Resources.memory_bytes":           between(0, MaxWorkerMemoryBytes),
	"megaflow.v1.Resources.gpus":                   between(0, MaxWorkerGPUs),
	"megaflow.v1.Resources.gpu_model":              text(MaxIDBytes),
	"megaflow.v1.Resources.gpu_memory_bytes":       between(0, MaxGPUMemoryBytes),
	"megaflow.v1.GpuDevice.uuid":                   text(MaxIDBytes),
	"megaflow.v1.GpuDevice.model":                  text(MaxIDBytes),
	"megaflow.v1.GpuDevice.memory_bytes":           between(0, MaxGPUMemoryBytes),
	"megaflow.v1.GpuDevice.nvlink_peers":           list(MaxWorkerGPUs, MaxIDBytes),
	"megaflow.v1.GpuDevice.unhealthy":              text(MaxReasonBytes),
	"megaflow.v1.WorkerHello.running":              list(100_000, 0),
	"megaflow.v1.RunningAttempt.task_id":           text(MaxTaskIDBytes),
	"megaflow.v1.RunningAttempt.container_id":      text(MaxIDBytes),
	"megaflow.v1.EventBatch.events":                list(10_000, 0),
	"megaflow.v1.AttemptEvent.task_id":             text(MaxTaskIDBytes),
	"megaflow.v1.AttemptEvent.reason":              text(MaxEventReasonBytes),
	"megaflow.v1.AttemptEvent.result":              text(MaxEventResultBytes),
	"megaflow.v1.AttemptEvent.container_id":        text(MaxIDBytes),
	"megaflow.v1.AttemptEvent.endpoint":            text(MaxImageBytes),
	"megaflow.v1.GpuHealthReport.unhealthy":        entries(MaxWorkerGPUs, MaxIDBytes, MaxReasonBytes),
	"megaflow.v1.SnapshotChunk.data":               text(MaxSnapshotChunkBytes),
	"megaflow.v1.SnapshotInfo.cluster_id":          text(MaxIDBytes),
	"megaflow.v1.SnapshotInfo.sha256":              text(MaxIDBytes),
}

// CheckRequest checks a request of the client API or a message of the
// worker stream against the bounds above: the length of every string and
// bytes field, the entries of every list and map, the range of the
// numeric fields listed, that every enum holds a defined value and that
// unknown fields stay under MaxUnknownBytes. A GraphSpec inside is left to
// Validate. It returns nil or an errs.InvalidArgument error naming the
// field (with its path, e.g. "EventBatch.events[3].reason"), its size and
// the bound. It does not modify m; it is safe for concurrent use.
func CheckRequest(m proto.Message) error {
	if m == nil {
		return nil
	}
	r := m.ProtoReflect()
	if !r.IsValid() {
		return nil
	}
	return checkMessage(string(r.Descriptor().Name()), r)
}

func checkMessage(path string, r protoreflect.Message) error {
	if _, ok := delegated[r.Descriptor().FullName()]; ok {
		return nil
	}
	if n := len(r.GetUnknown()); n > MaxUnknownBytes {
		return errs.New(errs.InvalidArgument, "%s carries %d bytes of unknown fields; the limit is %d (is the client newer than this head?)",
			path, n, MaxUnknownBytes)
	}
	var err error
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		err = checkField(path+"."+string(fd.Name()), fd, v)
		return err == nil
	})
	return err
}

func checkField(path string, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	b := wireBounds[fd.FullName()]
	switch {
	case fd.IsMap():
		mp := v.Map()
		if mp.Len() > b.items {
			return tooMany(path, mp.Len(), b.items, "entries")
		}
		var err error
		mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			key := k.String()
			if len(key) > b.keyBytes {
				err = tooLong(path+" key "+strconv.Quote(key[:min(len(key), 32)])+"...", len(key), b.keyBytes)
				return false
			}
			err = checkScalar(path+"["+strconv.Quote(key)+"]", fd.MapValue(), mv, b)
			return err == nil
		})
		return err
	case fd.IsList():
		l := v.List()
		if l.Len() > b.items {
			return tooMany(path, l.Len(), b.items, "elements")
		}
		for i := 0; i < l.Len(); i++ {
			if err := checkScalar(path+"["+strconv.Itoa(i)+"]", fd, l.Get(i), b); err != nil {
				return err
			}
		}
		return nil
	}
	return checkScalar(path, fd, v, b)
}

// checkScalar checks one value of field fd (an element, for a list or a
// map's value).
func checkScalar(path string, fd protoreflect.FieldDescriptor, v protoreflect.Value, b bound) error {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkMessage(path, v.Message())
	case protoreflect.StringKind:
		if n := len(v.String()); n > b.bytes {
			return tooLong(path, n, b.bytes)
		}
	case protoreflect.BytesKind:
		if n := len(v.Bytes()); n > b.bytes {
			return tooLong(path, n, b.bytes)
		}
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			return errs.New(errs.InvalidArgument, "%s is %d, not a value of %s; give one of %s",
				path, v.Enum(), fd.Enum().Name(), enumNames(fd.Enum()))
		}
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
		if n := v.Int(); b.ranged && (n < b.min || n > b.max) {
			return errs.New(errs.InvalidArgument, "%s is %d, outside [%d, %d]", path, n, b.min, b.max)
		}
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		if n := v.Uint(); b.ranged && (b.max < 0 || n > uint64(b.max)) {
			return errs.New(errs.InvalidArgument, "%s is %d, outside [%d, %d]", path, n, b.min, b.max)
		}
	}
	return nil
}

func tooLong(path string, n, max int) error {
	return errs.New(errs.InvalidArgument, "%s is %d bytes; the limit is %d bytes", path, n, max)
}

func tooMany(path string, n, max int, what string) error {
	return errs.New(errs.InvalidArgument, "%s has %d %s; the limit is %d", path, n, what, max)
}

func enumNames(e protoreflect.EnumDescriptor) string {
	vs := e.Values()
	s := ""
	for i := 0; i < vs.Len(); i++ {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s (%d)", vs.Get(i).Name(), vs.Get(i).Number())
	}
	return s
}
