package process

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// StopAll stops every process still running, one that ignores SIGTERM too
// (SIGKILL after the grace), and leaves exited ones alone.
func TestStopAllStopsEveryProcess(t *testing.T) {
	r := newRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func(name string, cmd ...string) string {
		id, err := r.Start(ctx, contract.Spec{Name: name, Command: cmd, LogPath: filepath.Join(dir, name+".log")})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	polite := start("polite", "sleep", "300.1")
	stubborn := start("stubborn", "sh", "-c", "trap '' TERM; echo trapped; sleep 300.2; true")
	done := start("done", "true")
	wait(t, r, done)
	eventually(t, "both processes run", func() bool { return alive("sleep", "300.1") && alive("sleep", "300.2") })
	// SIGTERM is ignored only once the shell set its trap and said so.
	eventually(t, "the trap is set", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "stubborn.log"))
		return string(b) == "trapped\n"
	})

	if err := r.StopAll(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, r, polite); e.Code != 128+15 {
		t.Errorf("polite exit %+v, want SIGTERM (143)", e)
	}
	if e := wait(t, r, stubborn); e.Code != 128+9 {
		t.Errorf("stubborn exit %+v, want SIGKILL (137)", e)
	}
	if alive("sleep", "300.1") || alive("sleep", "300.2") {
		t.Error("a process outlived StopAll")
	}
	if list, _ := r.List(ctx, nil); len(list) != 3 {
		t.Errorf("StopAll removed processes from the list: %v", list)
	}
}
