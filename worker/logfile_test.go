package worker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker/attempt"
)

// An attempt that prints nothing costs no log file and no log directory:
// the worker leaves their creation to the runtime's first byte of output
// (contract.Spec.LogPath). Its EXITED carries no result, and its manifest
// says its log is empty (zero chunks), which the heads' Logs answers as an
// empty log. An attempt that prints gets its whole log, its result, and
// its log shipped.
func TestLogFileOnlyWithOutput(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	rt.OnCommand("silent", fake.Behavior{Duration: time.Second})
	rt.OnCommand("loud", fake.Behavior{Duration: time.Second, Output: "hello\nMEGAFLOW_RESULT {\"x\": 1}\n"})
	dir := t.TempDir()
	store := artifact.NewMemStore()
	cfg := testConfig(t, rt, dir, head.addr)
	cfg.Artifacts = store
	startWorker(t, cfg)
	head.send(assignMsg("g/silent", 1, spec("busybox", "silent")))
	head.send(assignMsg("g/loud", 1, spec("busybox", "loud")))
	head.waitEvent("g/silent", 1, kindStarted)
	head.waitEvent("g/loud", 1, kindStarted)
	rt.clock.Advance(time.Second)
	silent := head.waitEvent("g/silent", 1, kindExited)
	loud := head.waitEvent("g/loud", 1, kindExited)

	if silent.GetExitCode() != 0 || silent.GetResult() != nil || silent.GetReason() != "" {
		t.Errorf("silent EXITED = %v", silent)
	}
	lp := logPath(dir, attempt.Key{TaskID: "g/silent", Attempt: 1})
	if _, err := os.Stat(filepath.Dir(lp)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the silent attempt has a log directory (%v)", err)
	}
	if string(loud.GetResult()) != `{"x": 1}` {
		t.Errorf("loud EXITED = %v", loud)
	}
	if b, err := os.ReadFile(logPath(dir, attempt.Key{TaskID: "g/loud", Attempt: 1})); err != nil || string(b) != "hello\nMEGAFLOW_RESULT {\"x\": 1}\n" {
		t.Errorf("loud log %q, %v", b, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	manifest := func(task string) *artifact.Manifest {
		var m *artifact.Manifest
		waitFor(t, 10*time.Second, "the manifest of "+task, func() bool {
			var err error
			m, err = artifact.ReadManifest(ctx, store, artifact.ForTask("default", "g", task, 1))
			return err == nil
		})
		return m
	}
	if m := manifest("g/silent"); m.LogChunks != 0 || m.LogBytes != 0 {
		t.Errorf("silent manifest: %d chunks, %d bytes; want an empty log", m.LogChunks, m.LogBytes)
	}
	if m := manifest("g/loud"); m.LogChunks != 1 || m.LogBytes != int64(len("hello\nMEGAFLOW_RESULT {\"x\": 1}\n")) {
		t.Errorf("loud manifest: %d chunks, %d bytes", m.LogChunks, m.LogBytes)
	}
}
