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
	// state, when set, is the file recording n and off (Resume).
	state string
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
			if err := s.save(); err != nil {
				return err
			}
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

// Resume makes the shipper record its progress (chunks queued, bytes of the
// log they hold) in the file at statePath after each chunk it queues, and
// first takes up the progress an earlier shipper of the same log recorded
// there: a worker restarted while its attempt ran goes on with the next
// chunk and byte instead of queuing the log again under other chunk
// boundaries (which a reader following the log would see twice). A missing
// or unreadable state file starts from the first byte. The worker calls it
// right after NewLogShipper, before the first Ship.
//
// A crash between queuing a chunk and recording it makes the next shipper
// queue that chunk again from the same byte: the same key with the same
// bytes, and possibly more of them, which replaces the first upload.
func (s *LogShipper) Resume(statePath string) {
	s.state = statePath
	b, err := os.ReadFile(statePath)
	if err != nil {
		return
	}
	var n uint32
	var off int64
	if _, err := fmt.Sscanf(string(b), "%d %d", &n, &off); err != nil || off < 0 {
		return
	}
	if st, err := os.Stat(s.path); err != nil || st.Size() < off {
		return // not this log's state
	}
	s.n, s.off = n, off
}

// save records the progress in the state file (Resume), as one record of
// fixed width written over the last, so that a crash leaves one whole.
func (s *LogShipper) save() error {
	if s.state == "" {
		return nil
	}
	f, err := os.OpenFile(s.state, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("ship log: state: %w", err)
	}
	_, err = f.WriteAt([]byte(fmt.Sprintf("%010d %020d\n", s.n, s.off)), 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ship log: state: %w", err)
	}
	return nil
}
