package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/megaflow/megaflow/internal/blob"
)

// MemStore is a blob.Store in memory, for tests: the fake beside the real
// backends. Down makes every call fail with blob.ErrUnavailable, as a
// store that does not answer.
type MemStore struct {
	mu   sync.Mutex
	objs map[string]memObj
	down bool
}

type memObj struct {
	data []byte
	info blob.Info
}

var _ blob.Store = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{objs: map[string]memObj{}} }

// SetDown makes the store unavailable (true) or available again.
func (m *MemStore) SetDown(down bool) {
	m.mu.Lock()
	m.down = down
	m.mu.Unlock()
}

func (m *MemStore) check(key string) error {
	if key != "" {
		if err := blob.ValidKey(key); err != nil {
			return err
		}
	}
	if m.down {
		return fmt.Errorf("memstore: %w: down", blob.ErrUnavailable)
	}
	return nil
}

// Put implements blob.Store.
func (m *MemStore) Put(ctx context.Context, key string, r io.Reader, opts blob.PutOptions) (blob.Info, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return blob.Info{}, err
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(key); err != nil {
		return blob.Info{}, err
	}
	if opts.SHA256 != "" && opts.SHA256 != hexSum {
		return blob.Info{}, fmt.Errorf("memstore put %s: %w: got %s, want %s", key, blob.ErrChecksum, hexSum, opts.SHA256)
	}
	info := blob.Info{Key: key, Size: int64(len(data)), SHA256: hexSum, ContentType: opts.ContentType, Modified: time.Now()}
	m.objs[key] = memObj{data: data, info: info}
	return info, nil
}

// Get implements blob.Store.
func (m *MemStore) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(key); err != nil {
		return nil, blob.Info{}, err
	}
	o, ok := m.objs[key]
	if !ok {
		return nil, blob.Info{}, fmt.Errorf("memstore get %s: %w", key, blob.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(o.data)), o.info, nil
}

// Stat implements blob.Store.
func (m *MemStore) Stat(ctx context.Context, key string) (blob.Info, error) {
	rc, info, err := m.Get(ctx, key)
	if err == nil {
		rc.Close()
	}
	return info, err
}

// List implements blob.Store.
func (m *MemStore) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(""); err != nil {
		return nil, err
	}
	var out []blob.Info
	for k, o := range m.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, o.info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements blob.Store.
func (m *MemStore) Delete(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(key); err != nil {
		return err
	}
	delete(m.objs, key)
	return nil
}

// DeletePrefix implements blob.Store.
func (m *MemStore) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(""); err != nil {
		return 0, err
	}
	n := 0
	for k := range m.objs {
		if strings.HasPrefix(k, prefix) {
			delete(m.objs, k)
			n++
		}
	}
	return n, nil
}

// URL implements blob.Store.
func (m *MemStore) URL() string { return "mem://" }

// Close implements blob.Store.
func (m *MemStore) Close() error { return nil }
