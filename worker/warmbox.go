package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/megaflow/megaflow/internal/atomicfile"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

// Sandboxes served from the warm pool (docs/sandboxes.md, "Warm pool").
//
// A sandbox attempt assigned here whose container would have the pool key
// of an idle warm container (image, tenant, limits, network, confinement:
// keyOf of the container it would start) takes that container out of the
// pool instead of starting a fresh one, unless it is created from a
// snapshot (its image is the snapshot's) or the worker's pool keeper is the
// image's own command. Only a warm container that never served a
// persistent task's exec is taken: a sandbox starts from the image's files.
//
// What differs from a fresh sandbox container is what a container fixes at
// its creation and an exec does not: its environment and working
// directory. The sandbox's environment (its spec's and the assignment's,
// and MEGAFLOW_TASK_ID and the others) and working directory become the
// defaults of each of its execs (an exec's own env and cwd override them),
// and the working directory is created in the container (mkdir -p) at the
// claim (by the engine, owned by the container's user, when an admission
// policy runs it as one: contract.DirMaker). Its labels stay those of a warm container (the engine cannot
// change them); the claim file says whose it is now.
//
// The claim is durable before the attempt reports STARTED: the container
// is recorded in <data dir>/claims/<container id>.json (the labels a fresh
// container of the attempt would carry, its exec defaults, the leader's
// term), written and synced, then renamed to the attempt's container name.
// A restarted worker (kill -9) reads the claims first: a warm container
// with a claim is adopted as its attempt's container, like a fresh one,
// never removed as a previous run's warm container; a claim whose
// container is gone is deleted. The pool refills to its target at once.
// When the sandbox ends its container is removed, never given back to the
// pool (its files are the user's), and its claim file with it.

// warmClaim is a warm container claimed by a sandbox attempt, as its claim
// file records it.
type warmClaim struct {
	// ContainerID is the engine's id of the container.
	ContainerID string `json:"container_id"`
	// PoolName is the name it had in the pool (its log file and files
	// directory are named after it).
	PoolName string `json:"pool_name"`
	// Task and Attempt are the attempt it serves; Term the leader term
	// of its assignment.
	Task    string `json:"task"`
	Attempt uint32 `json:"attempt"`
	Term    uint64 `json:"term"`
	// Labels are the labels a fresh container of the attempt would carry
	// (parseLabels reads them at adoption).
	Labels map[string]string `json:"labels"`
	// Env and WorkingDir are its execs' defaults: the environment and
	// working directory a fresh container would have had.
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
}

// claimsDir holds the claim files.
func claimsDir(dataDir string) string { return filepath.Join(dataDir, "claims") }

func claimPath(dataDir, id string) string { return filepath.Join(claimsDir(dataDir), id+".json") }

// writeClaim writes c's claim file atomically and durably
// (atomicfile.Write: synced, renamed, the directory synced).
func writeClaim(dataDir string, c *warmClaim) error {
	if err := os.MkdirAll(claimsDir(dataDir), 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return atomicfile.Write(claimPath(dataDir, c.ContainerID), b, 0o644)
}

// loadClaims reads every claim file; a file that cannot be read or parsed
// is reported in bad (the container it names, if any, is then removed as
// a previous run's warm container).
func loadClaims(dataDir string) (claims map[string]*warmClaim, bad []string) {
	claims = map[string]*warmClaim{}
	ents, err := os.ReadDir(claimsDir(dataDir))
	if err != nil {
		return claims, nil
	}
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(claimsDir(dataDir), name)
		if !strings.HasSuffix(name, ".json") {
			_ = os.Remove(path) // a temporary file of a write cut short
			continue
		}
		b, err := os.ReadFile(path)
		var c warmClaim
		if err == nil {
			err = json.Unmarshal(b, &c)
		}
		if err != nil || c.ContainerID == "" || c.ContainerID+".json" != name {
			bad = append(bad, fmt.Sprintf("%s: %v", path, err))
			_ = os.Remove(path)
			continue
		}
		claims[c.ContainerID] = &c
	}
	return claims, bad
}

// claimOf returns the claim on container id, or nil.
func (w *Worker) claimOf(id string) *warmClaim {
	w.claimsMu.Lock()
	defer w.claimsMu.Unlock()
	return w.claims[id]
}

// labelsOf returns container c's labels: its claim's when a sandbox
// claimed it (a warm container keeps its warm labels on the engine).
func (w *Worker) labelsOf(c contract.Container) map[string]string {
	if cl := w.claimOf(c.ID); cl != nil {
		return cl.Labels
	}
	return c.Labels
}

// isWarm reports whether labels l are a warm container's: LabelPool and no
// attempt labels (a fork's container inherits LabelPool from the image a
// warm-served sandbox was committed to, and is an attempt's).
func isWarm(l map[string]string) bool {
	_, pool := l[LabelPool]
	return pool && l[LabelTask] == ""
}

// dropClaim forgets the claim on container id, once the container is gone:
// its claim file, and the warm container's log and files directory.
func (w *Worker) dropClaim(id string) {
	w.claimsMu.Lock()
	cl := w.claims[id]
	delete(w.claims, id)
	w.claimsMu.Unlock()
	if cl == nil {
		return
	}
	_ = os.Remove(claimPath(w.cfg.DataDir, id))
	if cl.PoolName != "" {
		_ = os.Remove(filepath.Join(w.cfg.DataDir, "logs", "_pool", cl.PoolName+".log"))
		// What the sandbox wrote under the warm container's files mount
		// (ContainerAttemptsDir) goes with it: its files are the user's.
		_ = os.RemoveAll(poolFilesDir(w.cfg.DataDir, cl.PoolName))
	}
}

