package artifact

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
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
	// state, when set, is the file recording n and off (Resume); the
	// chunks' sums go to state+".sums".
	state string
	// sums holds, for each chunk queued (index n-1), where it starts in
	// the file and the SHA-256 of its bytes; ShipFinal checks them.
	sums []chunkSum
}

// chunkSum is what ShipFinal checks of one queued chunk.
type chunkSum struct {
	start int64
	size  int
	sum   [sha256.Size]byte
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
			cs := chunkSum{start: s.off, size: n, sum: sha256.Sum256(buf[:n])}
			s.sums = append(s.sums[:s.n], cs)
			s.n++
			s.off += int64(n)
			if err := s.save(cs); err != nil {
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

// ShipFinal is the last Ship of an attempt that exited: it first checks
// that every chunk queued so far still holds the file's bytes (the file may
// have been rewritten after they were queued: the Docker runtime repairs a
// log its engine's follow stream garbled, from the first byte that
// differs), and queues again, under the same numbers, every chunk from the
// first one that does not (or whose sum is unknown, after a Resume from a
// state without sums). Chunks numbered past the new last one may stay in
// the store; the manifest's LogChunks (Chunks) bounds what readers read.
// Errors: as Ship's.
func (s *LogShipper) ShipFinal(ctx context.Context) error {
	if s.n > 0 {
		from, err := s.firstStale()
		if err != nil {
			return err
		}
		if from < s.n {
			s.n = from
			s.off = 0
			if from > 0 {
				last := s.sums[from-1]
				s.off = last.start + int64(last.size)
			}
			s.sums = s.sums[:from]
		}
	}
	return s.Ship(ctx)
}

// firstStale returns the index (0-based) of the first queued chunk whose
// bytes the file no longer holds, or s.n when all still match.
func (s *LogShipper) firstStale() (uint32, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ship log: %w", err)
	}
	defer f.Close()
	buf := make([]byte, MaxChunkBytes)
	var want int64
	for i := uint32(0); i < s.n; i++ {
		if int(i) >= len(s.sums) {
			return i, nil
		}
		cs := s.sums[i]
		if cs.start != want || cs.size > len(buf) {
			return i, nil
		}
		n, err := f.ReadAt(buf[:cs.size], cs.start)
		if n < cs.size {
			if err != nil && !errors.Is(err, io.EOF) {
				return 0, fmt.Errorf("ship log: %w", err)
			}
			return i, nil // the file is shorter now
		}
		if sha256.Sum256(buf[:n]) != cs.sum {
			return i, nil
		}
		want += int64(cs.size)
	}
	return s.n, nil
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
	s.sums = readSums(statePath+".sums", n)
}

// readSums reads the first n chunk sums recorded in path ("start size
// hex-sha256" lines, one per chunk in order); it stops at the first line
// missing or unreadable (ShipFinal queues again from there).
func readSums(path string, n uint32) []chunkSum {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []chunkSum
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() && uint32(len(out)) < n {
		var cs chunkSum
		var hexSum []byte
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %x", &cs.start, &cs.size, &hexSum); err != nil || len(hexSum) != sha256.Size {
			break
		}
		copy(cs.sum[:], hexSum)
		out = append(out, cs)
	}
	return out
}

// save records the progress in the state file (Resume), as one record of
// fixed width written over the last, so that a crash leaves one whole, and
// chunk cs's sum as line s.n of the sums file (lines past it, from an
// earlier pass, are cut).
func (s *LogShipper) save(cs chunkSum) error {
	if s.state == "" {
		return nil
	}
	if err := s.saveSum(cs); err != nil {
		return err
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

// saveSum writes chunk cs's line, the s.n-th, in the sums file, over
// whatever was there from that line on.
func (s *LogShipper) saveSum(cs chunkSum) error {
	line := fmt.Sprintf("%020d %010d %x\n", cs.start, cs.size, cs.sum[:])
	f, err := os.OpenFile(s.state+".sums", os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("ship log: sums: %w", err)
	}
	at := int64(s.n-1) * int64(len(line))
	_, err = f.WriteAt([]byte(line), at)
	if err == nil {
		err = f.Truncate(at + int64(len(line)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ship log: sums: %w", err)
	}
	return nil
}
