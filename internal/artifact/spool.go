package artifact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/megaflow/megaflow/internal/blob"
)

// Spool queues uploads to the artifact store so that a worker never waits
// on the store: Enqueue returns once the spool holds the content, and the
// spool uploads it later, one at a time in enqueue order, retrying until
// it lands. internal/blob/spool.Spool (durable, on disk, bounded) is the
// one daemons use; MemSpool is an in-memory one for tests.
//
// Because uploads land in enqueue order, an attempt's manifest, enqueued
// last, landing means everything of the attempt enqueued before it landed.
type Spool interface {
	// Enqueue queues r's content for upload under key and returns once the
	// spool holds it; opts.SHA256, when set, is checked. Errors: the spool
	// is full (retry later), its disk failed, ctx's.
	Enqueue(ctx context.Context, key string, r io.Reader, opts blob.PutOptions) error
	// Wait blocks until no upload of key is queued. Errors: ctx's, or the
	// key's upload failed for good.
	Wait(ctx context.Context, key string) error
}

// Pending reports whether sp still holds an upload of key.
func Pending(sp Spool, key string) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return sp.Wait(ctx, key) != nil
}

// MemSpool is a Spool that holds queued uploads in memory (not durable:
// a worker restart loses them). Run uploads them. Safe for concurrent use.
type MemSpool struct {
	store blob.Store

	mu      sync.Mutex
	queue   []memItem
	changed chan struct{} // closed and replaced on every change
}

type memItem struct {
	key  string
	data []byte
	opts blob.PutOptions
}

var _ Spool = (*MemSpool)(nil)

// NewMemSpool returns a MemSpool uploading to store once Run runs.
func NewMemSpool(store blob.Store) *MemSpool {
	return &MemSpool{store: store, changed: make(chan struct{})}
}

func (s *MemSpool) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Enqueue implements Spool.
func (s *MemSpool) Enqueue(ctx context.Context, key string, r io.Reader, opts blob.PutOptions) error {
	if err := blob.ValidKey(key); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("spool %s: %w", key, err)
	}
	opts.Size = int64(len(data))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, memItem{key: key, data: data, opts: opts})
	s.notify()
	return nil
}

// Wait implements Spool.
func (s *MemSpool) Wait(ctx context.Context, key string) error {
	for {
		s.mu.Lock()
		ch, n := s.changed, 0
		for _, it := range s.queue {
			if it.key == key {
				n++
			}
		}
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run uploads queued items oldest first until ctx ends, retrying an
// upload that failed with ErrUnavailable after a backoff of 50 ms doubling
// to 2 s; an upload refused for another reason (checksum, invalid key) is
// dropped, as retrying cannot help.
func (s *MemSpool) Run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		s.mu.Lock()
		ch := s.changed
		var it *memItem
		if len(s.queue) > 0 {
			it = &s.queue[0]
		}
		s.mu.Unlock()
		if it == nil {
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return
			}
		}
		_, err := s.store.Put(ctx, it.key, bytes.NewReader(it.data), it.opts)
		if ctx.Err() != nil {
			return
		}
		if err != nil && errors.Is(err, blob.ErrUnavailable) {
			backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		s.mu.Lock()
		s.queue = s.queue[1:]
		s.notify()
		s.mu.Unlock()
	}
}
