// Package spool is a durable local queue of uploads to a blob store: a
// worker writes a task's artifacts into the spool, which returns once they
// are on local disk, and a goroutine uploads them, oldest first, retrying
// with exponential backoff while the store is unavailable. A store that is
// down therefore neither loses a task's artifacts nor blocks the task.
//
// # Layout
//
// Under Config.Dir:
//
//	<seq>.data      the content, exactly as enqueued
//	<seq>.json      the entry: key, size, SHA-256, content type, time
//	tmp-*           being written (removed at start)
//	failed/<seq>.*  entries that can never upload (see below)
//
// seq is a 20-digit decimal sequence number; the .json file is the commit
// marker, written (fsync, rename, fsync of the directory) after the .data
// file, so an entry exists whole or not at all, and Enqueue returns only
// after both are durable. New re-scans the directory, so entries survive a
// restart; a .data file without its .json is removed.
//
// # Semantics
//
//   - Order: entries upload one at a time in enqueue order; later entries
//     wait behind an older one that fails (the store is down for all).
//     Two entries of one key land in enqueue order: the later wins.
//   - Checksums: Enqueue computes the content's SHA-256 (and checks the
//     caller's, if given: ErrChecksum, nothing spooled); the upload passes
//     it to the store, which verifies it again.
//   - Full: the spool holds at most Config.MaxBytes of content. An Enqueue
//     that would pass the bound spools nothing and returns an error wrapping
//     ErrFull; the caller holds the data and retries later (backpressure).
//     Nothing is ever dropped to make room.
//   - Errors: ErrUnavailable, ctx deadlines and unknown errors are retried
//     forever with backoff from MinBackoff doubling to MaxBackoff (with
//     jitter). An upload refused as ErrChecksum is retried too if the spooled
//     file still matches its SHA-256 (the damage was in flight); if not (the
//     local disk corrupted it), and on ErrInvalidKey (a key the store cannot
//     hold), retrying cannot help: the entry moves to failed/, is logged at
//     error level, and Wait for its key returns an error wrapping ErrFailed.
//   - Landing: Wait(ctx, key) returns once no entry of key is pending, so a
//     worker can clear a task's artifacts_pending flag; Pending reports the
//     backlog.
package spool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/megaflow/megaflow/internal/blob"
)

var (
	// ErrFull: the spool has no room for the content; retry later.
	ErrFull = errors.New("spool full")
	// ErrFailed: an entry can never be uploaded (see the package doc); its
	// files stay in failed/ for an operator.
	ErrFailed = errors.New("spool: upload failed for good")
	// ErrClosed: the spool was closed.
	ErrClosed = errors.New("spool: closed")
)

// Config configures a Spool.
type Config struct {
	// Dir is the spool's directory, absolute; created if missing. One
	// Spool at a time may use it.
	Dir string
	// MaxBytes bounds the content spooled, in bytes.
	MaxBytes int64
	// MinBackoff is the first wait after a failed upload; each further
	// failure doubles it up to MaxBackoff. A success resets it.
	MinBackoff, MaxBackoff time.Duration
	// PutTimeout bounds one upload try.
	PutTimeout time.Duration
	// Logger receives outage and failure reports; nil discards them.
	Logger *slog.Logger
	// After is the clock the backoff waits on; nil means time.After.
	After func(time.Duration) <-chan time.Time
}

// DefaultConfig returns the defaults for a spool in dir: 1 GiB, backoff
// 250 ms to 30 s, 10 minutes per upload try.
func DefaultConfig(dir string) Config {
	return Config{Dir: dir, MaxBytes: 1 << 30, MinBackoff: 250 * time.Millisecond, MaxBackoff: 30 * time.Second,
		PutTimeout: 10 * time.Minute}
}

// Validate reports the first field out of bounds.
func (c Config) Validate() error {
	switch {
	case !filepath.IsAbs(c.Dir):
		return fmt.Errorf("spool: Dir %q must be an absolute path", c.Dir)
	case c.MaxBytes <= 0:
		return fmt.Errorf("spool: MaxBytes %d must be positive", c.MaxBytes)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("spool: backoff %v..%v: MinBackoff must be positive and at most MaxBackoff", c.MinBackoff, c.MaxBackoff)
	case c.PutTimeout <= 0:
		return fmt.Errorf("spool: PutTimeout %v must be positive", c.PutTimeout)
	}
	return nil
}

// entry is one spooled upload; its JSON is <seq>.json.
type entry struct {
	Seq         uint64 `json:"-"`
	Key         string `json:"key"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type,omitempty"`
	EnqueuedNs  int64  `json:"enqueued_ns"`
	Error       string `json:"error,omitempty"` // in failed/ only
}

