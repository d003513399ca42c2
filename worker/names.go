package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// Container labels. Every container the worker starts carries them; the
// worker finds its own containers by LabelCluster, LabelWorker and
// LabelClusterID (clusterid.go).
const (
	// LabelCluster is Config.ClusterName.
	LabelCluster = "megaflow.cluster"
	// LabelClusterID is the cluster's id (16 hex digits) as the head sent
	// it in its Welcome; absent while the worker knows none.
	LabelClusterID = "megaflow.cluster-id"
	// LabelWorker is the worker's NodeID.
	LabelWorker = "megaflow.worker"
	// LabelTask is the task id, "<graph id>/<task name>".
	LabelTask = "megaflow.task"
	// LabelAttempt is the attempt number, decimal.
	LabelAttempt = "megaflow.attempt"
	// LabelGraph is the graph id.
	LabelGraph = "megaflow.graph"
	// LabelTerm is the Raft term of the leader that committed the
	// assignment (for operators; fencing uses attempt numbers).
	LabelTerm = "megaflow.term"
	// LabelDeadline is the attempt's timeout deadline in Unix milliseconds,
	// absent without a timeout, so that an adopted container keeps it.
	LabelDeadline = "megaflow.deadline"
	// LabelTimeout is the attempt's timeout in seconds (for the reason).
	LabelTimeout = "megaflow.timeout"
	// LabelMemory is the container's memory limit in bytes (for the OOM
	// reason). An attempt's container also carries LabelTenant (pool.go),
	// so that a worker restarted under it stores its artifacts where the
	// assignment said.
	LabelMemory = "megaflow.memory"
	// LabelOutputs is the task's output_paths as a JSON array of strings,
	// absent when it declares none (for an adopted container's files).
	LabelOutputs = "megaflow.outputs"
	// LabelSandboxIdle marks a sandbox's container (docs/sandboxes.md)
	// with its idle timeout in seconds (0: none), so that a worker
	// restarted under it keeps its idle timer.
	LabelSandboxIdle = "megaflow.sandbox-idle"
)

// maxNameLen keeps container names within 63 characters, so a name is also
// a valid hostname.
const maxNameLen = 63

// nameScope is the worker part of its container names: the worker id, or
// "<cluster>-<worker id>" when Config.ClusterName is not the default, so
// that two clusters sharing a Docker engine with the same worker ids (test
// clusters, a staging and a production cluster on one host) never claim
// the same name.
func (w *Worker) nameScope() string {
	if w.cfg.ClusterName == DefaultConfig().ClusterName {
		return w.cfg.NodeID
	}
	return w.cfg.ClusterName + "-" + w.cfg.NodeID
}

