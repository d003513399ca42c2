package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"slices"

	"github.com/megaflow/megaflow/internal/blob"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// MaxManifestBytes bounds a manifest a reader accepts.
const MaxManifestBytes = 16 << 20

// ReadManifest fetches and decodes attempt a's manifest. Errors:
// blob.ErrNotFound while it has not landed, the store's, a bad manifest.
func ReadManifest(ctx context.Context, store blob.Store, a Attempt) (*Manifest, error) {
	rc, _, err := store.Get(ctx, a.ManifestKey())
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", a.ManifestKey(), err)
	}
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("manifest %s is over %d bytes", a.ManifestKey(), MaxManifestBytes)
	}
	return ParseManifest(b)
}

// LogChunks returns the numbers of attempt a's log chunks in the store,
// ascending.
func LogChunks(ctx context.Context, store blob.Store, a Attempt) ([]uint32, error) {
	infos, err := store.List(ctx, a.LogPrefix())
	if err != nil {
		return nil, err
	}
	out := make([]uint32, 0, len(infos))
	for _, in := range infos {
		if n := chunkNumber(a.LogPrefix(), in.Key); n > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// OpenFile opens file f of attempt a; the reader checks the size and
// SHA-256 against f as it reaches the end and then fails with
// blob.ErrChecksum on a mismatch. The caller closes it.
func OpenFile(ctx context.Context, store blob.Store, a Attempt, f File) (io.ReadCloser, error) {
	rc, _, err := store.Get(ctx, a.FileKey(f.Path))
	if err != nil {
		return nil, err
	}
	return &verifier{rc: rc, want: f, h: sha256.New()}, nil
}

type verifier struct {
	rc   io.ReadCloser
	want File
	h    hash.Hash
	n    int64
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.want.Size {
		return n, fmt.Errorf("artifact %q: %w: more than the %d bytes listed", v.want.Path, blob.ErrChecksum, v.want.Size)
	}
	if err == io.EOF {
		if got := hex.EncodeToString(v.h.Sum(nil)); v.n != v.want.Size || got != v.want.SHA256 {
			return n, fmt.Errorf("artifact %q: %w: read %d bytes with SHA-256 %s, the manifest lists %d bytes with %s",
				v.want.Path, blob.ErrChecksum, v.n, got, v.want.Size, v.want.SHA256)
		}
	}
	return n, err
}

func (v *verifier) Close() error { return v.rc.Close() }
