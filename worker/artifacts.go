package worker

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// Where a task finds its files inside a container (docker runtime); the
// process runtime gets the host directories instead. Both are in the env
// as MEGAFLOW_OUTPUT_DIR and MEGAFLOW_INPUT_DIR.
const (
	// ContainerOutputDir is where a task writes the files its
	// output_paths (relative to this directory) name.
	ContainerOutputDir = "/megaflow/out"
	// ContainerInputDir holds the parents' output files, under
	// <parent task name>/<path>.
	ContainerInputDir = "/megaflow/in"
	// ContainerAttemptsDir is where a warm container (persistent mode)
	// mounts its files directory: each exec's output and input
	// directories are <ContainerAttemptsDir>/<attempt>/out and /in.
	ContainerAttemptsDir = "/megaflow/attempts"
)

// poolFilesDir is warm container name's files directory on the host,
// mounted at ContainerAttemptsDir inside it.
func poolFilesDir(dataDir, name string) string { return filepath.Join(dataDir, "pool", name) }

// execDirName names attempt k's files directory inside its warm
// container's: "<task id as in logPath>-<attempt>".
func execDirName(dataDir string, k attempt.Key) string {
	return filepath.Base(filepath.Dir(logPath(dataDir, k))) + "-" + strconv.FormatUint(uint64(k.Attempt), 10)
}

// inputPoll is how often a child's worker looks again for a parent's
// manifest that has not landed yet.
const inputPoll = 200 * time.Millisecond

// attemptDir is attempt k's directory for its output and input files:
// dataDir/attempts/<task id as in logPath>/<attempt>.
func attemptDir(dataDir string, k attempt.Key) string {
	lp := logPath(dataDir, k)
	return filepath.Join(dataDir, "attempts", filepath.Base(filepath.Dir(lp)), strconv.FormatUint(uint64(k.Attempt), 10))
}

// artifactsOn reports whether the worker stores artifacts.
func (w *Worker) artifactsOn() bool { return w.spool != nil }

// artifactAttempt names attempt k's artifacts.
func artifactAttempt(a *wire.Assignment, k attempt.Key) artifact.Attempt {
	return artifact.ForTask(a.GetTenant(), a.GetGraphId(), k.TaskID, k.Attempt)
}

// filesDir returns the files directory of an ephemeral attempt of
// assignment a (attemptDir), or "" when it gets none (needsFiles). An
// adopted container's is the one its earlier worker made, if any.
func (d *driver) filesDir() string {
	if !d.w.artifactsOn() {
		return ""
	}
	dir := attemptDir(d.w.cfg.DataDir, d.h.key)
	if d.assign == nil && d.adopted != nil {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir
		}
		return ""
	}
	if !needsFiles(d.assign) {
		return ""
	}
	return dir
}

// artifactAttempt names the driver's attempt's artifacts, from its
// assignment or an adopted container's labels; false when it stores none
// (no artifact store, or an adopted container without the labels).
func (d *driver) artifactAttempt() (artifact.Attempt, bool) {
	switch {
	case !d.w.artifactsOn():
	case d.assign != nil:
		return artifactAttempt(d.assign, d.h.key), true
	case d.adopted != nil && d.adopted.tenant != "" && d.adopted.graph != "":
		return artifact.ForTask(d.adopted.tenant, d.adopted.graph, d.h.key.TaskID, d.h.key.Attempt), true
	}
	return artifact.Attempt{}, false
}

// outputPaths are the task's declared output paths.
func (d *driver) outputPaths() []string {
	if d.assign != nil {
		return d.assign.GetSpec().GetOutputPaths()
	}
	if d.adopted != nil {
		return d.adopted.outputs
	}
	return nil
}

// logShipper returns the driver's log shipper, made on first use; it
// records its progress beside the log, so that a worker restarted under
// the attempt (adoption) goes on where this one stopped.
func (d *driver) logShipper(a artifact.Attempt) *artifact.LogShipper {
	if d.shipper == nil {
		lp := logPath(d.w.cfg.DataDir, d.h.key)
		d.shipper = artifact.NewLogShipper(a, lp, d.w.spool)
		d.shipper.Resume(lp + ".shipped")
	}
	return d.shipper
}

