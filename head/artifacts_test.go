package head_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/runtime/process"
	"github.com/megaflow/megaflow/worker"
)

// Artifacts on real processes (no isolation: MEGAFLOW_OUTPUT_DIR and
// MEGAFLOW_INPUT_DIR are host paths): a followed log streams while the
// task runs and ends when it ended; a child reads its parent's output file;
// the client lists and downloads files; bad requests get clear errors.
func TestArtifactsOnRealProcesses(t *testing.T) {
	store := artifact.NewMemStore()
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.Artifacts = store }})
	rt, err := process.New(process.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) {
		cfg.Artifacts = store
		cfg.LogShipInterval = 20 * time.Millisecond
	}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	gate := filepath.Join(t.TempDir(), "gate")
	g := &client.GraphSpec{Id: "files", Tasks: []*client.TaskSpec{
		sh("gen", `echo first; while [ ! -f `+gate+` ]; do sleep 0.02; done; echo second; `+
			`mkdir -p "$MEGAFLOW_OUTPUT_DIR/d"; printf 'v=7' > "$MEGAFLOW_OUTPUT_DIR/d/x.txt"`),
		sh("use", `cat "$MEGAFLOW_INPUT_DIR/gen/d/x.txt"; echo`, "gen"),
	}}
	g.Tasks[0].OutputPaths = []string{"d"}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	// Follow gen's log: "first" arrives while gen waits for the gate.
	var got bytes.Buffer
	for ch, err := range cl.Logs(ctx, "files/gen", client.LogsOptions{Follow: true}) {
		if err != nil {
			t.Fatal(err)
		}
		got.Write(ch.Data)
		if got.String() == "first\n" {
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got.String() != "first\nsecond\n" {
		t.Fatalf("followed log %q", got.String())
	}
	if res := waitGraph(ctx, t, cl, "files"); res.State != client.GraphSucceeded {
		t.Fatalf("graph %v", res.State)
	}
	testcluster.WaitFor(t, 2*time.Minute, "use's log complete", func() bool {
		var b bytes.Buffer
		for ch, err := range cl.Logs(ctx, "files/use", client.LogsOptions{}) {
			if err != nil {
				return false
			}
			b.Write(ch.Data)
		}
		return b.String() == "v=7\n"
	})
	list, err := cl.Artifacts(ctx, "files/gen", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Files) != 1 || list.Files[0].Path != "d/x.txt" || list.Files[0].Size != 3 || list.LogChunks == 0 {
		t.Fatalf("artifacts of gen: %v", list)
	}
	var file bytes.Buffer
	if _, err := cl.GetArtifact(ctx, "files/gen", 1, "d/x.txt", &file); err != nil || file.String() != "v=7" {
		t.Fatalf("get d/x.txt: %q, %v", file.String(), err)
	}
	for _, tc := range []struct {
		task    string
		attempt uint32
		path    string
		want    string
	}{
		{"files/nope", 0, "d/x.txt", `task "files/nope" not found`},
		{"files/gen", 7, "d/x.txt", `task "files/gen" has no attempt 7`},
		{"files/gen", 1, "../x", `has no file "../x"`},
	} {
		_, err := cl.GetArtifact(ctx, tc.task, tc.attempt, tc.path, &file)
		if !errors.Is(err, errs.ErrNotFound) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("GetArtifact(%s, %d, %s): %v, want NotFound with %q", tc.task, tc.attempt, tc.path, err, tc.want)
		}
	}

	// DeleteGraph removes the artifacts, then the graph.
	res, err := cl.DeleteGraph(ctx, "files")
	if err != nil || res.Tasks != 2 || res.Artifacts == 0 {
		t.Fatalf("DeleteGraph: %v, %v", res, err)
	}
	if left, err := store.List(ctx, "default/files/"); err != nil || len(left) != 0 {
		t.Fatalf("after DeleteGraph the store holds %d objects of the graph (%v)", len(left), err)
	}
	if _, err := cl.Artifacts(ctx, "files/gen", 0); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Artifacts of a deleted graph: %v, want NotFound", err)
	}
	if _, err := cl.DeleteGraph(ctx, "files"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second DeleteGraph: %v, want NotFound", err)
	}
}

// A worker that stores its artifacts somewhere the heads do not read: the
// logs and the artifacts of its attempts are refused with NotFound saying
// why (each daemon's default store is under its own data dir), not an
// empty answer.
func TestLogsFromAnotherStoreAreNotFound(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.Artifacts = artifact.NewMemStore() }})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 5 * time.Millisecond, Output: "hello\n"})
	other := artifact.NewMemStore()
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) { cfg.Artifacts = other }})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, flatGraph("g", 1)); err != nil {
		t.Fatal(err)
	}
	if g := waitGraph(ctx, t, cl, "g"); g.State != client.GraphSucceeded {
		t.Fatalf("graph %v", g)
	}
	for chunk, err := range cl.Logs(ctx, "g/t000", client.LogsOptions{}) {
		if err == nil {
			t.Fatalf("logs returned %q from a store the worker never wrote to", chunk.Data)
		}
		if !errors.Is(err, errs.ErrNotFound) || !strings.Contains(err.Error(), "attempt 1 of task \"g/t000\" left no logs in the artifact store mem://") ||
			!strings.Contains(err.Error(), "share one --artifacts store") {
			t.Fatalf("logs: %v", err)
		}
		break
	}
	if _, err := cl.Artifacts(ctx, "g/t000", 0); !errors.Is(err, errs.ErrNotFound) || !strings.Contains(err.Error(), "attempt 1 of task") {
		t.Fatalf("artifacts: %v", err)
	}
}

