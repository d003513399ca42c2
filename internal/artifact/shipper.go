package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/megaflow/megaflow/internal/blob"
)

// MaxChunkBytes bounds one log chunk, in bytes.
const MaxChunkBytes = 256 << 10

// LogShipper uploads a growing log file as numbered chunks through a
// spool: each Ship queues what was appended since the last one, in chunks
// of at most MaxChunkBytes. The worker calls Ship every second while the
// attempt runs, and once more after it exited, so a worker crash loses at
// most the output of the last interval. One goroutine at a time.
type LogShipper struct {
	a     Attempt
	path  string
	spool Spool
	off   int64
	n     uint32
}

// NewLogShipper returns a shipper of the log file at path, for attempt a.
func NewLogShipper(a Attempt, path string, spool Spool) *LogShipper {
	return &LogShipper{a: a, path: path, spool: spool}
}

// Ship queues the output appended since the last call. A missing file is
// no error (nothing was written yet). Errors: reading the file, the
// spool's; the bytes not shipped are retried by the next call.
func (s *LogShipper) Ship(ctx context.Context) error {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ship log: %w", err)
	}
	defer f.Close()
	buf := make([]byte, MaxChunkBytes)
	for {
		n, err := f.ReadAt(buf, s.off)
		if n > 0 {
			if perr := s.spool.Enqueue(ctx, s.a.LogKey(s.n+1), bytesReader(buf[:n]),
				blob.PutOptions{Size: int64(n), ContentType: "text/plain; charset=utf-8"}); perr != nil {
				return fmt.Errorf("ship log chunk %d: %w", s.n+1, perr)
			}
			s.n++
			s.off += int64(n)
		}
		if errors.Is(err, io.EOF) || n == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ship log: %w", err)
		}
	}
}

// Chunks returns how many chunks and bytes were shipped so far.
func (s *LogShipper) Chunks() (uint32, int64) { return s.n, s.off }