// Spool is a durable upload queue in front of a blob.Store. Its methods are
// safe for concurrent use; one goroutine, started by New and stopped by
// Close, does the uploads.
type Spool struct {
	cfg   Config
	store blob.Store
	log   *slog.Logger

	mu       sync.Mutex
	queue    []*entry // by Seq
	bytes    int64    // content bytes queued or being committed
	next     uint64
	byKey    map[string]int    // queued entries per key
	failed   map[string]string // key -> why, for entries in failed/
	changed  chan struct{}     // closed and replaced whenever queue changes
	wake     chan struct{}     // 1-buffered: an entry was added
	closed   bool
	cancel   context.CancelFunc
	done     chan struct{}
	downFrom time.Time // start of the current outage, zero when none
	loaded   []string  // keys of the entries found at open, sorted
}

// New opens the spool in cfg.Dir for store, loads the entries left there,
// and starts uploading. The caller calls Close. Errors: an invalid Config,
// or a directory that cannot be read or created.
func New(cfg Config, store blob.Store) (*Spool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "failed"), 0o755); err != nil {
		return nil, fmt.Errorf("spool %s: %w", cfg.Dir, err)
	}
	s := &Spool{cfg: cfg, store: store, log: log.With("spool", cfg.Dir, "store", store.URL()),
		byKey: map[string]int{}, failed: map[string]string{}, changed: make(chan struct{}),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	if err := s.load(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(ctx)
	return s, nil
}

func seqName(seq uint64, ext string) string { return fmt.Sprintf("%020d.%s", seq, ext) }

// load re-scans the directory (New, before the goroutine starts).
func (s *Spool) load() error {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("spool %s: %w", s.cfg.Dir, err)
	}
	datas := map[uint64]int64{}
	for _, de := range ents {
		name := de.Name()
		if strings.HasPrefix(name, "tmp-") {
			_ = os.Remove(filepath.Join(s.cfg.Dir, name))
			continue
		}
		base, ext, ok := strings.Cut(name, ".")
		seq, err := strconv.ParseUint(base, 10, 64)
		if !ok || err != nil {
			continue
		}
		s.next = max(s.next, seq+1)
		switch ext {
		case "data":
			if fi, err := de.Info(); err == nil {
				datas[seq] = fi.Size()
			}
		case "json":
			e, err := readEntry(filepath.Join(s.cfg.Dir, name))
			if err == nil && blob.ValidKey(e.Key) != nil {
				err = fmt.Errorf("invalid key %q", e.Key)
			}
			if err != nil {
				s.log.Error("spool: unreadable entry moved to failed/", "entry", name, "err", err)
				_ = os.Rename(filepath.Join(s.cfg.Dir, name), filepath.Join(s.cfg.Dir, "failed", name))
				continue
			}
			e.Seq = seq
			s.queue = append(s.queue, e)
		}
	}
	var q []*entry
	for _, e := range s.queue {
		size, ok := datas[e.Seq]
		delete(datas, e.Seq)
		if !ok || size != e.Size {
			s.moveFailed(e, fmt.Sprintf("spooled content missing or truncated (%d bytes on disk, %d recorded)", size, e.Size))
			continue
		}
		q = append(q, e)
		s.bytes += e.Size
		s.byKey[e.Key]++
	}
	for seq := range datas { // content without its commit marker
		_ = os.Remove(filepath.Join(s.cfg.Dir, seqName(seq, "data")))
	}
	slices.SortFunc(q, func(a, b *entry) int { return cmpSeq(a.Seq, b.Seq) })
	s.queue = q
	for _, e := range q {
		s.loaded = append(s.loaded, e.Key)
	}
	slices.Sort(s.loaded)
	s.loaded = slices.Compact(s.loaded)
	failed, _ := os.ReadDir(filepath.Join(s.cfg.Dir, "failed"))
	for _, de := range failed {
		if strings.HasSuffix(de.Name(), ".json") {
			if e, err := readEntry(filepath.Join(s.cfg.Dir, "failed", de.Name())); err == nil && e.Key != "" {
				s.failed[e.Key] = e.Error
			}
		}
		if base, _, ok := strings.Cut(de.Name(), "."); ok {
			if seq, err := strconv.ParseUint(base, 10, 64); err == nil {
				s.next = max(s.next, seq+1)
			}
		}
	}
	if len(s.queue) > 0 {
		s.log.Info("spool: resuming uploads left from before", "entries", len(s.queue), "bytes", s.bytes)
	}
	return nil
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func readEntry(path string) (*entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var e entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Enqueue spools r's content for upload under key and returns once it is
// durable on local disk. opts.Size, when positive, and opts.SHA256, when set,
// are checked. Errors: blob.ErrInvalidKey, blob.ErrChecksum, ErrFull (nothing
// spooled: retry later), ErrClosed, ctx's error, or a local disk error.
func (s *Spool) Enqueue(ctx context.Context, key string, r io.Reader, opts blob.PutOptions) error {
	if err := blob.ValidKey(key); err != nil {
		return err
	}
	if opts.SHA256 != "" {
		if err := blob.ValidSHA256(opts.SHA256); err != nil {
			return fmt.Errorf("spool %q: %w", key, err)
		}
	}
	s.mu.Lock()
	closed, avail := s.closed, s.cfg.MaxBytes-s.bytes
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if opts.Size > avail {
		return s.full(key, opts.Size)
	}
	tmp := filepath.Join(s.cfg.Dir, fmt.Sprintf("tmp-%016x", rand.Uint64()))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("spool %q: %w", key, err)
	}
	defer os.Remove(tmp) // a no-op once renamed
	size := blob.SizeOf(opts)
	vr := blob.NewVerifyingReader(blob.ContextReader(ctx, r), opts.SHA256, size, fmt.Sprintf("key %q", key))
	n, err := io.Copy(f, io.LimitReader(vr, avail+1))
	if err == nil && n > avail {
		err = s.full(key, -1)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, ErrFull) {
			return err
		}
		if errors.Is(err, blob.ErrChecksum) || ctx.Err() != nil {
			return fmt.Errorf("spool %q: %w", key, err)
		}
		return fmt.Errorf("spool %q: writing %s: %w", key, s.cfg.Dir, err)
	}
	e := &entry{Key: key, Size: n, SHA256: vr.Sum(), ContentType: opts.ContentType, EnqueuedNs: time.Now().UnixNano()}

	// Reserve room and a sequence number, then commit outside the lock.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.bytes+n > s.cfg.MaxBytes {
		s.mu.Unlock()
		return s.full(key, n)
	}
	e.Seq = s.next
	s.next++
	s.bytes += n
	s.mu.Unlock()
	if err := s.commit(tmp, e); err != nil {
		s.mu.Lock()
		s.bytes -= n
		s.mu.Unlock()
		return fmt.Errorf("spool %q: %w", key, err)
	}
	s.mu.Lock()
	i, _ := slices.BinarySearchFunc(s.queue, e.Seq, func(x *entry, seq uint64) int { return cmpSeq(x.Seq, seq) })
	s.queue = slices.Insert(s.queue, i, e)
	s.byKey[key]++
	s.notifyLocked()
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

