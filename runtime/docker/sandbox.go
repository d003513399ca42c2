package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

// What sandboxes need of the engine (docs/sandboxes.md): execs with their
// own stdin and stdout and stderr apart, and single-file copies in and out
// through the engine's archive API.

var (
	_ contract.StreamExecer = (*Runtime)(nil)
	_ contract.FileCopier   = (*Runtime)(nil)
	_ contract.DirMaker     = (*Runtime)(nil)
)

// ExecStream runs req.Command in the running container id; see
// contract.StreamExecer. Unlike Exec it does not end what the command left
// running in the container once it exits (several execs share a sandbox),
// only on a kill: when ctx ends first, the exec's process group is killed
// from the host as Exec does (killExec; the whole container when the worker
// cannot see the process), and ExecStream returns the Exit (Code 137,
// Reason saying why) with ctx's error.
func (r *Runtime) ExecStream(ctx context.Context, id string, req contract.ExecRequest) (contract.Exit, error) {
	if len(req.Command) == 0 {
		return contract.Exit{Code: -1}, fmt.Errorf("docker exec in %s: ExecRequest.Command is empty", id)
	}
	stdout, stderr := req.Stdout, req.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	cctx, cancel := r.callCtx(ctx)
	created, err := r.cli.ExecCreate(cctx, id, client.ExecCreateOptions{
		Cmd:          req.Command,
		Env:          envList(req.Env, nil),
		WorkingDir:   req.WorkingDir,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	cancel()
	if err != nil {
		if cerrdefs.IsConflict(err) && ctx.Err() == nil {
			return contract.Exit{Code: -1}, fmt.Errorf("docker exec in %s: the container is not running: %v", id, err)
		}
		return contract.Exit{Code: -1}, r.wrap(ctx, "exec in", id, err, contract.ErrNotFound)
	}
	cctx, cancel = r.callCtx(ctx)
	att, err := r.cli.ExecAttach(cctx, created.ID, client.ExecAttachOptions{})
	cancel()
	if err != nil {
		return contract.Exit{Code: -1}, r.wrap(ctx, "exec attach in", id, err, contract.ErrNotFound)
	}
	started := r.clock.Now()
	// Stdin is written, then closed, beside the output's copy: a command
	// that writes before it reads must not block the writer.
	go func() {
		if len(req.Stdin) > 0 {
			_, _ = att.Conn.Write(req.Stdin)
		}
		_ = att.CloseWrite()
	}()
	copied := make(chan error, 1)
	var moved atomic.Int64   // output bytes copied so far: the watchdog below sees progress
	var writing atomic.Int32 // a write under way (blocked by a slow reader: progress too)
	go func() {
		_, err := stdcopy.StdCopy(countWriter{stdout, &moved, &writing}, countWriter{stderr, &moved, &writing}, att.Reader)
		copied <- err
	}()

	var cause error
	var killNote string
	copyDone := false
	// The engine now and then keeps an exec's output open after the exec
	// ended (seen with `true` on a loaded host: the exec is no longer
	// running and the stream never ends), and a background child that
	// kept the exec's stdout does the same: once the engine says the exec
	// ended, the stream is closed after execOutputGrace without any output
	// (output still flowing, buffered by the engine, is read to its end).
	// The engine is asked after execWatchEvery, then at doubling intervals
	// up to execWatchMax while the exec runs (a thousand long execs must
	// not cost the engine a thousand inspects a second), and every
	// execWatchEvery once it ended. A ticker on the system clock, as every
	// CallTimeout is (Config.Clock).
	every := execWatchEvery
	watch := time.NewTicker(every)
	defer watch.Stop()
	var endedAt time.Time // when the engine said the exec ended, or output last moved after that
	var lastMoved int64
wait:
	for {
		select {
		case err := <-copied:
			copyDone = true
			if err != nil {
				r.log.Warn("exec output copy failed", "container", id, "exec", created.ID, "err", err)
			}
			break wait
		case now := <-watch.C:
			if endedAt.IsZero() {
				ictx, icancel := r.callCtx(ctx)
				ins, err := r.cli.ExecInspect(ictx, created.ID, client.ExecInspectOptions{})
				icancel()
				// Not running and a PID: it ran and ended. Not running
				// without one: the engine has not started it yet (the
				// attach answers before ContainerExecStart marks it
				// running), so it is asked again at the next tick.
				if err == nil && !ins.Running && ins.PID != 0 {
					endedAt, lastMoved = now, moved.Load()
					every = execWatchEvery
					watch.Reset(every)
				} else if every < execWatchMax {
					every = min(2*every, execWatchMax)
					watch.Reset(every)
				}
				continue
			}
			if m := moved.Load(); m != lastMoved || writing.Load() > 0 { // output still flowing: wait for it
				endedAt, lastMoved = now, m
				continue
			}
			if now.Sub(endedAt) < execOutputGrace {
				continue
			}
			r.log.Warn("exec ended but its output stayed open; closing it", "container", id, "exec", created.ID, "grace", execOutputGrace)
			break wait
		case <-ctx.Done():
			cause = ctx.Err()
			killNote = r.killExec(ctx, id, created.ID)
			t := time.NewTimer(r.cfg.CallTimeout) // a CallTimeout: the system clock (Config.Clock)
			select {
			case <-copied:
				copyDone = true
			case <-t.C:
				r.log.Warn("exec output still open after its kill", "container", id, "exec", created.ID)
			}
			t.Stop()
			break wait
		}
	}
	att.Close()
	if !copyDone {
		<-copied // returns promptly: the connection is closed
	}
	finished := r.clock.Now()
	code, err := r.execExitCode(ctx, created.ID)
	exit := contract.Exit{Code: code, StartedAt: started, FinishedAt: finished}
	if cause != nil {
		exit.Reason = "killed: " + cause.Error()
		if killNote != "" {
			exit.Reason += "; " + killNote
		}
		if code == -1 {
			exit.Code = 128 + int(syscall.SIGKILL)
		}
		return exit, fmt.Errorf("docker exec in %s: %w", id, cause)
	}
	return exit, err
}

// countWriter is a writer that adds what it writes to n, and counts
// itself in busy while a write is under way (one blocked by a slow reader
// is progress too).
type countWriter struct {
	w    io.Writer
	n    *atomic.Int64
	busy *atomic.Int32
}

func (c countWriter) Write(p []byte) (int, error) {
	c.busy.Add(1)
	defer c.busy.Add(-1)
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// execWatchEvery is when ExecStream first asks the engine whether an exec
// whose output is still open has ended, and how often it looks at the
// output once it did; the interval between asks doubles up to
// execWatchMax while the exec runs. execOutputGrace is how long its output
// may stay open after it ended. An exec that ends while a background child
// holds its output therefore returns at most execWatchMax +
// execOutputGrace after its end.
const (
	execWatchEvery  = time.Second
	execWatchMax    = 8 * time.Second
	execOutputGrace = 2 * time.Second
)

// WriteFile writes data to the absolute path p in container id through the
// engine's archive API (a one-file tar extracted at "/": missing parents are
// created 0755, root's); see contract.FileCopier. The file is owned by the
// container's user when that is numeric ("uid" or "uid:gid", as an
// admission policy's run_as_user sets it, or an image's numeric USER), so
// that a sandbox running as non-root can change what it was given; else
// (the image's root or a user name) by root.
func (r *Runtime) WriteFile(ctx context.Context, id, p string, data []byte, mode uint32) error {
	clean, err := absPath(p)
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	cctx, cancel := r.callCtx(ctx)
	ins, err := r.cli.ContainerInspect(cctx, id, client.ContainerInspectOptions{})
	cancel()
	if err != nil {
		return r.wrap(ctx, "inspect", id, err, contract.ErrNotFound)
	}
	var uid, gid int
	if c := ins.Container.Config; c != nil {
		uid, gid, _ = numericUser(c.User)
	}
	return r.copyEntry(ctx, id, clean, &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(clean, "/"),
		Size: int64(len(data)), Mode: int64(mode & 0o7777), ModTime: r.clock.Now(), Uid: uid, Gid: gid}, data)
}

// MakeDir creates directory p in container id owned by user through the
// engine's archive API (a one-directory tar extracted at "/", which the
// engine applies as root whatever the container's capabilities); see
// contract.DirMaker.
func (r *Runtime) MakeDir(ctx context.Context, id, p, user string) error {
	uid, gid, ok := numericUser(user)
	if !ok && user != "" {
		return fmt.Errorf("docker make directory %s in %s: user %q is not \"uid\" or \"uid:gid\" in decimal", p, id, user)
	}
	if path.Clean(p) == "/" {
		return nil // never give away the root
	}
	clean, err := absPath(p)
	if err != nil {
		return err
	}
	return r.copyEntry(ctx, id, clean, &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(clean, "/") + "/",
		Mode: 0o755, ModTime: r.clock.Now(), Uid: uid, Gid: gid}, nil)
}

// copyEntry extracts a one-entry tar (h, and data for a file) at "/" of
// container id; clean is the entry's path for errors.
func (r *Runtime) copyEntry(ctx context.Context, id, clean string, h *tar.Header, data []byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	if _, err := r.cli.CopyToContainer(cctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: &buf}); err != nil {
		return r.wrapFile(ctx, "copy into", id, clean, err)
	}
	return nil
}

