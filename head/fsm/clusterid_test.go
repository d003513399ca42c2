package fsm

import (
	"bytes"
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/state"
)

// The cluster id: the first OpSetClusterID sets it, a later one (a second
// leader's) changes nothing, a snapshot carries it, and a snapshot from
// before cluster ids (a meta record of two numbers) restores with none.
func TestClusterIDFirstWinsAndSurvivesSnapshots(t *testing.T) {
	f := newTestFSM(t, 0)
	if id := f.View().ClusterID(); id != 0 {
		t.Fatalf("new table has cluster id %x", id)
	}
	if got := f.ok(OpSetClusterID, wrapperspb.UInt64(0)); got != uint64(0) {
		t.Fatalf("id 0 gave %v, want nothing set", got)
	}
	if got := f.ok(OpSetClusterID, wrapperspb.UInt64(0xabc)); got != uint64(0xabc) {
		t.Fatalf("first set returned %v", got)
	}
	if got := f.ok(OpSetClusterID, wrapperspb.UInt64(0xdef)); got != uint64(0xabc) || f.View().ClusterID() != 0xabc {
		t.Fatalf("second set returned %v, table %x; want the first kept", got, f.View().ClusterID())
	}
	if s := state.FormatClusterID(f.View().ClusterID()); s != "0000000000000abc" {
		t.Fatalf("formatted %q", s)
	}
	f.submit(graphSpec("g", spec("a")))

	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, f.View()); err != nil {
		t.Fatal(err)
	}
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	if id := dst.View().ClusterID(); id != 0xabc {
		t.Fatalf("restored cluster id %x, want abc", id)
	}

	// The same snapshot with the meta record of an older head: two numbers.
	old := oldMetaSnapshot(t, buf.Bytes())
	dst = newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(old)}); err != nil {
		t.Fatal(err)
	}
	if id := dst.View().ClusterID(); id != 0 || dst.View().Graph("g") == nil {
		t.Fatalf("old snapshot: cluster id %x, graph %v", id, dst.View().Graph("g"))
	}
}

// oldMetaSnapshot rewrites snap's first record (recMeta) without its third
// number, as a head from before cluster ids wrote it.
func oldMetaSnapshot(t *testing.T, snap []byte) []byte {
	t.Helper()
	rest := snap[len(snapshotMagic):]
	if rest[0] != recMeta {
		t.Fatalf("first record kind %d", rest[0])
	}
	n, k := binary.Uvarint(rest[1:])
	payload := rest[1+k : 1+k+int(n)]
	_, a := binary.Uvarint(payload)
	_, b := binary.Uvarint(payload[a:])
	out := append([]byte(snapshotMagic), appendRecord(nil, recMeta, payload[:a+b])...)
	return append(out, rest[1+k+int(n):]...)
}
