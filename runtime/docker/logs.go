package docker

import (
	"bufio"
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
// where the file ends) makes the file what the engine holds. When the
// engine no longer holds the output's first bytes (it rotated them away:
// its max-size and max-file), the final read is aligned first: where its
// first bytes are in the copied output, the file keeps what the copy has
// before them and takes the engine's from there (a follow stream across a
// rotation can lose bytes, and a task's result line is at the end); where
// the copy holds none of them, the engine's retained log is appended after
// a note that output is missing there. Either way the log is said to be
// possibly incomplete (unchecked): what the engine no longer holds is only
// the follow streams' copy, and a follow stream can lose or repeat bytes
// where it crosses a rotation. A copy far longer than the engine's whole
// log that starts as it (repeated lines, rotated) is kept, not cut to it.
const (
	// followRetryMin and followRetryMax bound the wait before another
	// follow stream, when one ended while its container ran.
	followRetryMin = 10 * time.Millisecond
	followRetryMax = time.Second
	// finalReadTries bounds the tries of the final read.
	finalReadTries = 3
	// alignBytes is how much of the final read's start aligns it with the
	// copied output (its first line, when shorter, decides whether the
	// engine still holds the output's start).
	alignBytes = 4 << 10
	// alignMinLine is the shortest line of the final read's start that
	// may place it in the copy (shorter ones, "}" or blank, are too common).
	alignMinLine = 8
	// rotatedSlack is how much longer than the engine's whole log a copy
	// may be and still be cut to it (a follow stream's repeats are a few
	// reads' worth; a log the engine rotated is far longer).
	rotatedSlack = 1 << 20
)

// unchecked is why a log whose start the engine had rotated away may be
// incomplete: that part is only the follow streams' copy, which the engine
// can no longer confirm, and a follow stream can lose or repeat bytes
// where it crosses a rotation.
const unchecked = "the engine rotated its log during the run (raise its log max-size): the output before what it retained is the follow streams' copy, unchecked, which may lack or repeat output where a stream crossed a rotation"

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
			if w.shift > 0 {
				r.log.Info("the engine had rotated the output's first bytes away; the log keeps the copied ones and the engine's from there",
					"container", id, "engine_log_starts_at_byte", w.shift)
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
// starts at byte base. Each follow stream from the engine starts at the
// output's first byte (rewind). A follow stream's bytes that the file
// holds (the first n) are skipped and the rest appended. The final stream
// (verify) is aligned with the file first (align: its first alignBytes
// are held back until they are in, or the stream ends), then compared
// with the file from there: from the first byte that differs, the file is
// cut there and the stream's bytes written; finish cuts what the file
// holds beyond the stream's end. The file is opened (created if missing)
// on first use, so output that never comes creates nothing.
type logWriter struct {
	log  *contract.LazyLog
	f    *os.File // once opened (file)
	base int64    // where the output starts in f, once opened
	n    int64    // bytes of output in the file
	seen int64    // bytes of the current stream

	verify     bool
	aligned    bool   // the final stream's place in the output is known
	head       []byte // the final stream's first bytes, until aligned
	shift      int64  // where the final stream's first byte is in the output
	gap        string // why output is missing before shift ("": none)
	repaired   bool   // the file was cut and rewritten from repairedAt
	repairedAt int64  // in bytes of output
	scratch    []byte
}

// rewind readies c for another stream, from the output's first byte (a
// final read tried again aligns again only if it had not yet).
func (c *logWriter) rewind() {
	c.seen = 0
	c.head = c.head[:0]
}

// align places the final stream, whose first alignBytes are head (all of
// it when shorter), in the output: at 0 when the file's output starts with
// head's first line, or is a start of it (the engine holds the output's
// start); else where head occurs at a line start of the file's output
// (the engine rotated the bytes before it away, and the copy holds them);
// else, the copy lacking head's first lines, at the copy's first line
// that is one of head's later ones (join: the copy's bytes from there are
// repaired, and the log is said to maybe lack output there); else after
// the file's output and a note that output is missing there.
func (c *logWriter) align(head []byte) error {
	c.aligned = true
	if len(head) == 0 || c.n == 0 {
		return nil // nothing to place, or nothing copied to place it in
	}
	line := head
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		line = head[:i+1]
	}
	// The copy starts as the engine's first line (or is a start of it).
	if d, err := c.differs(line[:min(int64(len(line)), c.n)], 0); err != nil || d < 0 {
		return err
	}
	// Where head is in the copy; or, when the copy lacks head's first
	// lines (a follow stream loses bytes where the engine rotates, which
	// is where its retained log starts), where one of its later lines is.
	var off int64
	j, err := c.index(head)
	if err != nil || j >= 0 {
		c.shift = max(j, 0)
		c.gap = unchecked
		return err
	}
	j, off, err = c.join(head)
	if err != nil || j >= 0 {
		// The engine's log goes where the copy has its line at off (the
		// copy's bytes from there are repaired); when that is not its
		// first, what was between the copy's bytes before it and the
		// engine's start is unknown.
		c.shift = max(j, 0)
		if off == 0 {
			c.gap = unchecked
			return err
		}
		c.gap = "the copied output lacks where the engine's retained log starts (the engine rotated its log, and the follow stream lost bytes there; raise the engine's log max-size): the log has the copied output up to there, then the engine's retained log, and output between them may be missing"
		return err
	}
	f, err := c.file()
	if err != nil {
		return err
	}
	note := "\nmegaflow: output is missing here: the engine rotated it away before it was copied (raise the engine's log max-size); what follows is the engine's retained log\n"
	m, err := f.WriteString(note)
	c.n += int64(m)
	if err != nil {
		return fmt.Errorf("the log file: %w", err)
	}
	c.shift = c.n
	c.gap = "the engine rotated away output that the copy lacks (raise the engine's log max-size): the log has the copied output, a note where output is missing, then the engine's retained log"
	return nil
}

// join returns pos, where in the file's output the first line is that is
// one of head's whole lines (of alignMinLine bytes at least) at or after
// its offset in head, and off, that offset; pos is -1 when none is. The
// copy lacks head's lines before off, and head goes at pos. One pass over
// the file.
func (c *logWriter) join(head []byte) (pos, off int64, err error) {
	at := map[string]int64{} // head's lines: their first offset in head
	for off := 0; off < len(head); {
		i := bytes.IndexByte(head[off:], '\n')
		if i < 0 {
			break // a line cut by head's end is no anchor
		}
		if l := string(head[off : off+i+1]); len(l) >= alignMinLine {
			if _, dup := at[l]; !dup {
				at[l] = int64(off)
			}
		}
		off += i + 1
	}
	if len(at) == 0 {
		return -1, 0, nil
	}
	f, err := c.file()
	if err != nil {
		return 0, 0, err
	}
	r := bufio.NewReaderSize(io.NewSectionReader(f, c.base, c.n), 64<<10)
	long := false // in a line longer than the reader's buffer: no anchor
	for {
		line, rerr := r.ReadSlice('\n')
		if rerr == nil && !long {
			if o, ok := at[string(line)]; ok && pos >= o {
				return pos, o, nil
			}
		}
		pos += int64(len(line))
		long = errors.Is(rerr, bufio.ErrBufferFull)
		if rerr != nil && !long {
			if errors.Is(rerr, io.EOF) {
				return -1, 0, nil
			}
			return 0, 0, fmt.Errorf("reading the log file back: %w", rerr)
		}
	}
}

// index returns where pat first occurs at the start of a line of the
// file's output (the engine rotates whole log entries, lines), or -1. It
// reads the file in blocks, each with the byte before it and overlapping
// the last by len(pat)-1.
func (c *logWriter) index(pat []byte) (int64, error) {
	if len(pat) == 0 || int64(len(pat)) > c.n {
		return -1, nil
	}
	f, err := c.file()
	if err != nil {
		return 0, err
	}
	const block = 1 << 20
	buf := make([]byte, 1+block+len(pat)-1)
	for off := int64(0); off+int64(len(pat)) <= c.n; off += block {
		// buf[0] is the byte before off ('\n' at 0: a line starts there),
		// buf[1:] the block.
		buf[0] = '\n'
		size := min(int64(len(buf)-1), c.n-off)
		from, dst := off, buf[1:1+size]
		if off > 0 {
			from, dst = off-1, buf[:1+size]
		}
		if _, err := f.ReadAt(dst, c.base+from); err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("reading the log file back: %w", err)
		}
		for k := 0; ; {
			i := bytes.Index(buf[1+k:1+size], pat)
			if i < 0 {
				break
			}
			if at := k + i; buf[at] == '\n' {
				return off + int64(at), nil
			}
			k += i + 1
		}
	}
	return -1, nil
}

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
	if c.verify && !c.aligned {
		c.head = append(c.head, p...)
		if len(c.head) < alignBytes {
			return len(p), nil
		}
		if err := c.align(c.head); err != nil {
			return 0, err
		}
		head := c.head
		c.head = nil
		if _, err := c.put(head); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.put(p)
}

