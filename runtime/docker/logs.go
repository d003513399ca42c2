package docker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/runtime/contract"
)

// Logs returns container id's output, stdout and stderr interleaved as the
// engine stored them; with follow it keeps streaming until the container
// stops. The reader ends, at the latest, when ctx ends; the caller closes
// it. Used by the worker to serve a client's Logs call for a running
// attempt. Errors: contract.ErrNotFound, contract.ErrUnavailable, ctx's.
func (r *Runtime) Logs(ctx context.Context, id string, follow bool) (io.ReadCloser, error) {
	raw, cancel, err := r.openLogs(ctx, id, follow)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, raw)
		raw.Close()
		cancel()
		pw.CloseWithError(err)
	}()
	return &pipeCloser{PipeReader: pr, cancel: cancel}, nil
}

type pipeCloser struct {
	*io.PipeReader
	cancel context.CancelFunc
}

// Close ends the stream from the engine and the reader.
func (p *pipeCloser) Close() error {
	p.cancel()
	return p.PipeReader.Close()
}

// openLogs opens the engine's multiplexed log stream of container id. The
// deadline covers the engine's first answer; the stream then lives until
// ctx ends or cancel is called.
func (r *Runtime) openLogs(ctx context.Context, id string, follow bool) (io.ReadCloser, context.CancelFunc, error) {
	sctx, answered, cancel := r.streamCtx(ctx)
	rc, err := r.cli.ContainerLogs(sctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow})
	inTime := answered()
	if err == nil && !inTime {
		rc.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		if !inTime && ctx.Err() == nil {
			return nil, nil, fmt.Errorf("docker logs %s: %w: the engine at %s did not answer within %v",
				id, contract.ErrUnavailable, r.cli.DaemonHost(), r.cfg.CallTimeout)
		}
		return nil, nil, r.wrap(ctx, "logs", id, err, contract.ErrNotFound)
	}
	return rc, cancel, nil
}

// Log copies: the engine's follow stream of a container's output is not
// to be trusted to the end. Docker 20.10's json-file reader ends a follow
// stream early, with no error to the client, when it catches a line being
// written (moby/moby#41820): a task printing 8 MB got 5.9 MB of it; and a
// follow stream of a loaded engine was once seen to send 10.2 MB of an
// 8.1 MB log. So the copy counts the bytes of output it wrote; when the
// follow stream ends while the container still runs it opens another one
// and skips what it already has; once the container stopped it reads the
// whole log again without follow (that read sees the finished log file),
// compares it with the file, and from the first byte where they differ (or
// where the file ends) makes the file what the engine holds. A log whose
// first bytes the engine no longer holds (it rotated them away: its
// max-size and max-file) is left as copied and said to be incomplete.
const (
	// followRetryMin and followRetryMax bound the wait before another
	// follow stream, when one ended while its container ran.
	followRetryMin = 10 * time.Millisecond
	followRetryMax = time.Second
	// finalReadTries bounds the tries of the final read.
	finalReadTries = 3
)

// logCopy is the goroutine copying one container's output to its log file.
type logCopy struct {
	cancel context.CancelFunc
	done   chan struct{}
	// incomplete, once done is closed, says why the file may lack some of
	// the container's output ("" when it holds all of it).
	incomplete string
}

// startLogCopy starts the goroutine that appends container id's output to
// f (and closes f) until the container stopped and every byte of its
// output is in f, or endLogCopy cancels it. have is how many bytes of the
// container's output f already holds, at its end (0 for a new container;
// the file's size for one adopted after a restart). f opens its file with
// the first byte to write (or to read back): a container that prints
// nothing leaves none.
func (r *Runtime) startLogCopy(id string, f *contract.LazyLog, have int64) {
	ctx, cancel := context.WithCancel(context.Background())
	lc := &logCopy{cancel: cancel, done: make(chan struct{})}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		f.Close()
		return
	}
	if old := r.copies[id]; old != nil {
		old.cancel() // a second copy (Adopt called twice): the newer one wins
	}
	r.copies[id] = lc
	r.wg.Add(1)
	r.mu.Unlock()

	go func() {
		defer r.wg.Done()
		defer close(lc.done)
		defer cancel()
		defer f.Close()
		lc.incomplete = r.copyAll(ctx, id, f, have)
		if lc.incomplete != "" && ctx.Err() == nil {
			r.log.Warn("container output incomplete", "container", id, "why", lc.incomplete)
			_, _ = fmt.Fprintf(f, "\nmegaflow: the container's output is incomplete: %s\n", lc.incomplete)
		}
	}()
}

