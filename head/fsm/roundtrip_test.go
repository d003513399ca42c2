package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// diff returns the paths of the fields that differ between a and b (of
// one message type), descending into singular messages and into lists of
// messages of equal lengths.
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
		if fd.Kind() == protoreflect.MessageKind && fd.IsList() && va.List().Len() == vb.List().Len() {
			for j := 0; j < va.List().Len(); j++ {
				out = append(out, diff(va.List().Get(j).Message(), vb.List().Get(j).Message(), fmt.Sprintf("%s%s[%d].", path, fd.Name(), j))...)
			}
			continue
		}
		out = append(out, fmt.Sprintf("%s%s: %v before, %v after", path, fd.Name(), va, vb))
	}
	return out
}

// filler sets every field of a message, recursively, to a value that is
// not the field's zero (numbers counting up, so no two fields share one;
// one element per list and map; the last value of each enum), so that a
// field a conversion forgets comes back zero and the round trip differs.
// A message can hold one member of a oneof at a time: each fill sets the
// next member of each oneof it meets, round robin, and the filler records
// which members it has met and which it has set, so that the caller fills
// again until every member has been through the trip (uncovered).
type filler struct {
	n      int
	visits map[protoreflect.FullName]int  // by oneof: how many fills met it
	met    map[protoreflect.FullName]bool // oneof members seen
	set    map[protoreflect.FullName]bool // oneof members filled
}

func newFiller() *filler {
	return &filler{visits: map[protoreflect.FullName]int{}, met: map[protoreflect.FullName]bool{}, set: map[protoreflect.FullName]bool{}}
}

// uncovered returns the oneof members met but never filled, sorted.
func (f *filler) uncovered() []string {
	var out []string
	for name := range f.met {
		if !f.set[name] {
			out = append(out, string(name))
		}
	}
	sort.Strings(out)
	return out
}

// fill fills m. A message type already being filled further up (a
// recursive type) is left empty there, so that filling ends.
func (f *filler) fill(m protoreflect.Message, path []protoreflect.FullName) {
	md := m.Descriptor()
	path = append(path, md.FullName())
	chosen := map[protoreflect.FullName]protoreflect.FullName{} // oneof -> member
	for i := 0; i < md.Oneofs().Len(); i++ {
		od := md.Oneofs().Get(i)
		if od.IsSynthetic() { // proto3 optional: an ordinary field
			continue
		}
		for j := 0; j < od.Fields().Len(); j++ {
			f.met[od.Fields().Get(j).FullName()] = true
		}
		chosen[od.FullName()] = od.Fields().Get(f.visits[od.FullName()] % od.Fields().Len()).FullName()
		f.visits[od.FullName()]++
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if chosen[od.FullName()] != fd.FullName() {
				continue
			}
			f.set[fd.FullName()] = true
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Kind() == protoreflect.MessageKind {
				if !slices.Contains(path, fd.Message().FullName()) {
					f.fill(l.AppendMutable().Message(), path)
				}
				continue
			}
			l.Append(f.scalar(fd))
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			k := f.scalar(fd.MapKey()).MapKey()
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				if !slices.Contains(path, fd.MapValue().Message().FullName()) {
					f.fill(mp.Mutable(k).Message(), path)
				}
				continue
			}
			mp.Set(k, f.scalar(fd.MapValue()))
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if !slices.Contains(path, fd.Message().FullName()) {
				f.fill(m.Mutable(fd).Message(), path)
			}
		default:
			m.Set(fd, f.scalar(fd))
		}
	}
}

// scalar returns a non-zero value of fd's kind.
func (f *filler) scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	f.n++
	v := f.n
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

// filled returns a new m with every field filled.
func filled[M proto.Message](f *filler, m M) M {
	f.fill(m.ProtoReflect(), nil)
	return m
}

// TestFillerCoversOneofs checks the filler on a message with a oneof of
// many members (the worker stream's message): filling until nothing is
// uncovered sets each member once, and a single fill leaves the others
// uncovered, which TestSnapshotWireRoundTrip relies on to go on.
func TestFillerCoversOneofs(t *testing.T) {
	f := newFiller()
	od := (&wire.WorkerMessage{}).ProtoReflect().Descriptor().Oneofs().ByName("msg")
	var got []protoreflect.FullName
	for i := 0; i == 0 || len(f.uncovered()) > 0; i++ {
		if i > od.Fields().Len() {
			t.Fatalf("still uncovered after %d fills: %v", i, f.uncovered())
		}
		m := filled(f, &wire.WorkerMessage{}).ProtoReflect()
		got = append(got, m.WhichOneof(od).FullName())
		if i == 0 && len(f.uncovered()) != od.Fields().Len()-1 {
			t.Fatalf("after one fill: uncovered %v, want the %d members but the first", f.uncovered(), od.Fields().Len()-1)
		}
	}
	if len(got) != od.Fields().Len() {
		t.Fatalf("filled members %v, want each of the %d once", got, od.Fields().Len())
	}
}