// ContainerName returns the container name of one attempt on one worker
// (workerID is its name scope: the worker id, after the cluster name unless
// that is the default):
// "mf-<worker>-<task id, '/' as '_'>-a<attempt>". When that is longer than
// 63 characters, or ambiguous because the task id holds a '_', the task part
// is shortened and followed by 8 hex digits of a hash of the task id, so
// that names stay unique per attempt.
func ContainerName(workerID string, k attempt.Key) string {
	task := sanitize(k.TaskID)
	suffix := "-a" + strconv.FormatUint(uint64(k.Attempt), 10)
	name := "mf-" + workerID + "-" + task + suffix
	if len(name) <= maxNameLen && !strings.Contains(k.TaskID, "_") {
		return name
	}
	sum := sha256.Sum256([]byte(k.TaskID))
	hash := hex.EncodeToString(sum[:4])
	prefix := "mf-" + workerID + "-"
	room := maxNameLen - len(prefix) - len(suffix) - len(hash) - 1
	if room < 0 {
		// Only a worker id near its 64-byte limit gets here: keep the
		// hashes and the attempt, which make the name unique.
		return truncate(prefix, maxNameLen-len(hash)-len(suffix)-1) + "-" + hash + suffix
	}
	return prefix + truncate(task, room) + "-" + hash + suffix
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// sanitize maps s to [A-Za-z0-9._-]: '/' and any other byte become '_'.
func sanitize(s string) string {
	b := []byte(s)
	for i := range b {
		if !isNameByte(b[i]) {
			b[i] = '_'
		}
	}
	return string(b)
}

// logPath is where attempt k's output goes:
// dataDir/logs/<task id, '/' as '+'>/<attempt>.log. Task ids are
// [A-Za-z0-9._-] around one '/', so '+' keeps the mapping one to one; any
// other byte becomes '_', and a leading '.' gets a '_' before it, so the
// path never leaves dataDir/logs.
func logPath(dataDir string, k attempt.Key) string {
	b := []byte(k.TaskID)
	for i := range b {
		switch {
		case b[i] == '/':
			b[i] = '+'
		case !isNameByte(b[i]):
			b[i] = '_'
		}
	}
	dir := string(b)
	if dir == "" || dir[0] == '.' {
		dir = "_" + dir
	}
	return filepath.Join(dataDir, "logs", dir, strconv.FormatUint(uint64(k.Attempt), 10)+".log")
}

// found is what the labels of a listed container say about its attempt.
type found struct {
	key      attempt.Key
	deadline time.Time
	timeout  time.Duration
	memory   int64
	// tenant and graph name the attempt's artifacts ("" when the labels
	// lack them: a container of an older worker); outputs are its task's
	// output paths.
	tenant, graph string
	outputs       []string
	// sandbox is set for a sandbox's container, with its idle timeout.
	sandbox     bool
	sandboxIdle time.Duration
}

// parseLabels reads the attempt labels of a container; ok is false when
// they are missing or malformed (such a container is removed as a leak).
func parseLabels(l map[string]string) (f found, ok bool) {
	n, err := strconv.ParseUint(l[LabelAttempt], 10, 32)
	if err != nil || n == 0 || l[LabelTask] == "" {
		return f, false
	}
	f.key = attempt.Key{TaskID: l[LabelTask], Attempt: uint32(n)}
	if ms, err := strconv.ParseInt(l[LabelDeadline], 10, 64); err == nil && ms > 0 {
		f.deadline = time.UnixMilli(ms)
	}
	if s, err := strconv.ParseInt(l[LabelTimeout], 10, 64); err == nil && s > 0 {
		f.timeout = time.Duration(s) * time.Second
	}
	if m, err := strconv.ParseInt(l[LabelMemory], 10, 64); err == nil && m > 0 {
		f.memory = m
	}
	f.tenant, f.graph = l[LabelTenant], l[LabelGraph]
	if v, ok := l[LabelSandboxIdle]; ok {
		secs, _ := strconv.ParseInt(v, 10, 64)
		f.sandbox, f.sandboxIdle = true, time.Duration(max(secs, 0))*time.Second
	}
	if o := l[LabelOutputs]; o != "" {
		_ = json.Unmarshal([]byte(o), &f.outputs) // malformed: no files, as without the label
	}
	return f, true
}

// startAfterConflict starts spec after the runtime said its name is taken
// (a stale container: left by an earlier run, or made by someone else).
// A container of this worker by its labels is stopped and removed (no live
// attempt of ours holds it: the attempt it is named after is the one
// starting), and spec started again under its name; a container that is
// not ours is left alone, and spec starts under a fresh name (the worker
// finds its containers by label, not by name). The driver calls it from
// its start goroutine.
func (w *Worker) startAfterConflict(ctx context.Context, spec contract.Spec, log *slog.Logger) (string, error) {
	cs, err := w.rt.List(ctx, w.ownLabels())
	if err != nil {
		return "", fmt.Errorf("container name %s in use, and listing this worker's containers failed: %w", spec.Name, err)
	}
	for _, c := range cs {
		if c.Name != spec.Name {
			continue
		}
		if f, ok := parseLabels(w.labelsOf(c)); ok && f.key != (attempt.Key{}) {
			if h := w.handleOf(f.key); h != nil && h.status().ContainerID == c.ID {
				break // a live attempt's: not stale; take a fresh name
			}
		}
		log.Warn("removing a stale container of this worker that has the attempt's name", "container", c.ID, "name", c.Name,
			"task", c.Labels[LabelTask], "attempt", c.Labels[LabelAttempt])
		w.removeLeak(ctx, c)
		return w.rt.Start(ctx, spec)
	}
	old := spec.Name
	spec.Name = freshName(old, rand.Uint32())
	log.Warn("container name in use by a container that is not this worker's; starting under another name", "name", old, "new_name", spec.Name)
	return w.rt.Start(ctx, spec)
}

// freshName returns name with "-x" and 8 hex digits of n after it, within
// maxNameLen.
func freshName(name string, n uint32) string {
	suffix := fmt.Sprintf("-x%08x", n)
	return truncate(name, maxNameLen-len(suffix)) + suffix
}