// copyAll is the body of a log copy (see the comment on followRetryMin).
// It returns why f may lack some of the output, or "".
func (r *Runtime) copyAll(ctx context.Context, id string, f *contract.LazyLog, have int64) string {
	w := &logWriter{log: f, n: have}
	backoff := followRetryMin
	for ctx.Err() == nil {
		err := r.copyStream(ctx, id, w, true)
		if ctx.Err() != nil {
			return ""
		}
		if errors.Is(err, contract.ErrNotFound) {
			return "the container was removed before its output was read"
		}
		running, ierr := r.running(ctx, id)
		if ierr == nil && !running {
			break
		}
		if ierr != nil {
			if errors.Is(ierr, contract.ErrNotFound) {
				return "the container was removed before its output was read"
			}
			r.log.Debug("cannot tell whether a container runs; reading its output again", "container", id, "err", ierr)
		}
		// The engine ended the stream, or it broke, while the container
		// runs: follow again from where this copy is.
		if !clock.Sleep(r.clock, backoff, ctx.Done()) {
			return ""
		}
		backoff = min(2*backoff, followRetryMax)
	}
	// The container stopped: the final read, without follow, checks and
	// repairs the file.
	var last error
	for try := range finalReadTries {
		if try > 0 {
			if !clock.Sleep(r.clock, time.Duration(try)*200*time.Millisecond, ctx.Done()) {
				return ""
			}
		}
		w.verify = true
		last = r.copyStream(ctx, id, w, false)
		if ctx.Err() != nil {
			return ""
		}
		if last == nil {
			if err := w.finish(); err != nil {
				return err.Error()
			}
			if w.repaired {
				r.log.Warn("the engine's follow stream differed from the container's log; the log file was repaired from the engine's",
					"container", id, "from_byte", w.repairedAt)
			}
			return ""
		}
		if errors.Is(last, contract.ErrNotFound) {
			break
		}
	}
	return fmt.Sprintf("the final read of the container's log failed: %v", last)
}

// copyStream copies one log stream of container id (follow or not) into
// w, which skips (or, verifying, compares) the bytes it already holds.
func (r *Runtime) copyStream(ctx context.Context, id string, w *logWriter, follow bool) error {
	raw, stop, err := r.openLogs(ctx, id, follow)
	if err != nil {
		return err
	}
	defer stop()
	defer raw.Close()
	w.rewind()
	began := time.Now() // a latency for the debug log: the system clock
	err = demux(w, raw)
	r.log.Debug("container output stream ended", "container", id, "follow", follow,
		"stream_bytes", w.seen, "log_bytes", w.n, "took", time.Since(began), "err", err)
	return err
}

// running reports whether container id is running.
func (r *Runtime) running(ctx context.Context, id string) (bool, error) {
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	ins, err := r.cli.ContainerInspect(cctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return false, r.wrap(ctx, "inspect", id, err, contract.ErrNotFound)
	}
	return ins.Container.State != nil && ins.Container.State.Running, nil
}