// TestSnapshotWireRoundTrip fills every field of every kind of row the
// table holds (a graph; its task, a sandbox's, with spec and attempts; a
// worker with its info; a quota; a pre-warm target; a sandbox snapshot; a
// staged chunk; an API token and the bootstrap marker) and the snapshot's meta, puts them in an FSM's table
// through the conversions a restore uses (state.*FromWire), takes the
// FSM's snapshot (Snapshot, Persist: ToWire and FillWire), restores it
// into a fresh FSM (Restore: decode, *FromWire, Finish) and reads each
// row back in its wire form. A field missing from any conversion on that
// path comes back zero and fails here, named, instead of being lost
// silently on the first snapshot after it is added. It fills again until
// every member of every oneof met has made the trip.
func TestSnapshotWireRoundTrip(t *testing.T) {
	f := newFiller()
	for variant := 0; variant == 0 || len(f.uncovered()) > 0; variant++ {
		if variant == 32 {
			t.Fatalf("oneof members never filled after %d variants: %v", variant, f.uncovered())
		}
		t.Run(fmt.Sprintf("variant%d", variant), func(t *testing.T) { snapshotWireTrip(t, f) })
	}
}

func snapshotWireTrip(t *testing.T, f *filler) {
	graph := filled(f, &wire.Graph{})
	task := filled(f, &wire.Task{})
	worker := filled(f, &wire.Worker{})
	quota := filled(f, &wire.Quota{})
	pool := filled(f, &wire.PoolTarget{})
	snap := filled(f, &wire.Snapshot{})
	staged := filled(f, &wire.SubmitGraphCommand{})
	token := filled(f, &wire.Token{})
	// A token's accessor is 16 hex digits, its hash a SHA-256, and it
	// expires after it was made.
	token.Accessor, token.SecretHash = "0123456789abcdef", bytes.Repeat([]byte{7}, 32)
	token.CreateUnixNanos, token.ExpireUnixNanos = 1000, 2000
	// Only the bootstrap marker keeps the relay key (32 bytes).
	token.RelayKey = nil
	marker := &wire.Token{CreateIndex: 3, CreateUnixNanos: 4, RelayKey: bytes.Repeat([]byte{9}, 32)}

	// Relations the table requires between rows. Each value set here is
	// still not its field's zero, so a conversion that drops it fails.
	// The task belongs to the graph, and its current attempt is RUNNING
	// on the worker, so that the worker's Allocated and ActiveAttempts are
	// what the restore's Finish recomputes from that attempt (it refuses
	// a snapshot that disagrees with itself): the task's resources, one.
	task.GraphId, task.Id = graph.Id, graph.Id+"/"+task.GetSpec().GetName()
	task.State = wire.TaskState_TASK_STATE_RUNNING
	a := task.Attempts[len(task.Attempts)-1]
	a.State, a.WorkerId = wire.TaskState_TASK_STATE_RUNNING, worker.GetInfo().GetId()
	worker.Allocated, worker.ActiveAttempts = proto.CloneOf(task.GetSpec().GetResources()), 1
	// The snapshot was taken of the task's sandbox, on its worker.
	snap.SandboxId, snap.WorkerId = graph.Id, worker.GetInfo().GetId()
	// A graph's metric field is the one its label names, and a stored
	// histogram has exactly state.HistogramBuckets buckets.
	graph.Labels[state.MetricLabel] = graph.Metrics.Field
	m := graph.Metrics
	m.Histogram = m.Histogram[:0]
	for i := range state.HistogramBuckets {
		m.Histogram = append(m.Histogram, uint32(1000+i))
	}

	// What the trip must give back: all of it, but for fields that are
	// not stored. They are set in the input all the same (the conversions
	// get them), and expected here as the read recomputes them.
	wantGraph := proto.CloneOf(graph)
	// An archived summary is the graph's whole wire form, archived time
	// included (recArchive); a live row has no archived time.
	archived := proto.CloneOf(graph)
	archived.Id += "-archived"
	wantGraph.ArchivedUnixNanos = 0
	// Ratios computed on each read from the stored counts and times
	// (state.GraphMetrics.toWire), never stored.
	wm := wantGraph.Metrics
	wm.SuccessRate, wm.Mean, wm.WallMillis = float64(m.Succeeded)/float64(m.Finished), m.Sum/float64(m.Count), 0
	if m.LastFinishUnixNanos > m.FirstStartUnixNanos {
		wm.WallMillis = (m.LastFinishUnixNanos - m.FirstStartUnixNanos) / 1e6
	}
	wantWorker := proto.CloneOf(worker)
	// A worker's allocation is a sum of amounts: the GPU model and memory
	// a task asks for are not amounts it holds. The lease times are the
	// leader's, in its memory, filled in on each read (head/service.go).
	wantWorker.Allocated.GpuModel, wantWorker.Allocated.GpuMemoryBytes = "", 0
	wantWorker.LeaseRenewedUnixNanos, wantWorker.LeaseExpiresUnixNanos = 0, 0

	src := newTestFSM(t, 0)
	r := src.store.Restore()
	const index, queueSeq, clusterID = 17, 23, 29
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(r.Meta(index, queueSeq))
	check(r.ClusterID(clusterID))
	check(r.Rules(RulesCurrent))
	check(r.Graph(state.GraphFromWire(proto.CloneOf(graph))))
	tr, err := state.TaskFromWire(proto.CloneOf(task))
	check(err)
	check(r.Task(tr))
	wr, err := state.WorkerFromWire(proto.CloneOf(worker))
	check(err)
	check(r.Worker(wr))
	qr, err := state.QuotaFromWire(proto.CloneOf(quota))
	check(err)
	check(r.Quota(qr))
	check(r.PoolTarget(proto.CloneOf(pool)))
	check(r.Snapshot(proto.CloneOf(snap)))
	check(r.Archived(proto.CloneOf(archived)))
	check(r.Token(proto.CloneOf(token)))
	check(r.Token(proto.CloneOf(marker)))
	check(r.Staged(&state.StagedChunk{GraphID: staged.GetHeader().GetId(), Chunk: staged.GetChunk(), Command: proto.CloneOf(staged)}))
	check(r.Finish())
	r.Commit()

	fs, err := src.Snapshot()
	check(err)
	sink := &memSink{}
	check(fs.Persist(sink))
	fs.Release()
	dst := newTestFSM(t, 0)
	check(dst.Restore(nopCloser{bytes.NewReader(sink.Bytes())}))
	v := dst.View()

	if v.Index() != index || dst.AppliedIndex() != index || v.NextQueueSeq() != queueSeq || v.ClusterID() != clusterID || v.Rules() != RulesCurrent {
		t.Errorf("meta: index %d applied %d queue_seq %d cluster %d rules %d, want %d %d %d %d %d",
			v.Index(), dst.AppliedIndex(), v.NextQueueSeq(), v.ClusterID(), v.Rules(), index, index, queueSeq, clusterID, RulesCurrent)
	}
	same := func(name string, want proto.Message, got proto.Message) {
		t.Helper()
		if got == nil || !got.ProtoReflect().IsValid() {
			t.Errorf("%s: not in the restored table", name)
			return
		}
		for _, d := range diff(want.ProtoReflect(), got.ProtoReflect(), name+".") {
			t.Errorf("lost in the trip through the snapshot: %s", d)
		}
	}
	if g := v.Graph(graph.Id); g != nil {
		same("Graph", wantGraph, g.ToWire())
	} else {
		same("Graph", wantGraph, nil)
	}
	if tk := v.Task(task.Id); tk != nil {
		same("Task", task, tk.ToWire())
	} else {
		same("Task", task, nil)
	}
	if w := v.Worker(worker.GetInfo().GetId()); w != nil {
		same("Worker", wantWorker, w.ToWire())
		// The GPUs in use are not in the snapshot either: the restore
		// derives them from the active attempt.
		if got := w.GPUsInUse(); !slices.Equal(got, a.GpuUuids) {
			t.Errorf("worker GPUs in use %v after the restore, want the attempt's %v", got, a.GpuUuids)
		}
	} else {
		same("Worker", wantWorker, nil)
	}
	var gotQuota, gotPool, gotStaged proto.Message
	for _, q := range v.QuotaRows() {
		if q.Tenant == quota.Tenant {
			gotQuota = q.ToWire()
		}
	}
	same("Quota", quota, gotQuota)
	for _, p := range v.PoolTargets() {
		if p.GetImage() == pool.Image {
			gotPool = p
		}
	}
	same("PoolTarget", pool, gotPool)
	same("Snapshot", snap, v.Snapshot(snap.Id))
	same("Archived", archived, v.Archived(archived.Id))
	same("Token", token, v.Token(token.Accessor))
	same("ACLBootstrap", marker, v.ACLBootstrap())
	for c := range v.StagedChunks() {
		gotStaged = c.Command
	}
	same("StagedChunk", staged, gotStaged)
}
