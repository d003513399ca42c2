package artifact

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/blob/spool"
)

// benchOutputs writes n files of size bytes under dir/out and returns it.
func benchOutputs(b *testing.B, dir string, n, size int) string {
	out := filepath.Join(dir, "out")
	data := []byte(strings.Repeat("x", size))
	for i := range n {
		p := filepath.Join(out, fmt.Sprintf("f%03d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// BenchmarkCollectIntoSpool: collecting 64 files of 64 KiB into the
// durable spool (SHA-256, one fsynced entry each), against the baseline of
// copying the same files with one fsync each (BenchmarkCopyFsyncBaseline).
func BenchmarkCollectIntoSpool(b *testing.B) {
	dir := b.TempDir()
	out := benchOutputs(b, dir, 64, 64<<10)
	store := NewMemStore()
	for i := 0; b.Loop(); i++ {
		sp, err := spool.New(spool.DefaultConfig(filepath.Join(dir, fmt.Sprintf("spool%d", i))), store)
		if err != nil {
			b.Fatal(err)
		}
		a := Attempt{Tenant: "t", GraphID: "g", TaskName: "x", Number: uint32(i + 1)}
		if _, _, err := Collect(context.Background(), sp, a, out, []string{"."}); err != nil {
			b.Fatal(err)
		}
		sp.Close()
	}
}

func BenchmarkCopyFsyncBaseline(b *testing.B) {
	dir := b.TempDir()
	out := benchOutputs(b, dir, 64, 64<<10)
	for i := 0; b.Loop(); i++ {
		dst := filepath.Join(dir, fmt.Sprintf("copy%d", i))
		if err := os.MkdirAll(dst, 0o755); err != nil {
			b.Fatal(err)
		}
		ents, _ := os.ReadDir(out)
		for _, e := range ents {
			src, err := os.Open(filepath.Join(out, e.Name()))
			if err != nil {
				b.Fatal(err)
			}
			f, err := os.Create(filepath.Join(dst, e.Name()))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(f, src)
			f.Sync()
			f.Close()
			src.Close()
		}
	}
}