// put writes p, the stream's next bytes, as Write describes.
func (c *logWriter) put(p []byte) (int, error) {
	total := len(p)
	start := c.seen + c.shift // where p starts in the output
	c.seen += int64(total)
	if start < c.n {
		held := min(int64(total), c.n-start) // bytes of p the file holds
		if c.verify && !c.repaired {
			d, err := c.differs(p[:held], start)
			if err != nil {
				return 0, err
			}
			if d >= 0 {
				at := start + int64(d)
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

// finish ends the final stream: a stream shorter than alignBytes without
// a newline is aligned now, the file's output beyond what the engine holds
// (a follow stream's repeats) is cut, and why output is missing, if it is,
// is returned.
func (c *logWriter) finish() error {
	if c.verify && !c.aligned {
		head := c.head
		c.head = nil
		if err := c.align(head); err != nil {
			return err
		}
		if _, err := c.put(head); err != nil {
			return err
		}
	}
	if end := c.seen + c.shift; end < c.n {
		if c.seen == 0 {
			return fmt.Errorf("the engine holds none of the %d bytes copied (it keeps no log: use the json-file or local log driver); the log is left as copied", c.n)
		}
		if c.shift == 0 && !c.repaired && c.n-end > rotatedSlack {
			// The engine holds far less than was copied, and all of it as
			// the copy's start: output of repeated lines it rotated, not
			// a follow stream's repeats. The copy stays as it is.
			return fmt.Errorf("the engine's log holds %d bytes of the %d copied, all of them the copy's start: it rotated its log during the run (raise its log max-size), so the copy is kept unchecked, and may lack or repeat output where a follow stream crossed a rotation", end, c.n)
		}
		f, err := c.file()
		if err != nil {
			return err
		}
		if err := f.Truncate(c.base + end); err != nil {
			return fmt.Errorf("repairing the log file: %w", err)
		}
		if !c.repaired {
			c.repaired, c.repairedAt = true, end
		}
		c.n = end
	}
	if c.gap != "" {
		return errors.New(c.gap)
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
