package state

import (
	"fmt"
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// diff returns the paths of the fields that differ between a and b (of
// one message type), descending into singular messages.
func diff(a, b protoreflect.Message, path string) []string {
	var out []string
	fields := a.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		va, vb := a.Get(fd), b.Get(fd)
		if va.Equal(vb) {
			continue
		}
		if fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() && a.Has(fd) && b.Has(fd) {
			out = append(out, diff(va.Message(), vb.Message(), path+string(fd.Name())+".")...)
			continue
		}
		out = append(out, fmt.Sprintf("%s%s: %v before, %v after", path, fd.Name(), va, vb))
	}
	return out
}

// fill sets every field of m, recursively, to a value that is not the
// field's zero (numbers from *n, counting up, so no two fields share one;
// one element per list and map; the last value of each enum), so a field
// that a conversion forgets comes back zero and the round trip differs.
func fill(m protoreflect.Message, n *int, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && !fd.HasOptionalKeyword() {
			// One member of each oneof: the first.
			if od := fd.ContainingOneof(); od.Fields().Get(0) != fd {
				continue
			}
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Kind() == protoreflect.MessageKind {
				if depth > 0 {
					fill(l.AppendMutable().Message(), n, depth-1)
				}
				continue
			}
			l.Append(scalar(fd, n))
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			k := scalar(fd.MapKey(), n).MapKey()
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				if depth > 0 {
					fill(mp.Mutable(k).Message(), n, depth-1)
				}
				continue
			}
			mp.Set(k, scalar(fd.MapValue(), n))
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if depth > 0 {
				fill(m.Mutable(fd).Message(), n, depth-1)
			}
		default:
			m.Set(fd, scalar(fd, n))
		}
	}
}

// scalar returns a non-zero value of fd's kind.
func scalar(fd protoreflect.FieldDescriptor, n *int) protoreflect.Value {
	*n++
	v := *n
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(v))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(v))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(v))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(v))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(v) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(v) + 0.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("s%d", v))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fmt.Sprintf("b%d", v)))
	}
	panic(fmt.Sprintf("field %s: kind %s", fd.FullName(), fd.Kind()))
}

// TestWireRoundTrip fills every field of the table's wire forms (a task
// with its spec and attempts, a graph, a worker with its info, a quota)
// and converts each into a row and back, as a snapshot and its restore
// do: a field missing from either conversion fails here, naming it,
// instead of being lost silently on the first snapshot after it is added.
// Fields derived from others are set consistently before the trip.
func TestWireRoundTrip(t *testing.T) {
	trip := func(name string, in proto.Message, conv func(proto.Message) (proto.Message, error)) {
		t.Run(name, func(t *testing.T) {
			out, err := conv(proto.Clone(in))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diff(in.ProtoReflect(), out.ProtoReflect(), name+".") {
				t.Errorf("lost in the trip through the row: %s", d)
			}
		})
	}
	n := 0
	task := &wire.Task{}
	fill(task.ProtoReflect(), &n, 4)
	task.GraphId, task.Id = "g", "g/"+task.GetSpec().GetName()
	trip("Task", task, func(m proto.Message) (proto.Message, error) {
		r, err := TaskFromWire(m.(*wire.Task))
		if err != nil {
			return nil, err
		}
		return r.ToWire(), nil
	})
	graph := &wire.Graph{}
	fill(graph.ProtoReflect(), &n, 4)
	// Some of a graph's metrics are derived on the way out (toWire) from
	// the stored ones and the graph's labels: take those from a first trip.
	d := GraphFromWire(proto.Clone(graph).(*wire.Graph)).ToWire().GetMetrics()
	m := graph.GetMetrics()
	m.Field, m.Histogram, m.SuccessRate, m.Mean, m.WallMillis = d.Field, d.Histogram, d.SuccessRate, d.Mean, d.WallMillis
	trip("Graph", graph, func(m proto.Message) (proto.Message, error) {
		return GraphFromWire(m.(*wire.Graph)).ToWire(), nil
	})
	worker := &wire.Worker{}
	fill(worker.ProtoReflect(), &n, 4)
	// Not stored: a GPU model and memory are what a task asks for, not an
	// amount a worker holds; the lease times are the leader's, filled in
	// on each read (head/service.go).
	worker.Allocated.GpuModel, worker.Allocated.GpuMemoryBytes = "", 0
	worker.LeaseRenewedUnixNanos, worker.LeaseExpiresUnixNanos = 0, 0
	trip("Worker", worker, func(m proto.Message) (proto.Message, error) {
		r, err := WorkerFromWire(m.(*wire.Worker))
		if err != nil {
			return nil, err
		}
		return r.ToWire(), nil
	})
	quota := &wire.Quota{}
	fill(quota.ProtoReflect(), &n, 4)
	trip("Quota", quota, func(m proto.Message) (proto.Message, error) {
		r, err := QuotaFromWire(m.(*wire.Quota))
		if err != nil {
			return nil, err
		}
		return r.ToWire(), nil
	})
}