// needsFiles reports whether an attempt of assignment a gets output and
// input directories: when its task declares output_paths or receives its
// parents' files. The others skip the directories' creation and removal
// (a few file system calls per task, a good share of a no-op task's cost).
func needsFiles(a *wire.Assignment) bool {
	return a != nil && (len(a.GetSpec().GetOutputPaths()) > 0 || len(a.GetArtifactInputs()) > 0)
}

// prepareFiles creates the output and input directories of an attempt
// under dir (dir/out, dir/in) and points spec at them: MEGAFLOW_OUTPUT_DIR
// and MEGAFLOW_INPUT_DIR, at the host paths for the process runtime, else
// at the paths in the container: bind mounts of the two (ephemeral mode,
// mounts empty), or the same directories inside the warm container's mount
// of its files directory (persistent mode: mounts "/megaflow/attempts/x"
// when dir is <its files directory>/x). The driver calls it before the
// start.
func (w *Worker) prepareFiles(spec *contract.Spec, dir, inContainer string) error {
	out, in := filepath.Join(dir, "out"), filepath.Join(dir, "in")
	for _, d := range []string{out, in} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("attempt directory: %w", err)
		}
	}
	// The task may run as any user: it must be able to write its outputs.
	if err := os.Chmod(out, 0o777); err != nil {
		return fmt.Errorf("attempt directory: %w", err)
	}
	switch {
	case !contract.Isolated(w.rt):
		spec.Env["MEGAFLOW_OUTPUT_DIR"] = out
		spec.Env["MEGAFLOW_INPUT_DIR"] = in
	case inContainer != "":
		spec.Env["MEGAFLOW_OUTPUT_DIR"] = path.Join(inContainer, "out")
		spec.Env["MEGAFLOW_INPUT_DIR"] = path.Join(inContainer, "in")
	default:
		spec.Mounts = append(spec.Mounts,
			contract.Mount{Source: out, Target: ContainerOutputDir},
			contract.Mount{Source: in, Target: ContainerInputDir, ReadOnly: true})
		spec.Env["MEGAFLOW_OUTPUT_DIR"] = ContainerOutputDir
		spec.Env["MEGAFLOW_INPUT_DIR"] = ContainerInputDir
	}
	return nil
}

// setupFiles prepares an attempt's files directory dir (prepareFiles) and
// fetches its parents' files into it (fetchInputs), within StartTimeout.
func (w *Worker) setupFiles(ctx context.Context, spec *contract.Spec, a *wire.Assignment, dir, inContainer string) error {
	if err := w.prepareFiles(spec, dir, inContainer); err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, w.cfg.StartTimeout)
	defer cancel()
	return w.fetchInputs(ictx, a, dir)
}

// fetchInputs downloads the output files of the parents the assignment
// names into attempt k's input directory, waiting for manifests still in
// their workers' spools until ctx ends.
func (w *Worker) fetchInputs(ctx context.Context, a *wire.Assignment, dir string) error {
	in := filepath.Join(dir, "in")
	for name, number := range a.GetArtifactInputs() {
		if artifact.PathProblem(name) != "" || name == "." {
			return fmt.Errorf("inputs: parent name %q is not a valid directory name", name)
		}
		parent := artifact.Attempt{Tenant: a.GetTenant(), GraphID: a.GetGraphId(), TaskName: name, Number: number}
		if _, err := artifact.FetchInputs(ctx, w.cfg.Artifacts, parent, filepath.Join(in, name), inputPoll); err != nil {
			return err
		}
	}
	return nil
}