// warmServes reports whether sandbox assignment a may be served from the
// warm pool: a sandbox not created from a snapshot, on a worker with a pool
// whose keeper is an idle loop (not the image's own command) and whose
// runtime runs sandbox execs.
func (w *Worker) warmServes(a *wire.Assignment) bool {
	sb := a.GetSpec().GetSandbox()
	if sb == nil || w.pool == nil || len(w.cfg.PoolKeeper) == 0 || w.persistent(a) {
		return false
	}
	if sb.GetFromSnapshot() != "" || sb.GetSnapshotWorker() != "" {
		return false
	}
	_, ok := w.rt.(contract.StreamExecer)
	return ok
}

// claimWarm serves sandbox attempt h (assignment a, the fresh container it
// would get spec) from an idle warm container of spec's key, if there is
// one, and returns its id: the container is out of the pool, its claim
// durable, its working directory made, and it is renamed to spec.Name.
// false: no idle warm container of the key, or the claim failed (the
// container is then removed; the caller starts a fresh one).
func (w *Worker) claimWarm(ctx context.Context, a *wire.Assignment, h *handle, spec contract.Spec, log *slog.Logger) (string, bool) {
	key := keyOf(a.GetTenant(), spec)
	cl := &warmClaim{Task: h.key.TaskID, Attempt: h.key.Attempt, Term: a.GetLeaderTerm(),
		Labels: maps.Clone(spec.Labels), Env: maps.Clone(spec.Env), WorkingDir: spec.WorkingDir}
	c := w.pool.take(key, func(c *warm) {
		// Under the pool's lock: reconciliation never sees the container
		// neither in the pool nor claimed.
		cl.ContainerID, cl.PoolName = c.id, c.name
		w.claimsMu.Lock()
		w.claims[c.id] = cl
		w.claimsMu.Unlock()
	})
	if c == nil {
		return "", false
	}
	w.pool.tick(w.runCtx) // refill to the target
	fail := func(what string, err error) (string, bool) {
		log.Warn("a warm container could not serve the sandbox; starting a fresh one", "container", c.id, "step", what, "err", err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.StopGrace+2*w.cfg.CallTimeout)
		defer cancel()
		_ = w.rt.Stop(rctx, c.id, 0)
		if err := w.rt.Remove(rctx, c.id); err != nil && !errors.Is(err, contract.ErrNotFound) {
			log.Warn("removing a warm container whose claim failed failed; reconciliation will retry", "container", c.id, "err", err)
			// Its claim stays: reconciliation removes it once its
			// attempt ended (no attempt holds it then).
			return "", false
		}
		w.dropClaim(c.id)
		return "", false
	}
	if err := writeClaim(w.cfg.DataDir, cl); err != nil {
		return fail("claim file", err)
	}
	if dm, ok := w.rt.(contract.DirMaker); ok && spec.WorkingDir != "" && spec.User != "" && !spec.ReadOnlyRootfs {
		// A warm container running as a policy's user: an exec of mkdir
		// would run as that user, who may not write its parent; the engine
		// makes it and gives it to the user, as for a fresh container.
		cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
		err := dm.MakeDir(cctx, c.id, spec.WorkingDir, spec.User)
		cancel()
		if err != nil {
			return fail("working directory", err)
		}
	} else if wd := spec.WorkingDir; wd != "" {
		se := w.rt.(contract.StreamExecer)
		var out strings.Builder
		cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
		exit, err := se.ExecStream(cctx, c.id, contract.ExecRequest{Command: []string{"mkdir", "-p", "--", wd}, Stdout: &out, Stderr: &out})
		cancel()
		if err == nil && exit.Code != 0 {
			err = fmt.Errorf("mkdir -p %s exited %d: %s", wd, exit.Code, strings.TrimSpace(out.String()))
		}
		if err != nil {
			return fail("working directory", err)
		}
	}
	if rn, ok := w.rt.(contract.Renamer); ok {
		// Cosmetic (docker ps shows the sandbox's attempt): the claim
		// file, not the name, says whose the container is.
		if err := rn.Rename(ctx, c.id, spec.Name); err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("cannot rename a claimed warm container to its attempt's name; it keeps its pool name", "container", c.id, "name", spec.Name, "err", err)
		}
	}
	h.setExecDefaults(cl.Env, cl.WorkingDir)
	w.metrics.sandboxCreates.WithLabelValues("warm").Inc()
	log.Debug("sandbox served from a warm container", "container", c.id, "pool_name", c.name)
	return c.id, true
}

// setExecDefaults records the environment and working directory each exec
// of a warm-served sandbox gets unless it names its own.
func (h *handle) setExecDefaults(env map[string]string, wd string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.execEnv, h.execDir = env, wd
}

// execDefaults returns what setExecDefaults recorded (nil, "" for a
// sandbox in a container of its own, whose container has them).
func (h *handle) execDefaults() (map[string]string, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.execEnv, h.execDir
}

// take takes an idle warm container of key that never served an exec out
// of the pool (the newest such), calling claimed with it under the pool's
// lock; nil when there is none.
func (p *pool) take(key poolKey, claimed func(*warm)) *warm {
	p.mu.Lock()
	defer p.mu.Unlock()
	kp := p.keys[key]
	if kp == nil {
		return nil
	}
	for i := len(kp.idle) - 1; i >= 0; i-- {
		c := kp.idle[i]
		if c.used || c.session != "" {
			continue
		}
		kp.idle = append(kp.idle[:i], kp.idle[i+1:]...)
		delete(kp.all, c.id)
		claimed(c)
		p.broadcastLocked()
		return c
	}
	return nil
}

// isSandbox reports whether a is a sandbox's attempt.
func isSandbox(a *wire.Assignment) bool { return a.GetSpec().GetSandbox() != nil }
