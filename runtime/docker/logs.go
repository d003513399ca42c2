package docker

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

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

// startLogCopy starts the goroutine that appends container id's output to
// f (and closes f) until the container stops or endLogCopy cancels it.
func (r *Runtime) startLogCopy(id string, f *os.File) {
	ctx, cancel := context.WithCancel(context.Background())
	lc := &logCopy{cancel: cancel, done: make(chan struct{})}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		f.Close()
		return
	}
	r.copies[id] = lc
	r.wg.Add(1)
	r.mu.Unlock()

	go func() {
		defer r.wg.Done()
		defer close(lc.done)
		defer cancel()
		defer f.Close()
		raw, stop, err := r.openLogs(ctx, id, true)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("cannot read container output", "container", id, "err", err)
				fmt.Fprintf(f, "megaflow: cannot read the container's output: %v\n", err)
			}
			return
		}
		defer stop()
		defer raw.Close()
		if _, err := stdcopy.StdCopy(f, f, raw); err != nil && ctx.Err() == nil {
			r.log.Warn("container output copy ended early", "container", id, "err", err)
			fmt.Fprintf(f, "megaflow: the container's output copy ended early: %v\n", err)
		}
	}()
}

// awaitLogCopy waits until container id's log copy has written everything
// (the container stopped), for at most CallTimeout or until ctx ends.
func (r *Runtime) awaitLogCopy(ctx context.Context, id string) {
	r.mu.Lock()
	lc := r.copies[id]
	r.mu.Unlock()
	if lc == nil {
		return
	}
	t := time.NewTimer(r.cfg.CallTimeout)
	defer t.Stop()
	select {
	case <-lc.done:
	case <-t.C:
		r.log.Warn("container output copy still running after its exit", "container", id)
	case <-ctx.Done():
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