func (s *Spool) full(key string, size int64) error {
	s.mu.Lock()
	pending, since := s.bytes, s.downFrom
	s.mu.Unlock()
	what := "the content"
	if size >= 0 {
		what = fmt.Sprintf("%d bytes", size)
	}
	why := ""
	if !since.IsZero() {
		why = fmt.Sprintf("; the store has failed since %s", since.Format(time.RFC3339))
	}
	if size > s.cfg.MaxBytes {
		return fmt.Errorf("spool %q: %w: %s exceed the whole spool (%d bytes); upload it directly or raise the bound",
			key, ErrFull, what, s.cfg.MaxBytes)
	}
	return fmt.Errorf("spool %q: %w: %s do not fit, %d of %d bytes are pending%s; retry later",
		key, ErrFull, what, pending, s.cfg.MaxBytes, why)
}

// commit renames the content into place and writes the entry's marker.
func (s *Spool) commit(tmp string, e *entry) error {
	data := filepath.Join(s.cfg.Dir, seqName(e.Seq, "data"))
	if err := os.Rename(tmp, data); err != nil {
		return err
	}
	b, _ := json.Marshal(e)
	if err := writeFileSync(filepath.Join(s.cfg.Dir, seqName(e.Seq, "json")), b); err != nil {
		_ = os.Remove(data)
		return err
	}
	return syncDir(s.cfg.Dir)
}

// writeFileSync writes path atomically and durably (temp, fsync, rename).
func writeFileSync(path string, b []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "tmp-"+filepath.Base(path))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
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
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (s *Spool) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Pending returns the number of entries waiting to upload and their
// content's size in bytes.
func (s *Spool) Pending() (entries int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.queue {
		bytes += e.Size
	}
	return len(s.queue), bytes
}

// Recovered returns the keys of the entries New found in the directory
// (left by an earlier process), sorted, whether they have uploaded since
// or not: a restarted owner finds there what it was waiting for before it
// stopped, and Wait tells it when each has landed.
func (s *Spool) Recovered() []string { return slices.Clone(s.loaded) }

// Failed returns the keys whose entries moved to failed/, with why.
func (s *Spool) Failed() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]string, len(s.failed))
	for k, v := range s.failed {
		m[k] = v
	}
	return m
}

