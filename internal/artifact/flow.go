package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/megaflow/megaflow/internal/blob"
)

// Finish is what the worker stores once an attempt's process exited.
type Finish struct {
	// Log is the attempt's shipper; its last Ship (ShipFinal) happens here.
	Log *LogShipper
	// OutDir is the attempt's output directory on the worker ("" if none)
	// and Paths the task's declared output paths within it.
	OutDir string
	Paths  []string
	// Result is a JSON result too large for the table (nil if none).
	Result []byte
}

// Store queues the attempt's last log chunk, its output files, the large
// result and finally the manifest, in that order, so a manifest in the
// store means everything it lists is there (spools upload oldest first).
// It returns the manifest and, when a large result was stored, the Ref
// JSON the table records instead. Errors: the spool's or ctx's; the
// artifacts queued before stay queued.
func (f Finish) Store(ctx context.Context, sp Spool, a Attempt) (*Manifest, []byte, error) {
	m := &Manifest{Version: ManifestVersion, TaskID: a.GraphID + "/" + a.TaskName, Attempt: a.Number}
	var errList []error
	if f.Log != nil {
		if err := f.Log.ShipFinal(ctx); err != nil {
			errList = append(errList, err)
		}
		m.LogChunks, m.LogBytes = f.Log.Chunks()
	}
	if f.OutDir != "" && len(f.Paths) > 0 {
		files, notes, err := Collect(ctx, sp, a, f.OutDir, f.Paths)
		m.Files, m.Notes = files, notes
		if err != nil {
			errList = append(errList, err)
		}
	}
	var ref []byte
	if len(f.Result) > 0 {
		sum := sha256.Sum256(f.Result)
		file := File{Path: ResultName, Size: int64(len(f.Result)), SHA256: hex.EncodeToString(sum[:]), ContentType: "application/json"}
		if err := sp.Enqueue(ctx, a.FileKey(ResultName), bytes.NewReader(f.Result),
			blob.PutOptions{Size: file.Size, SHA256: file.SHA256, ContentType: file.ContentType}); err != nil {
			errList = append(errList, fmt.Errorf("store result: %w", err))
		} else {
			m.Result = &file
			ref, _ = json.Marshal(Ref{Artifact: ResultName, Size: file.Size, SHA256: file.SHA256})
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: %w", err)
	}
	if err := sp.Enqueue(ctx, a.ManifestKey(), bytes.NewReader(b), blob.PutOptions{Size: int64(len(b)), ContentType: "application/json"}); err != nil {
		errList = append(errList, fmt.Errorf("store manifest: %w", err))
	}
	return m, ref, errors.Join(errList...)
}

// FetchInputs downloads the output files of attempt parent into dir (the
// child's input directory for that parent, created if missing), checking
// each against the manifest's size and SHA-256. It waits for the
// manifest, polling every poll, as the parent's artifacts may still be in
// its worker's spool. Paths from the manifest are written through an
// os.Root at dir, so none lands outside it. Errors: ctx's (the manifest
// never came), the store's, blob.ErrChecksum.
func FetchInputs(ctx context.Context, store blob.Store, parent Attempt, dir string, poll time.Duration) (*Manifest, error) {
	var m *Manifest
	for {
		var err error
		m, err = ReadManifest(ctx, store, parent)
		if err == nil {
			break
		}
		if !errors.Is(err, blob.ErrNotFound) && !errors.Is(err, blob.ErrUnavailable) {
			return nil, fmt.Errorf("inputs from %s: %w", parent.TaskName, err)
		}
		t := time.NewTimer(poll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("inputs from %s: waiting for its manifest (%v): %w", parent.TaskName, err, ctx.Err())
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("inputs from %s: %w", parent.TaskName, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("inputs from %s: %w", parent.TaskName, err)
	}
	defer root.Close()
	for _, f := range m.Files {
		if q := PathProblem(f.Path); q != "" {
			return nil, fmt.Errorf("inputs from %s: manifest path %s", parent.TaskName, q)
		}
		if err := fetchOne(ctx, store, parent, root, f); err != nil {
			return nil, fmt.Errorf("inputs from %s: %w", parent.TaskName, err)
		}
	}
	return m, nil
}

func fetchOne(ctx context.Context, store blob.Store, a Attempt, root *os.Root, f File) error {
	if d := filepath.Dir(filepath.FromSlash(f.Path)); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	rc, err := OpenFile(ctx, store, a, f)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	defer rc.Close()
	out, err := root.OpenFile(filepath.FromSlash(f.Path), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, rc); err != nil {
		out.Close()
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	return out.Close()
}
