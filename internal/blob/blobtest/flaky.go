package blobtest

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/megaflow/megaflow/internal/blob"
)

// Flaky wraps a store and fails every call with blob.ErrUnavailable while
// it is down (SetDown), as a store behind a broken network would. It counts
// the Puts it refused and the ones it passed on.
type Flaky struct {
	blob.Store
	down    atomic.Bool
	refused atomic.Int64
	passed  atomic.Int64
}

var _ blob.Store = (*Flaky)(nil)

// NewFlaky returns s wrapped, up.
func NewFlaky(s blob.Store) *Flaky { return &Flaky{Store: s} }

// SetDown makes the store fail (true) or work (false) from the next call.
func (f *Flaky) SetDown(down bool) { f.down.Store(down) }

// Refused returns how many Puts failed because the store was down.
func (f *Flaky) Refused() int64 { return f.refused.Load() }

// Passed returns how many Puts were passed to the wrapped store.
func (f *Flaky) Passed() int64 { return f.passed.Load() }

func (f *Flaky) check(op string) error {
	if f.down.Load() {
		return fmt.Errorf("flaky store: %s: %w (down for the test)", op, blob.ErrUnavailable)
	}
	return nil
}

// Put implements blob.Store.
func (f *Flaky) Put(ctx context.Context, key string, r io.Reader, opts blob.PutOptions) (blob.Info, error) {
	if err := f.check("put"); err != nil {
		f.refused.Add(1)
		return blob.Info{}, err
	}
	f.passed.Add(1)
	return f.Store.Put(ctx, key, r, opts)
}

// Get implements blob.Store.
func (f *Flaky) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	if err := f.check("get"); err != nil {
		return nil, blob.Info{}, err
	}
	return f.Store.Get(ctx, key)
}

// Stat implements blob.Store.
func (f *Flaky) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := f.check("stat"); err != nil {
		return blob.Info{}, err
	}
	return f.Store.Stat(ctx, key)
}

// List implements blob.Store.
func (f *Flaky) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	if err := f.check("list"); err != nil {
		return nil, err
	}
	return f.Store.List(ctx, prefix)
}

// Delete implements blob.Store.
func (f *Flaky) Delete(ctx context.Context, key string) error {
	if err := f.check("delete"); err != nil {
		return err
	}
	return f.Store.Delete(ctx, key)
}

// DeletePrefix implements blob.Store.
func (f *Flaky) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	if err := f.check("delete prefix"); err != nil {
		return 0, err
	}
	return f.Store.DeletePrefix(ctx, prefix)
}