// Wait blocks until no entry of key is pending, then returns nil, or an
// error wrapping ErrFailed when the key's last entry failed for good.
// Errors also: ctx's error.
func (s *Spool) Wait(ctx context.Context, key string) error {
	for {
		s.mu.Lock()
		n, why, ch := s.byKey[key], s.failed[key], s.changed
		s.mu.Unlock()
		if n == 0 {
			if why != "" {
				return fmt.Errorf("spool %q: %w: %s", key, ErrFailed, why)
			}
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Drain blocks until no entry is pending. Errors: ctx's error.
func (s *Spool) Drain(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, ch := len(s.queue), s.changed
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

// Close stops the upload goroutine, waiting for a try in flight to end
// (canceled), and leaves pending entries on disk for the next New. Later
// Enqueues return ErrClosed. Close is idempotent.
func (s *Spool) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
	return nil
}

// run is the upload goroutine.
func (s *Spool) run(ctx context.Context) {
	defer close(s.done)
	backoff := s.cfg.MinBackoff
	for {
		s.mu.Lock()
		var e *entry
		if len(s.queue) > 0 {
			e = s.queue[0]
		}
		s.mu.Unlock()
		if e == nil {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		err := s.upload(ctx, e)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			s.landed(e)
			backoff = s.cfg.MinBackoff
			continue
		}
		if s.permanent(e, err) {
			s.moveFailed(e, err.Error())
			continue
		}
		s.mu.Lock()
		if s.downFrom.IsZero() {
			s.downFrom = time.Now()
			s.log.Warn("spool: store unavailable; uploads wait and retry", "key", e.Key, "err", err)
		} else {
			s.log.Debug("spool: upload failed; retrying", "key", e.Key, "err", err, "backoff", backoff)
		}
		s.mu.Unlock()
		// Full jitter in [backoff/2, backoff].
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-s.cfg.After(wait):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

func (s *Spool) upload(ctx context.Context, e *entry) error {
	f, err := os.Open(filepath.Join(s.cfg.Dir, seqName(e.Seq, "data")))
	if err != nil {
		return fmt.Errorf("%w: spooled content of %q gone: %v", blob.ErrChecksum, e.Key, err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PutTimeout)
	defer cancel()
	_, err = s.store.Put(ctx, e.Key, f, blob.PutOptions{Size: e.Size, SHA256: e.SHA256, ContentType: e.ContentType})
	return err
}

// permanent reports whether retrying e can never succeed.
func (s *Spool) permanent(e *entry, err error) bool {
	switch {
	case errors.Is(err, blob.ErrInvalidKey):
		return true
	case errors.Is(err, blob.ErrChecksum):
		// Damage in flight is worth a retry; damage on our disk is not.
		f, ferr := os.Open(filepath.Join(s.cfg.Dir, seqName(e.Seq, "data")))
		if ferr != nil {
			return true
		}
		defer f.Close()
		vr := blob.NewVerifyingReader(f, e.SHA256, e.Size, "")
		_, ferr = io.Copy(io.Discard, vr)
		return errors.Is(ferr, blob.ErrChecksum)
	}
	return false
}

// landed removes an uploaded entry.
func (s *Spool) landed(e *entry) {
	_ = os.Remove(filepath.Join(s.cfg.Dir, seqName(e.Seq, "json")))
	_ = os.Remove(filepath.Join(s.cfg.Dir, seqName(e.Seq, "data")))
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.downFrom.IsZero() {
		s.log.Info("spool: store available again", "down_for", time.Since(s.downFrom).Round(time.Millisecond),
			"pending", len(s.queue)-1)
		s.downFrom = time.Time{}
	}
	s.dropLocked(e)
	delete(s.failed, e.Key)
}

func (s *Spool) dropLocked(e *entry) {
	if i := slices.Index(s.queue, e); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		s.bytes -= e.Size
		if s.byKey[e.Key]--; s.byKey[e.Key] <= 0 {
			delete(s.byKey, e.Key)
		}
	}
	s.notifyLocked()
}

// moveFailed moves e's files to failed/ with why recorded, and drops it.
func (s *Spool) moveFailed(e *entry, why string) {
	s.log.Error("spool: upload can never succeed; entry kept in failed/", "key", e.Key, "seq", e.Seq, "err", why)
	e.Error = why
	b, _ := json.Marshal(e)
	dir := filepath.Join(s.cfg.Dir, "failed")
	_ = os.Rename(filepath.Join(s.cfg.Dir, seqName(e.Seq, "data")), filepath.Join(dir, seqName(e.Seq, "data")))
	_ = writeFileSync(filepath.Join(dir, seqName(e.Seq, "json")), b)
	_ = os.Remove(filepath.Join(s.cfg.Dir, seqName(e.Seq, "json")))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed[e.Key] = why
	s.dropLocked(e)
}