// shipLoop ships attempt k's log every LogShipInterval until ctx ends.
// It runs in a goroutine of the wait that owns sh.
func (w *Worker) shipLoop(ctx context.Context, sh *artifact.LogShipper, log func(error)) {
	for {
		t := w.clock.NewTimer(w.cfg.LogShipInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if err := sh.Ship(ctx); err != nil && ctx.Err() == nil {
			log(err)
		}
	}
}

// startShipping starts shipping the driver's log while its container runs
// and returns the function that stops it (and waits for it).
func (d *driver) startShipping(ctx context.Context) (stop func()) {
	a, ok := d.artifactAttempt()
	if !ok {
		return func() {}
	}
	d.logShipper(a)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.w.shipLoop(ctx, d.shipper, func(err error) { d.log.Warn("shipping log failed; will retry", "err", err) })
	}()
	return func() { cancel(); <-done }
}

// storeArtifacts queues the attempt's last log chunk, output files (from
// dir/out, dir being its files directory; "" for none), large result and
// manifest once its process exited, sets ev's result to a reference when
// the result went to the store, and removes dir once the spool holds
// copies. Errors are logged and noted in the manifest; they never hold up
// the final event.
func (d *driver) storeArtifacts(ctx context.Context, ev *attempt.WaitDone, dir string) {
	a, ok := d.artifactAttempt()
	if !ok {
		return
	}
	f := artifact.Finish{Log: d.logShipper(a)}
	if dir != "" {
		f.OutDir, f.Paths = filepath.Join(dir, "out"), d.outputPaths()
	}
	if len(ev.Result) > MaxResultBytes {
		f.Result = ev.Result
	}
	m, ref, err := f.Store(ctx, d.w.spool, a)
	if err != nil {
		d.log.Warn("storing artifacts failed", "err", err)
	} else if dir != "" {
		// The spool holds copies now.
		if rerr := os.RemoveAll(dir); rerr != nil {
			d.log.Warn("removing the attempt directory failed", "dir", dir, "err", rerr)
		}
	}
	if len(f.Result) > 0 {
		if ref != nil {
			ev.Result = ref
		} else {
			ev.Result, ev.ResultNote = nil, fmt.Sprintf("MEGAFLOW_RESULT ignored: %d bytes, over %d, and storing it failed: %v", len(f.Result), MaxResultBytes, err)
		}
	}
	if m != nil && len(m.Notes) > 0 {
		d.log.Info("output files: notes", "notes", m.Notes)
	}
	ev.ArtifactsPending = artifact.Pending(d.w.spool, a.ManifestKey())
}

// resumeLanded watches again, after a restart, the manifests the spool
// found on disk: the attempts whose final events went out with
// artifacts_pending before the worker stopped get their ARTIFACTS_LANDED
// once the uploads land (watchLanded's goroutines died with the old
// process). A manifest that uploads before Run starts is reported too: the
// head ignores a repeated ARTIFACTS_LANDED.
func (w *Worker) resumeLanded() {
	sp, ok := w.spool.(interface{ Recovered() []string })
	if !ok {
		return
	}
	for _, key := range sp.Recovered() {
		if a, ok := artifact.ParseManifestKey(key); ok {
			w.watchLanded(attempt.Key{TaskID: a.GraphID + "/" + a.TaskName, Attempt: a.Number}, key)
		}
	}
}

// watchLanded reports ARTIFACTS_LANDED for attempt k once its manifest,
// enqueued last, landed (so everything before it did). The driver calls it after queuing the attempt's final
// event (with artifacts_pending), so the head sees the two in order. The
// goroutine belongs to the worker and ends when it stops.
func (w *Worker) watchLanded(k attempt.Key, manifestKey string) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := w.spool.Wait(w.runCtx, manifestKey); err != nil {
			if w.runCtx.Err() == nil {
				w.log.Error("artifacts of an attempt will not land", "task", k.TaskID, "attempt", k.Attempt, "err", err)
			}
			return
		}
		w.outbox.add(&wire.AttemptEvent{
			TaskId: k.TaskID, Attempt: k.Attempt,
			Kind:      wire.AttemptEventKind_ATTEMPT_EVENT_KIND_ARTIFACTS_LANDED,
			UnixNanos: w.clock.Now().UnixNano(),
		}, nil)
	}()
}
