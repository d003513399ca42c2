package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/race"
	"github.com/megaflow/megaflow/internal/wire"
)

// roots returns the messages CheckRequest is given: the input of every
// method of the client API and the worker's stream messages.
func roots() []protoreflect.MessageDescriptor {
	var out []protoreflect.MessageDescriptor
	for _, sd := range []protoreflect.ServiceDescriptor{
		wire.File_megaflow_v1_service_proto.Services().Get(0),
		wire.File_megaflow_v1_worker_proto.Services().Get(0),
	} {
		for i := 0; i < sd.Methods().Len(); i++ {
			out = append(out, sd.Methods().Get(i).Input())
		}
	}
	return out
}

// boundedField is one field reachable from a root, with the path of
// message fields leading to it.
type boundedField struct {
	root protoreflect.MessageDescriptor
	path []protoreflect.FieldDescriptor // the last is the field itself
}

func (b boundedField) String() string {
	s := string(b.root.Name())
	for i, f := range b.path {
		s += "." + string(f.Name())
		if f.IsList() && i < len(b.path)-1 {
			s += "[0]"
		}
	}
	return s
}

// reachable lists every field reachable from the roots (not through a
// delegated message), once per root and path, without cycles.
func reachable() []boundedField {
	var out []boundedField
	var walk func(root protoreflect.MessageDescriptor, md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor, seen map[protoreflect.FullName]bool)
	walk = func(root, md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor, seen map[protoreflect.FullName]bool) {
		if _, ok := delegated[md.FullName()]; ok || seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		defer delete(seen, md.FullName())
		for i := 0; i < md.Fields().Len(); i++ {
			fd := md.Fields().Get(i)
			p := append(append([]protoreflect.FieldDescriptor(nil), path...), fd)
			out = append(out, boundedField{root: root, path: p})
			if fd.Message() != nil && !fd.IsMap() {
				walk(root, fd.Message(), p, seen)
			}
		}
	}
	for _, r := range roots() {
		walk(r, r, nil, map[protoreflect.FullName]bool{})
	}
	return out
}

// TestWireBoundsCoverEveryField fails when a string, bytes, list or map
// field that a request can carry has no bound: a new field must get one
// in wireBounds.
func TestWireBoundsCoverEveryField(t *testing.T) {
	for _, f := range reachable() {
		fd := f.path[len(f.path)-1]
		needs := fd.IsList() || fd.IsMap() || fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind
		if !needs {
			continue
		}
		b, ok := wireBounds[fd.FullName()]
		if !ok {
			t.Errorf("%s (%s) has no bound in wireBounds", f, fd.FullName())
			continue
		}
		if (fd.IsList() || fd.IsMap()) && b.items <= 0 {
			t.Errorf("%s: no item bound", f)
		}
	}
}

// build returns a root message with the path to f set and f's value set
// by set (given the innermost message).
func build(f boundedField, set func(m protoreflect.Message, fd protoreflect.FieldDescriptor)) proto.Message {
	root := dynamicpb.NewMessage(f.root)
	m := protoreflect.Message(root)
	for _, fd := range f.path[:len(f.path)-1] {
		if fd.IsList() {
			l := m.Mutable(fd).List()
			e := l.NewElement()
			l.Append(e)
			m = e.Message()
			continue
		}
		m = m.Mutable(fd).Message()
	}
	set(m, f.path[len(f.path)-1])
	// Convert to the generated type, as the server sees it.
	typ, err := protoRegistryFind(f.root.FullName())
	if err != nil {
		panic(err)
	}
	raw, err := proto.Marshal(root)
	if err != nil {
		panic(err)
	}
	out := typ.New().Interface()
	if err := proto.Unmarshal(raw, out); err != nil {
		panic(err)
	}
	return out
}

// boundCase is one value of one field, and whether CheckRequest accepts it.
type boundCase struct {
	name string
	set  func(m protoreflect.Message, fd protoreflect.FieldDescriptor)
	ok   bool
}

