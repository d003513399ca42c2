package spec

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/wire"
)

// FuzzValidate: any GraphSpec a client can send (protobuf bytes) goes
// through Normalize and Validate without a panic; neither modifies its
// input; Normalize is idempotent and Digest deterministic; a graph Validate
// accepts is accepted again after an encoding round trip.
func FuzzValidate(f *testing.F) {
	seed := func(g *wire.GraphSpec) {
		b, err := proto.Marshal(g)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(base())
	g := base()
	g.Tasks = append(g.Tasks, serviceTask("srv"))
	g.Tasks[0].Env = map[string]string{"A": "1"}
	g.Tasks[0].Resources = &wire.Resources{CpuMillis: 500, MemoryBytes: 1 << 30, Gpus: 1}
	g.Labels = map[string]string{"team": "rl"}
	seed(g)
	cyc := base()
	cyc.Tasks[0].DependsOn = []string{"eval"}
	seed(cyc)
	f.Add([]byte{0x0a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &wire.GraphSpec{}
		if proto.Unmarshal(data, g) != nil {
			return
		}
		sent := proto.Clone(g)
		n := Normalize(g)
		err := Validate(n, DefaultLimits())
		if !proto.Equal(g, sent) {
			t.Fatal("Normalize modified its input")
		}
		if !proto.Equal(Normalize(n), n) {
			t.Fatal("Normalize is not idempotent")
		}
		if string(Digest(g)) != string(Digest(sent.(*wire.GraphSpec))) {
			t.Fatal("Digest is not deterministic")
		}
		if err != nil {
			return
		}
		b, merr := proto.Marshal(n)
		if merr != nil {
			t.Fatalf("a valid graph does not encode: %v", merr)
		}
		again := &wire.GraphSpec{}
		if err := proto.Unmarshal(b, again); err != nil {
			t.Fatal(err)
		}
		if err := Validate(again, DefaultLimits()); err != nil {
			t.Fatalf("valid, then invalid after a round trip: %v", err)
		}
	})
}

// FuzzCheckRequest: CheckRequest never panics on a worker message (the
// deepest request type) decoded from any bytes, and does not modify it.
func FuzzCheckRequest(f *testing.F) {
	for _, m := range []proto.Message{
		&wire.WorkerMessage{Msg: &wire.WorkerMessage_Hello{Hello: &wire.WorkerHello{Info: &wire.WorkerInfo{Id: "w",
			Capacity: &wire.Resources{CpuMillis: 1000}, Labels: map[string]string{"a": "b"}, Gpus: []*wire.GpuDevice{{Uuid: "GPU-1"}}}}}},
		&wire.WorkerMessage{Msg: &wire.WorkerMessage_Events{Events: &wire.EventBatch{Events: []*wire.AttemptEvent{{TaskId: "g/a", Reason: "r"}}}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &wire.WorkerMessage{}
		if proto.Unmarshal(data, m) != nil {
			return
		}
		sent := proto.Clone(m)
		_ = CheckRequest(m)
		if !proto.Equal(m, sent) {
			t.Fatal("CheckRequest modified its input")
		}
	})
}
