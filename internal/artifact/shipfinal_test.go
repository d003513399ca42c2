package artifact

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A log file rewritten after some of its chunks were queued (the Docker
// runtime repairs a log its engine's follow stream garbled) is stored as
// the file holds it at the end: ShipFinal queues again every chunk from the
// first one whose bytes changed, and the manifest counts the new chunks.
// Before ShipFinal the store kept the chunks of the garbled file (a stored
// log 119,079 bytes longer than the container's output, seen with a real
// engine after a worker restart).
func TestShipFinalStoresARewrittenLog(t *testing.T) {
	chunk := strings.Repeat("a", MaxChunkBytes)
	cases := []struct {
		name          string
		before, after string // the file when shipped live, and at the end
		resume        bool   // a new shipper resumes the first's state
	}{
		{"tail garbled, repaired shorter", chunk + chunk + "dup dup dup\n", chunk + chunk + "RESULT\n", false},
		{"middle garbled, repaired longer", chunk + strings.Repeat("b", 1000), chunk + strings.Repeat("c", 1000) + chunk, false},
		{"first byte differs", "zz" + chunk, "yy" + chunk, false},
		{"file shorter", chunk + chunk + chunk, chunk + "end\n", false},
		{"unchanged", chunk + "x\n", chunk + "x\n", false},
		{"resumed, tail garbled", chunk + chunk + "dup dup\n", chunk + chunk + "RESULT RESULT\n", true},
		{"resumed, unchanged, then appended", chunk + "x\n", chunk + "x\nmore\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			base := t.TempDir()
			logPath := filepath.Join(base, "1.log")
			store := NewMemStore()
			sp := NewMemSpool(store)
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); sp.Run(runCtx) }()
			defer func() { stop(); <-done }()

			// Shipped live in two steps, as the ship loop does.
			write(t, logPath, tc.before[:len(tc.before)/2])
			sh := NewLogShipper(att, logPath, sp)
			sh.Resume(logPath + ".shipped")
			must(t, sh.Ship(ctx))
			write(t, logPath, tc.before)
			must(t, sh.Ship(ctx))
			write(t, logPath, tc.after)
			if tc.resume {
				sh = NewLogShipper(att, logPath, sp)
				sh.Resume(logPath + ".shipped")
			}
			m, _, err := Finish{Log: sh}.Store(ctx, sp, att)
			must(t, err)
			must(t, sp.Wait(ctx, att.ManifestKey()))
			var got bytes.Buffer
			for n := uint32(1); n <= m.LogChunks; n++ {
				rc, _, err := store.Get(ctx, att.LogKey(n))
				must(t, err)
				_, _ = io.Copy(&got, rc)
				rc.Close()
			}
			if got.String() != tc.after || m.LogBytes != int64(len(tc.after)) {
				t.Errorf("stored log: %d bytes (manifest %d chunks, %d bytes), want the file's %d bytes", got.Len(), m.LogChunks, m.LogBytes, len(tc.after))
			}
		})
	}
}
