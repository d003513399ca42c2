package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/head/state"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// updateGolden regenerates the stored log and its snapshot's digest:
//
//	go test ./head/fsm -run TestReplayGoldenLog -update-golden
//
// Only for a new stored log: an apply change that makes the old one replay
// differently must go behind a new rules version (rules.go) instead.
var updateGolden = flag.Bool("update-golden", false, "regenerate testdata/golden")

// goldenLog is a log written by an earlier build: 300 random entries under
// rules 0, OpSetRules 1, 300 more under rules 1 (the generator of
// TestDeterminism, seed 7, with the rare ops, its own rules entries
// removed). goldenDigest is the SHA-256 of the records (the snapshot less
// its header) of the table that build applied it to.
var (
	goldenLog    = filepath.Join("testdata", "golden", "rules0-1.log")
	goldenDigest = filepath.Join("testdata", "golden", "rules0-1.sha256")
)

// TestReplayGoldenLog: a log written by an earlier build replays to the
// same table, byte for byte in its snapshot, one entry at a time and in
// batches. A change of what apply does under a rules version already in
// use fails here; it belongs behind a new version (rules.go), so that logs
// and heads of older builds keep their meaning.
func TestReplayGoldenLog(t *testing.T) {
	if *updateGolden {
		writeGolden(t)
	}
	raw, err := os.ReadFile(goldenLog)
	if err != nil {
		t.Fatal(err)
	}
	var entries [][]byte
	for len(raw) > 0 {
		n, k := binary.Uvarint(raw)
		if k <= 0 || uint64(len(raw)-k) < n {
			t.Fatalf("%s: truncated after %d entries", goldenLog, len(entries))
		}
		entries, raw = append(entries, raw[k:k+int(n)]), raw[k+int(n):]
	}
	want, err := os.ReadFile(goldenDigest)
	if err != nil {
		t.Fatal(err)
	}
	for _, batched := range []bool{false, true} {
		f := newTestFSM(t, 0)
		applyAll(f, entries, batched, rand.New(rand.NewSource(1)))
		if r := f.View().Rules(); r != 1 {
			t.Fatalf("rules %d after the golden log; want 1", r)
		}
		sum := sha256.Sum256(snapshotRecords(t, f.View()))
		if got := hex.EncodeToString(sum[:]); got != strings.TrimSpace(string(want)) {
			t.Fatalf("the golden log (%d entries, batched %v) replays to a table whose snapshot digest is %s, not the stored %s: "+
				"apply now does something else with entries an earlier build wrote; put the change behind a new rules version (head/fsm/rules.go)",
				len(entries), batched, got, strings.TrimSpace(string(want)))
		}
	}
}

// snapshotRecords is the snapshot of v without its header: the digest is
// of the table's records, whichever header its rules version calls for.
func snapshotRecords(t *testing.T, v *state.View) []byte {
	t.Helper()
	return snapshotBytes(t, v)[len(snapshotMagic):]
}

func writeGolden(t *testing.T) {
	t.Helper()
	gen := &logGen{rng: rand.New(rand.NewSource(7)), tb: t, rareEvery: 6}
	withoutRules := func(es [][]byte) [][]byte {
		var out [][]byte
		for _, e := range es {
			if Op(e[0]) != OpSetRules {
				out = append(out, e)
			}
		}
		return out
	}
	entries := withoutRules(gen.entries(300))
	entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(1)))
	entries = append(entries, withoutRules(gen.entries(300))...)
	var buf bytes.Buffer
	for _, e := range entries {
		buf.Write(binary.AppendUvarint(nil, uint64(len(e))))
		buf.Write(e)
	}
	f := newTestFSM(t, 0)
	applyAll(f, entries, false, nil)
	sum := sha256.Sum256(snapshotRecords(t, f.View()))
	if err := os.WriteFile(goldenLog, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenDigest, []byte(hex.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