// logWriter writes a container's output into its log file, where it
// starts at byte base. Each stream from the engine starts at the output's
// first byte (rewind). A follow stream's bytes that the file holds (the
// first n) are skipped and the rest appended. The final stream (verify)
// is compared with the file instead: from the first byte that differs,
// the file is cut there and the stream's bytes written; finish cuts what
// the file holds beyond the stream's end. The file is opened (created if
// missing) on first use, so output that never comes creates nothing.
type logWriter struct {
	log  *contract.LazyLog
	f    *os.File // once opened (file)
	base int64    // where the output starts in f, once opened
	n    int64    // bytes of output in the file
	seen int64    // bytes of the current stream

	verify     bool
	repaired   bool  // the file was cut and rewritten from repairedAt
	repairedAt int64 // in bytes of output
	mismatch   string
	scratch    []byte
}

func (c *logWriter) rewind() { c.seen = 0 }

// file returns the log file, opening it on the first call: the output's
// first n bytes are taken to be its last n (what an earlier copy wrote).
func (c *logWriter) file() (*os.File, error) {
	if c.f != nil {
		return c.f, nil
	}
	f, err := c.log.File()
	if err != nil {
		return nil, fmt.Errorf("the log file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("the log file: %w", err)
	}
	c.f, c.base = f, st.Size()-c.n
	return f, nil
}

func (c *logWriter) Write(p []byte) (int, error) {
	total := len(p)
	start := c.seen
	c.seen += int64(total)
	if c.mismatch != "" {
		return total, nil
	}
	if start < c.n {
		held := min(int64(total), c.n-start) // bytes of p the file holds
		if c.verify && !c.repaired {
			d, err := c.differs(p[:held], start)
			if err != nil {
				return 0, err
			}
			if d >= 0 {
				at := start + int64(d)
				if at == 0 {
					c.mismatch = "the engine's log does not start as the copied output (it rotated the beginning away: raise the engine's log max-size); the log is left as copied"
					return total, nil
				}
				f, err := c.file()
				if err != nil {
					return 0, err
				}
				if err := f.Truncate(c.base + at); err != nil {
					return 0, fmt.Errorf("repairing the log file: %w", err)
				}
				c.n, c.repaired, c.repairedAt = at, true, at
				held = int64(d)
			}
		}
		p = p[held:]
	}
	if len(p) == 0 {
		return total, nil
	}
	f, err := c.file()
	if err != nil {
		return total - len(p), err
	}
	m, err := f.Write(p)
	c.n += int64(m)
	if err != nil {
		return total - len(p) + m, err
	}
	return total, nil
}

// differs compares p with the file's output bytes from off and returns
// the index of the first difference in p, or -1.
func (c *logWriter) differs(p []byte, off int64) (int, error) {
	if cap(c.scratch) < len(p) {
		c.scratch = make([]byte, len(p))
	}
	b := c.scratch[:len(p)]
	f, err := c.file()
	if err != nil {
		return 0, err
	}
	if _, err := f.ReadAt(b, c.base+off); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("reading the log file back: %w", err)
	}
	if bytes.Equal(b, p) {
		return -1, nil
	}
	for i := range p {
		if b[i] != p[i] {
			return i, nil
		}
	}
	return -1, nil
}

// finish ends the final stream: the file's output beyond what the engine
// holds (a follow stream's repeats) is cut, unless the stream refused the
// file (mismatch), which is returned.
func (c *logWriter) finish() error {
	if c.mismatch != "" {
		return errors.New(c.mismatch)
	}
	if c.seen < c.n {
		if c.seen == 0 {
			return fmt.Errorf("the engine holds none of the %d bytes copied (it keeps no log: use the json-file or local log driver); the log is left as copied", c.n)
		}
		f, err := c.file()
		if err != nil {
			return err
		}
		if err := f.Truncate(c.base + c.seen); err != nil {
			return fmt.Errorf("repairing the log file: %w", err)
		}
		if !c.repaired {
			c.repaired, c.repairedAt = true, c.seen
		}
		c.n = c.seen
	}
	return nil
}