// numericUser parses a container user of the form "uid" or "uid:gid" in
// decimal (gid 0 when not given); ok is false for "" and for anything else
// (a user name, which only the image's /etc/passwd resolves).
func numericUser(u string) (uid, gid int, ok bool) {
	us, gs, hasGid := strings.Cut(u, ":")
	n, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return 0, 0, false
	}
	var g uint64
	if hasGid {
		if g, err = strconv.ParseUint(gs, 10, 32); err != nil {
			return 0, 0, false
		}
	}
	return int(n), int(g), true
}

// ReadFile reads the regular file at the absolute path p of container id
// through the engine's archive API, refusing one over limit bytes; see
// contract.FileCopier.
func (r *Runtime) ReadFile(ctx context.Context, id, p string, limit int64) ([]byte, uint32, error) {
	clean, err := absPath(p)
	if err != nil {
		return nil, 0, err
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	res, err := r.cli.CopyFromContainer(cctx, id, client.CopyFromContainerOptions{SourcePath: clean})
	if err != nil {
		return nil, 0, r.wrapFile(ctx, "copy from", id, clean, err)
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	h, err := tr.Next()
	if err != nil {
		return nil, 0, r.wrap(ctx, "copy from", id+":"+clean, err, nil)
	}
	if h.Typeflag != tar.TypeReg {
		return nil, 0, fmt.Errorf("docker read %s in %s: %w: it is not a regular file (tar type %q)", clean, id, contract.ErrFileTooLarge, h.Typeflag)
	}
	if h.Size > limit {
		return nil, 0, fmt.Errorf("docker read %s in %s: %w: %d bytes, over the limit of %d", clean, id, contract.ErrFileTooLarge, h.Size, limit)
	}
	data := make([]byte, h.Size)
	if _, err := io.ReadFull(tr, data); err != nil {
		return nil, 0, r.wrap(ctx, "copy from", id+":"+clean, err, nil)
	}
	return data, uint32(h.Mode & 0o7777), nil
}

// wrapFile classifies an archive call's error: a 404 naming the container
// is ErrNotFound, any other 404 (the path) ErrNoSuchFile.
func (r *Runtime) wrapFile(ctx context.Context, op, id, p string, err error) error {
	if cerrdefs.IsNotFound(err) && ctx.Err() == nil && !strings.Contains(strings.ToLower(err.Error()), "no such container") {
		return fmt.Errorf("docker %s %s: %w: %s", op, id, contract.ErrNoSuchFile, p)
	}
	return r.wrap(ctx, op, id, err, contract.ErrNotFound)
}

// absPath cleans an absolute container path; "/" and relative paths are
// refused.
func absPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", errors.New("the path must be absolute, e.g. /work/main.py")
	}
	clean := path.Clean(p)
	if clean == "/" {
		return "", errors.New("the path names the root directory, not a file")
	}
	return clean, nil
}
