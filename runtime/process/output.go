package process

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// A process's stdout and stderr are one pipe, which a goroutine of the
// runtime copies into the attempt's log file: the file, and the
// directories above it, are created with the first byte of output
// (contract.LazyLog), so a task that prints nothing costs no file system
// work at all. The process's leader is reaped only once the copy has read
// the pipe to its end (every writer gone: the group and the marked
// processes are killed first), so that Wait returns with the whole output
// in the file, as the contract asks.
//
// The price: output goes through the worker. A process whose worker
// crashed gets SIGPIPE (or EPIPE) on its next write; it would have been
// killed on the worker's restart anyway (orphans.go), and its task is run
// again.

// drainGrace bounds the wait for the end of a process's output once its
// group and marked processes were killed: a process that escaped both
// (env -i, then setsid) may hold the pipe open for ever. It then loses
// the pipe (its next write fails) and the log keeps what came before.
// Waited on the system clock: it bounds a wait on the kernel, not a
// policy (Config.Clock times the policies).
const drainGrace = time.Second

// copyBufBytes is the size of one read from a process's output pipe.
const copyBufBytes = 64 << 10

// output is the copy of one process's output into its log file.
type output struct {
	r    *os.File      // the pipe's read end, owned by the copy
	done chan struct{} // closed when the copy ended and the file is closed
}

// newOutput returns the pipe for a process's stdout and stderr: the
// write end goes to the child (the caller closes its copy once the child
// started), the read end to output.copy. Errors: the pipe's.
func newOutput() (*output, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	return &output{r: r, done: make(chan struct{})}, w, nil
}

// copy appends what the process writes to the file at path until every
// writer closed the pipe (or drain cut it), then closes the pipe and the
// file and closes o.done. Output it cannot write (the file system
// refused) is read and dropped, so the process never blocks on a full
// pipe; the first such error is logged. It runs in its own goroutine,
// which reap waits for.
func (o *output) copy(path string, log *slog.Logger) {
	defer close(o.done)
	defer o.r.Close()
	lf := &contract.LazyLog{Path: path}
	defer func() {
		if err := lf.Close(); err != nil {
			log.Warn("closing a process's log file failed: output may be lost", "path", path, "err", err)
		}
	}()
	buf := make([]byte, copyBufBytes)
	var werr error
	for {
		n, err := o.r.Read(buf)
		if n > 0 && werr == nil {
			if _, werr = lf.Write(buf[:n]); werr != nil {
				log.Warn("writing a process's output to its log file failed: the rest of it is dropped", "path", path, "err", werr)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
				log.Warn("reading a process's output failed: the rest of it is lost", "path", path, "err", err)
			}
			return
		}
	}
}

// drain waits for the copy to end, at most drainGrace, and then cuts the
// pipe (a past read deadline ends the copy's read) and waits for it.
// reap calls it after killing what is left of the process.
func (o *output) drain() {
	select {
	case <-o.done:
		return
	default:
	}
	t := time.NewTimer(drainGrace)
	defer t.Stop()
	select {
	case <-o.done:
		return
	case <-t.C:
	}
	_ = o.r.SetReadDeadline(time.Unix(1, 0))
	<-o.done
}
