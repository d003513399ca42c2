package fake

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

var (
	_ contract.StreamExecer = (*Runtime)(nil)
	_ contract.FileCopier   = (*Runtime)(nil)
	_ contract.Pauser       = (*Runtime)(nil)
)

// ExecStream runs a fake command in running container id: the Behavior
// matched by a Spec holding req's Command writes its Output to req.Stdout,
// then req.Stdin back to req.Stdout (a cat), and ends as Exec does (after
// Duration with ExitCode; 137 and ctx's error when ctx ends first).
// Recorded as op "ExecStream". Errors: as Exec.
func (r *Runtime) ExecStream(ctx context.Context, id string, req contract.ExecRequest) (exit contract.Exit, err error) {
	spec := contract.Spec{Command: req.Command, Env: req.Env, WorkingDir: req.WorkingDir}
	i, err := r.begin(Call{Op: "ExecStream", ID: id, Spec: spec})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return contract.Exit{Code: -1}, err
	}
	c, err := r.get("exec in", id)
	if err != nil {
		return contract.Exit{Code: -1}, err
	}
	select {
	case <-c.done:
		return contract.Exit{Code: -1}, fmt.Errorf("fake exec in %s: the container is not running", id)
	default:
	}
	r.mu.Lock()
	b, paused := r.behavior(spec), c.paused
	r.mu.Unlock()
	if paused {
		return contract.Exit{Code: -1}, fmt.Errorf("fake exec in %s: the container is paused", id)
	}
	if b.StartErr != nil {
		return contract.Exit{Code: -1}, fmt.Errorf("fake exec in %s: %w", id, b.StartErr)
	}
	out := req.Stdout
	if out == nil {
		out = io.Discard
	}
	_, _ = io.WriteString(out, b.Output)
	_, _ = out.Write(req.Stdin)
	var timer <-chan time.Time
	if !b.Hang {
		timer = r.clock.After(b.Duration)
	}
	exit = contract.Exit{StartedAt: r.clock.Now()}
	select {
	case <-timer:
		exit.Code = b.ExitCode
	case <-c.done:
		exit.Code, exit.Reason = 137, "the container ended"
	case <-ctx.Done():
		exit.Code, exit.Reason = 137, "killed: "+ctx.Err().Error()
		err = fmt.Errorf("fake exec in %s: %w", id, ctx.Err())
	}
	exit.FinishedAt = r.clock.Now()
	return exit, err
}

type fakeFile struct {
	data []byte
	mode uint32
}

// WriteFile keeps data as the file at path of container id, in memory.
// Errors: an injected one ("WriteFile"), contract.ErrNotFound.
func (r *Runtime) WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) (err error) {
	i, err := r.begin(Call{Op: "WriteFile", ID: id})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return err
	}
	c, err := r.get("write file in", id)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("fake write file in %s: the path must be absolute", id)
	}
	if mode == 0 {
		mode = 0o644
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.files == nil {
		c.files = map[string]fakeFile{}
	}
	c.files[path] = fakeFile{data: append([]byte(nil), data...), mode: mode}
	return nil
}

// ReadFile returns what WriteFile kept at path of container id. Errors: an
// injected one ("ReadFile"), contract.ErrNotFound, contract.ErrNoSuchFile,
// contract.ErrFileTooLarge.
func (r *Runtime) ReadFile(ctx context.Context, id, path string, limit int64) (data []byte, mode uint32, err error) {
	i, err := r.begin(Call{Op: "ReadFile", ID: id})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return nil, 0, err
	}
	c, err := r.get("read file in", id)
	if err != nil {
		return nil, 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := c.files[path]
	if !ok {
		return nil, 0, fmt.Errorf("fake read %s in %s: %w", path, id, contract.ErrNoSuchFile)
	}
	if int64(len(f.data)) > limit {
		return nil, 0, fmt.Errorf("fake read %s in %s: %w", path, id, contract.ErrFileTooLarge)
	}
	return append([]byte(nil), f.data...), f.mode, nil
}

// Pause marks running container id paused (List says so, ExecStream
// refuses it); paused already is no error. Recorded as op "Pause".
// Errors: an injected one, contract.ErrNotFound, a container that ended.
func (r *Runtime) Pause(ctx context.Context, id string) error { return r.setPaused("Pause", id, true) }

// Unpause clears the mark; not paused is no error. Recorded as op
// "Unpause". Errors: as Pause.
func (r *Runtime) Unpause(ctx context.Context, id string) error {
	return r.setPaused("Unpause", id, false)
}

func (r *Runtime) setPaused(op, id string, paused bool) (err error) {
	i, err := r.begin(Call{Op: op, ID: id})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return err
	}
	c, err := r.get(strings.ToLower(op), id)
	if err != nil {
		return err
	}
	select {
	case <-c.done:
		return fmt.Errorf("fake %s %s: the container is not running", strings.ToLower(op), id)
	default:
	}
	r.mu.Lock()
	c.paused = paused
	r.mu.Unlock()
	return nil
}
