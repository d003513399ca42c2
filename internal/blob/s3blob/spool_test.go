package s3blob_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/blob/blobtest"
	"github.com/megaflow/megaflow/internal/blob/s3blob/s3fake"
	"github.com/megaflow/megaflow/internal/blob/spool"
)

// TestSpoolOutlivesOutage takes the S3 server down (connections refused,
// then 503s), spools artifacts meanwhile, restarts the spool during the
// outage, brings the server back, and checks every byte landed.
func TestSpoolOutlivesOutage(t *testing.T) {
	srv := newServer(t)
	s := open(t, srv, "art")
	dir := t.TempDir()
	cfg := spool.DefaultConfig(dir)
	cfg.MaxBytes = 64 << 20
	cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 20*time.Millisecond

	srv.SetMode(s3fake.Refuse)
	sp, err := spool.New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i := range 4 {
		want[fmt.Sprintf("acme/g/t/1/log-%d", i)] = blobtest.Bytes(uint64(i), 1000+i)
	}
	want["acme/g/t/1/out.bin"] = blobtest.Bytes(99, int(s.PartSize())+777) // multipart
	ctx := context.Background()
	for k, b := range want {
		if err := sp.Enqueue(ctx, k, bytes.NewReader(b), blob.PutOptions{Size: int64(len(b))}); err != nil {
			t.Fatalf("enqueue %q: %v", k, err)
		}
	}
	waitFor(t, "refused uploads", func() bool { return len(srv.Requests()) >= 3 })
	srv.SetMode(s3fake.Unavailable)
	seen := len(srv.Requests())
	waitFor(t, "503 answers", func() bool { return len(srv.Requests()) >= seen+3 })
	if n, _ := sp.Pending(); n != len(want) {
		t.Fatalf("Pending during the outage = %d, want %d", n, len(want))
	}
	sp.Close() // the process restarts while the store is down

	sp, err = spool.New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	srv.SetMode(s3fake.Up)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for k := range want {
		if err := sp.Wait(wctx, k); err != nil {
			t.Fatalf("wait %q: %v", k, err)
		}
	}
	for k, b := range want {
		got, in := blobtest.Get(t, s, k)
		if !bytes.Equal(got, b) || in.SHA256 != blobtest.Sum(b) {
			t.Errorf("%q: %d bytes, sha256 %q after the outage; want %d bytes, %s", k, len(got), in.SHA256, len(b), blobtest.Sum(b))
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronization
	}
}