func scalarOf(fd protoreflect.FieldDescriptor, n int) protoreflect.Value {
	if fd.Kind() == protoreflect.BytesKind {
		return protoreflect.ValueOfBytes([]byte(strings.Repeat("x", n)))
	}
	return protoreflect.ValueOfString(strings.Repeat("x", n))
}

// casesFor returns, for a bounded field, values at the bound (accepted)
// and just over it (refused).
func casesFor(fd protoreflect.FieldDescriptor, b bound) []boundCase {
	var out []boundCase
	switch {
	case fd.IsMap():
		fill := func(n, keyLen, valLen int) func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
			return func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
				mp := m.Mutable(fd).Map()
				for i := 0; i < n; i++ {
					k := fmt.Sprintf("k%d", i)
					if i == 0 {
						k = strings.Repeat("k", keyLen)
					}
					mp.Set(protoreflect.ValueOfString(k).MapKey(), scalarOf(fd.MapValue(), valLen))
				}
			}
		}
		out = append(out,
			boundCase{"entries at bound", fill(b.items, 1, 1), true},
			boundCase{"entries over bound", fill(b.items+1, 1, 1), false},
			boundCase{"key at bound", fill(1, b.keyBytes, 1), true},
			boundCase{"key over bound", fill(1, b.keyBytes+1, 1), false},
			boundCase{"value at bound", fill(1, 1, b.bytes), true},
			boundCase{"value over bound", fill(1, 1, b.bytes+1), false})
	case fd.IsList():
		fill := func(n, each int) func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
			return func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
				l := m.Mutable(fd).List()
				for i := 0; i < n; i++ {
					if fd.Message() != nil {
						l.Append(l.NewElement())
					} else {
						l.Append(scalarOf(fd, each))
					}
				}
			}
		}
		out = append(out,
			boundCase{"elements at bound", fill(b.items, 1), true},
			boundCase{"elements over bound", fill(b.items+1, 1), false})
		if fd.Message() == nil {
			out = append(out,
				boundCase{"element at bound", fill(1, b.bytes), true},
				boundCase{"element over bound", fill(1, b.bytes+1), false})
		}
	case fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind:
		set := func(n int) func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
			return func(m protoreflect.Message, fd protoreflect.FieldDescriptor) { m.Set(fd, scalarOf(fd, n)) }
		}
		out = append(out, boundCase{"at bound", set(b.bytes), true}, boundCase{"over bound", set(b.bytes + 1), false})
	case fd.Kind() == protoreflect.EnumKind:
		vals := fd.Enum().Values()
		last := vals.Get(vals.Len() - 1).Number()
		set := func(n protoreflect.EnumNumber) func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
			return func(m protoreflect.Message, fd protoreflect.FieldDescriptor) { m.Set(fd, protoreflect.ValueOfEnum(n)) }
		}
		out = append(out, boundCase{"last value", set(last), true}, boundCase{"undefined value 99", set(99), false})
	case b.ranged:
		set := func(n int64) func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
			return func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
				switch fd.Kind() {
				case protoreflect.Int32Kind:
					m.Set(fd, protoreflect.ValueOfInt32(int32(n)))
				default:
					m.Set(fd, protoreflect.ValueOfInt64(n))
				}
			}
		}
		out = append(out, boundCase{"min", set(b.min), true}, boundCase{"max", set(b.max), true},
			boundCase{"below min", set(b.min - 1), false}, boundCase{"over max", set(b.max + 1), false})
		if fd.Kind() == protoreflect.Int64Kind {
			out = append(out, boundCase{"2^62", set(1 << 62), false}, boundCase{"-1000", set(-1000), b.min <= -1000})
		}
	}
	return out
}