// TestLogsWaitForALogStillLanding: a task finished, and its worker's
// upload of the log is still under way (the attempt's ArtifactsPending).
// A log read without follow waits for the rest to land and returns the
// whole log, instead of the part that had landed (nothing here): a user
// who waited for the task and then read its log got an empty answer.
func TestLogsWaitForALogStillLanding(t *testing.T) {
	store := artifact.NewMemStore()
	looked := make(chan struct{}, 1)
	headStore := &listHook{Store: store, prefix: "default/g/", hook: func() {
		select {
		case looked <- struct{}{}:
		default:
		}
	}}
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.Artifacts = headStore }})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 5 * time.Millisecond, Output: "hello\n"})
	gate := &gatedStore{Store: store}
	gate.down.Store(true)
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) { cfg.Artifacts = gate }})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, flatGraph("g", 1)); err != nil {
		t.Fatal(err)
	}
	if g := waitGraph(ctx, t, cl, "g"); g.State != client.GraphSucceeded {
		t.Fatalf("graph %v", g)
	}
	task, _, err := cl.GetTask(ctx, "g/t000", client.ReadOptions{})
	if err != nil || len(task.Attempts) != 1 || !task.Attempts[0].ArtifactsPending {
		t.Fatalf("task %v (%v): want one attempt with its artifacts pending (the worker's store is down)", task, err)
	}
	for len(looked) > 0 {
		<-looked
	}
	got := make(chan string, 1)
	go func() {
		var b strings.Builder
		for chunk, err := range cl.Logs(ctx, "g/t000", client.LogsOptions{}) {
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			b.Write(chunk.Data)
		}
		got <- b.String()
	}()
	select { // the head listed the attempt's log while nothing had landed
	case <-looked:
	case <-ctx.Done():
		t.Fatal("the head never listed the log")
	}
	gate.down.Store(false)
	select {
	case s := <-got:
		if s != "hello\n" {
			t.Fatalf("logs read while the log was landing: %q, want %q", s, "hello\n")
		}
	case <-ctx.Done():
		t.Fatal("logs never returned")
	}
}

// gatedStore is a worker's store that refuses uploads while down is set.
type gatedStore struct {
	blob.Store
	down atomic.Bool
}

func (g *gatedStore) Put(ctx context.Context, key string, r io.Reader, opts blob.PutOptions) (blob.Info, error) {
	if g.down.Load() {
		return blob.Info{}, fmt.Errorf("gated by the test: %w", blob.ErrUnavailable)
	}
	return g.Store.Put(ctx, key, r, opts)
}

// listHook is a head's store that calls hook on each List under prefix.
type listHook struct {
	blob.Store
	prefix string
	hook   func()
}

func (l *listHook) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	if strings.HasPrefix(prefix, l.prefix) {
		l.hook()
	}
	return l.Store.List(ctx, prefix)
}

// A task that prints nothing on real processes leaves no log file on its
// worker (the file comes with the first byte of output), and its logs are
// an empty answer, not an error; a task that prints beside it gets its
// whole log through the heads.
func TestLogsOfASilentTaskAreEmpty(t *testing.T) {
	store := artifact.NewMemStore()
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.Artifacts = store }})
	rt, err := process.New(process.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) { cfg.Artifacts = store }})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := &client.GraphSpec{Id: "quiet", Tasks: []*client.TaskSpec{sh("silent", "true"), sh("loud", "echo hello; echo world >&2")}}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if res := waitGraph(ctx, t, cl, "quiet"); res.State != client.GraphSucceeded {
		t.Fatalf("graph %v", res.State)
	}
	logs := func(task string) string {
		var b bytes.Buffer
		for ch, err := range cl.Logs(ctx, task, client.LogsOptions{}) {
			if err != nil {
				t.Fatalf("logs of %s: %v", task, err)
			}
			b.Write(ch.Data)
		}
		return b.String()
	}
	if got := logs("quiet/silent"); got != "" {
		t.Errorf("logs of the silent task: %q", got)
	}
	if got := logs("quiet/loud"); got != "hello\nworld\n" {
		t.Errorf("logs of the loud task: %q", got)
	}
	if _, err := os.Stat(filepath.Join(w.DataDir, "logs", "quiet+silent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the silent task's log directory on its worker: %v; want none", err)
	}
	if _, err := os.Stat(filepath.Join(w.DataDir, "logs", "quiet+loud", "1.log")); err != nil {
		t.Errorf("the loud task's log file on its worker: %v", err)
	}
}