// awaitLogCopy waits until container id's log copy has written everything
// (the container stopped), for at most CallTimeout or until ctx ends, and
// returns why the log may be incomplete ("" when it is not).
func (r *Runtime) awaitLogCopy(ctx context.Context, id string) string {
	r.mu.Lock()
	lc := r.copies[id]
	r.mu.Unlock()
	if lc == nil {
		return ""
	}
	t := time.NewTimer(r.cfg.CallTimeout) // a CallTimeout: the system clock (Config.Clock)
	defer t.Stop()
	select {
	case <-lc.done:
		return lc.incomplete
	case <-t.C:
		r.log.Warn("container output copy still running after its exit", "container", id)
		return fmt.Sprintf("the copy of its output was still running %v after the container stopped", r.cfg.CallTimeout)
	case <-ctx.Done():
		return ""
	}
}

// endLogCopy cancels container id's log copy and waits (briefly) for it.
func (r *Runtime) endLogCopy(ctx context.Context, id string) {
	r.mu.Lock()
	lc := r.copies[id]
	delete(r.copies, id)
	r.mu.Unlock()
	if lc == nil {
		return
	}
	lc.cancel()
	select {
	case <-lc.done:
	case <-ctx.Done():
	}
}

// Adopt resumes the copy of container id's output into the log file at
// logPath, for a container an earlier Runtime started (the worker was
// restarted while it ran, or after it exited): the bytes the file holds
// are taken to be the first bytes of the container's output (no file: no
// output yet; it is created with the first byte), the rest is appended,
// running or not, and Wait then returns once the file holds all of it,
// as for a container of Start. The worker calls it once per adopted
// container, before Wait. Errors: the log file is there but cannot be
// looked at (stat); contract.ErrNotFound and the engine's errors come
// later, from Wait, and in the file.
func (r *Runtime) Adopt(ctx context.Context, id, logPath string) error {
	var have int64
	st, err := os.Stat(logPath)
	switch {
	case err == nil:
		have = st.Size()
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("docker adopt %s: log file: %w", id, err)
	}
	r.startLogCopy(id, &contract.LazyLog{Path: logPath}, have)
	return nil
}

// demux copies the payloads of the engine's multiplexed stream src
// (stdout and stderr frames: an 8-byte header, stream type and big-endian
// size, then the payload) to dst, in order. Unlike stdcopy.StdCopy, which
// writes each frame (a line, often) on its own, it writes what one read
// brought in one write, so that a log copy costs a system call per read,
// not per line. A frame the stream ends within is dropped (the stream's
// next reader gets it whole). Errors: src's, dst's, or the engine's own
// error frame.
func demux(dst io.Writer, src io.Reader) error {
	const header = 8
	in := make([]byte, 0, 64<<10)
	out := make([]byte, 0, 64<<10)
	for {
		if len(in) == cap(in) {
			in = append(in, 0)[:len(in)] // grow: a frame larger than the buffer
		}
		n, rerr := src.Read(in[len(in):cap(in)])
		in = in[:len(in)+n]
		used := 0
		for len(in)-used >= header {
			size := int(binary.BigEndian.Uint32(in[used+4 : used+header]))
			if len(in)-used-header < size {
				if need := header + size; need > cap(in) && used == 0 {
					grown := make([]byte, len(in), need)
					copy(grown, in)
					in = grown
				}
				break
			}
			payload := in[used+header : used+header+size]
			switch stdcopy.StdType(in[used]) {
			case stdcopy.Stdin, stdcopy.Stdout, stdcopy.Stderr:
				out = append(out, payload...)
			case stdcopy.Systemerr:
				if len(out) > 0 {
					if _, err := dst.Write(out); err != nil {
						return err
					}
				}
				return fmt.Errorf("error from the engine in the log stream: %s", payload)
			default:
				return fmt.Errorf("log stream: unknown stream type %d", in[used])
			}
			used += header + size
		}
		if len(out) > 0 {
			if _, err := dst.Write(out); err != nil {
				return err
			}
			out = out[:0]
		}
		in = in[:copy(in, in[used:])]
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