// TestCheckRequestBounds: every bounded field of every request, at its
// bound accepted, over it refused with InvalidArgument naming the field's
// path and the bound.
func TestCheckRequestBounds(t *testing.T) {
	race.SkipPure(t)
	n := 0
	for _, f := range reachable() {
		fd := f.path[len(f.path)-1]
		b := wireBounds[fd.FullName()]
		for _, c := range casesFor(fd, b) {
			n++
			msg := build(f, c.set)
			err := CheckRequest(msg)
			switch {
			case c.ok && err != nil:
				t.Errorf("%s %s: refused: %v", f, c.name, err)
			case !c.ok && err == nil:
				t.Errorf("%s %s: accepted", f, c.name)
			case !c.ok:
				if !errors.Is(err, errs.ErrInvalidArgument) {
					t.Errorf("%s %s: error %v is not InvalidArgument", f, c.name, err)
				}
				if !strings.Contains(err.Error(), f.String()) {
					t.Errorf("%s %s: error %q does not name the field", f, c.name, err)
				}
			}
		}
	}
	if n < 200 {
		t.Fatalf("only %d cases: the walk missed fields", n)
	}
}

// TestCheckRequestUnknownFields: unknown fields up to MaxUnknownBytes pass
// (a newer client), more are refused.
func TestCheckRequestUnknownFields(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{MaxUnknownBytes, true}, {MaxUnknownBytes + 1, false}} {
		req := &wire.CancelGraphRequest{GraphId: "g"}
		req.ProtoReflect().SetUnknown(make([]byte, tc.n))
		if err := CheckRequest(req); (err == nil) != tc.ok {
			t.Errorf("%d unknown bytes: err %v, want ok %v", tc.n, err, tc.ok)
		}
	}
}

// TestCheckRequestFindings: the inputs issue 18 found accepted.
func TestCheckRequestFindings(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  proto.Message
		want string
	}{
		{"1 MB cancel reason", &wire.CancelGraphRequest{GraphId: "g", Reason: strings.Repeat("r", 1<<20)},
			"CancelGraphRequest.reason is 1048576 bytes; the limit is 4096 bytes"},
		{"hello with -1000 millicores", &wire.WorkerMessage{Msg: &wire.WorkerMessage_Hello{Hello: &wire.WorkerHello{
			Info: &wire.WorkerInfo{Id: "w", Capacity: &wire.Resources{CpuMillis: -1000}}}}},
			"WorkerMessage.hello.info.capacity.cpu_millis is -1000, outside [0, 16384000]"},
		{"hello with 2^62 millicores", &wire.WorkerMessage{Msg: &wire.WorkerMessage_Hello{Hello: &wire.WorkerHello{
			Info: &wire.WorkerInfo{Id: "w", Capacity: &wire.Resources{CpuMillis: 1 << 62}}}}},
			"cpu_millis is 4611686018427387904, outside"},
		{"max_wait_millis 2^62", &wire.GetGraphRequest{GraphId: "g", Read: &wire.ReadOptions{MaxWaitMillis: 1 << 62}},
			"GetGraphRequest.read.max_wait_millis is 4611686018427387904, outside [0, 300000]"},
		{"max_wait_millis -1", &wire.ListTasksRequest{Read: &wire.ReadOptions{MaxWaitMillis: -1}},
			"ListTasksRequest.read.max_wait_millis is -1, outside [0, 300000]"},
		{"ListTasks state 99", &wire.ListTasksRequest{State: 99}, "ListTasksRequest.state is 99, not a value of TaskState"},
	} {
		err := CheckRequest(tc.msg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errs.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want InvalidArgument containing %q", tc.name, err, tc.want)
		}
	}
	// A graph's spec is Validate's: CheckRequest does not walk it.
	big := &wire.SubmitGraphRequest{Graph: &wire.GraphSpec{Name: strings.Repeat("n", 1<<20)}}
	if err := CheckRequest(big); err != nil {
		t.Errorf("SubmitGraph: %v (the spec is Validate's to bound)", err)
	}
}

func protoRegistryFind(name protoreflect.FullName) (protoreflect.MessageType, error) {
	return protoregistry.GlobalTypes.FindMessageByName(name)
}
