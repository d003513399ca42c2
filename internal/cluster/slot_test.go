package cluster

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// stuckDaemon is a daemon whose Run ignores its context, Kill and
// Shutdown, and returns only when the test releases it.
type stuckDaemon struct{ release chan struct{} }

func (d stuckDaemon) Run(context.Context) error      { <-d.release; return nil }
func (d stuckDaemon) Shutdown(context.Context) error { return nil }
func (d stuckDaemon) Kill()                          {}

// A daemon whose Run does not return once it is killed or stopped is
// reported to run's ended, and kill and stop return instead of hanging
// their caller (and with it a test's cleanup).
func TestSlotGivesUpOnAStuckRun(t *testing.T) {
	for _, how := range []string{"kill", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			d := stuckDaemon{release: make(chan struct{})}
			defer close(d.release)
			var mu sync.Mutex
			var reported []string
			s := &slot[stuckDaemon]{runTimeout: 50 * time.Millisecond}
			s.run(func(name string, err error) {
				mu.Lock()
				reported = append(reported, name+": "+err.Error())
				mu.Unlock()
			}, "head h1", d)
			var err error
			if how == "kill" {
				s.kill()
			} else {
				_, err = s.stop(time.Second)
			}
			want := "head h1: Run has not returned 50ms after its " + how
			mu.Lock()
			defer mu.Unlock()
			if len(reported) != 1 || !strings.HasPrefix(reported[0], want) {
				t.Fatalf("reported %q, want one %q", reported, want)
			}
			if how == "shutdown" && (err == nil || !strings.Contains(err.Error(), "Run has not returned")) {
				t.Fatalf("stop returned %v, want the stuck Run's error", err)
			}
		})
	}
}
