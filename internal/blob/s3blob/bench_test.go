package s3blob_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/blob/blobtest"
	"github.com/megaflow/megaflow/internal/blob/fileblob"
	"github.com/megaflow/megaflow/internal/blob/spool"
)

// BenchmarkArtifactWrite measures one artifact write through each layer
// against the floor under it, alternating them in one run so machine drift
// hits both sides of each ratio:
//
//	file    fileblob.Put            vs a bare durable file write (create,
//	                                write, fsync, rename, fsync the dir)
//	spool   spool.Enqueue           vs the same bare durable write
//	s3      s3blob.Put to gofakes3  vs a bare unsigned HTTP PUT of the same
//	                                bytes to the same server
//
// Sizes: 64 KiB (a log chunk) and 8 MiB (an output file; two multipart
// parts at the 5 MiB part size), 30 and 8 rounds after 2 untimed ones.
// Reported: medians in ms and the ratios.
// Run: go test -run '^$' -bench ArtifactWrite -benchtime 1x ./internal/blob/s3blob
func BenchmarkArtifactWrite(b *testing.B) {
	for _, c := range []struct{ size, rounds int }{{64 << 10, 30}, {8 << 20, 8}} {
		size := c.size
		b.Run(fmt.Sprintf("size=%dKiB", size>>10), func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			for range b.N {
				benchWrite(b, size, c.rounds)
			}
		})
	}
}

func benchWrite(b *testing.B, size, rounds int) {
	ctx := context.Background()
	body := blobtest.Bytes(1, size)
	sum := blobtest.Sum(body)
	opts := blob.PutOptions{Size: int64(size), SHA256: sum}

	floorDir := b.TempDir()
	fs, err := fileblob.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer fs.Close()
	down := blobtest.NewFlaky(fs)
	down.SetDown(true) // the spool only spools: uploads are not timed
	cfg := spool.DefaultConfig(b.TempDir())
	cfg.MaxBytes = int64(size) * int64(rounds+2)
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	sp, err := spool.New(cfg, down)
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	srv, err := startServer()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	st, err := blob.Open(ctx, srv.StoreURL("bkt", "p"), s3Backend())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	client := &http.Client{}

	names := []string{"floor-file", "file", "spool", "floor-http", "s3"}
	do := map[string]func(i int) error{
		"floor-file": func(i int) error { return durableWrite(floorDir, fmt.Sprint(i), body) },
		"file": func(i int) error {
			_, err := fs.Put(ctx, fmt.Sprintf("t/g/x/1/f%d", i), bytes.NewReader(body), opts)
			return err
		},
		"spool": func(i int) error {
			return sp.Enqueue(ctx, fmt.Sprintf("t/g/x/1/s%d", i), bytes.NewReader(body), opts)
		},
		"floor-http": func(i int) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("%s/bkt/raw/%d", srv.URL, i), bytes.NewReader(body))
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("raw PUT: %s", resp.Status)
			}
			return nil
		},
		"s3": func(i int) error {
			_, err := st.Put(ctx, fmt.Sprintf("t/g/x/1/o%d", i), bytes.NewReader(body), opts)
			return err
		},
	}
	times := map[string][]time.Duration{}
	for i := -2; i < rounds; i++ { // two untimed warm-up rounds
		for _, n := range names {
			t0 := time.Now()
			if err := do[n](i + 2); err != nil {
				b.Fatalf("%s: %v", n, err)
			}
			if i >= 0 {
				times[n] = append(times[n], time.Since(t0))
			}
		}
	}
	med := map[string]float64{}
	for _, n := range names {
		slices.Sort(times[n])
		med[n] = float64(times[n][len(times[n])/2]) / float64(time.Millisecond)
		b.ReportMetric(med[n], n+"-ms")
	}
	b.ReportMetric(med["file"]/med["floor-file"], "file-x-floor")
	b.ReportMetric(med["spool"]/med["floor-file"], "spool-x-floor")
	b.ReportMetric(med["s3"]/med["floor-http"], "s3-x-http")
}

// durableWrite is the floor of a durable local write.
func durableWrite(dir, name string, b []byte) error {
	f, err := os.CreateTemp(dir, "tmp-")
	if err != nil {
		return err
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
