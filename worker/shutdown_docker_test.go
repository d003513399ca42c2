package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/worker/attempt"
)

// heldEndRT is the real Docker runtime whose Stop (when holdStop) or
// Remove (when holdRemove) is held until the worker is stopping, as a
// call still under way when Shutdown comes would be: a held Stop stops the
// container first and returns after; a held Remove waits on entry
// (entered closes), then goes on into the engine with the context it was
// given.
type heldEndRT struct {
	*docker.Runtime
	holdStop, holdRemove bool
	w                    *Worker // set before Run
	entered              chan struct{}
	enteredOnce          sync.Once
}

// untilStopping waits until the worker's Run context ended (a minute at
// most, so that a failed test does not hang).
func (r *heldEndRT) untilStopping(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-r.w.runCtx.Done():
	case <-time.After(time.Minute):
	}
}

func (r *heldEndRT) Stop(ctx context.Context, id string, grace time.Duration) error {
	err := r.Runtime.Stop(ctx, id, grace)
	if r.holdStop {
		r.untilStopping(ctx)
	}
	return err
}

func (r *heldEndRT) Remove(ctx context.Context, id string) error {
	if r.holdRemove {
		r.enteredOnce.Do(func() { close(r.entered) })
		r.untilStopping(ctx)
	}
	return r.Runtime.Remove(ctx, id)
}

// A worker shut down while a stopped attempt's container is being removed
// (its final event acked), or while its stop is still in flight when the
// ack came, finishes the removal before Shutdown returns: no container of
// the attempt is left on the engine. Before the fix the removal ran on the
// driver's context, cancelled by Shutdown, and the exited container stayed
// for good (megaflow demo's model service).
func TestShutdownFinishesRemovalDocker(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		holdStop, holdRemove bool
	}{
		{"remove under way", false, true},
		{"stop in flight at the ack", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drt, image, cluster := dockerTestRuntime(t, "mfshut-")
			rt := &heldEndRT{Runtime: drt, holdStop: tc.holdStop, holdRemove: tc.holdRemove, entered: make(chan struct{})}
			head := newFakeHead(t, "h1")
			cfg := testConfig(t, rt, t.TempDir(), head.addr)
			cfg.ClusterName = cluster
			cfg.StopGrace = time.Second
			w, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rt.w = w
			done := make(chan error, 1)
			go func() { done <- w.Run(context.Background()) }()
			t.Cleanup(func() {
				w.Kill()
				<-done
			})

			head.send(assignMsg("g/s", 1, spec(image, "sleep", "60")))
			waitKind := func(kind wire.AttemptEventKind) {
				t.Helper()
				waitFor(t, time.Minute, "g/s "+kind.String(), func() bool {
					for _, e := range head.eventsOf("g/s", 1) {
						if e.GetKind() == kind {
							return true
						}
					}
					return false
				})
			}
			waitKind(kindStarted)
			head.send(stopMsg("g/s", 1, "cancelled"))
			waitKind(kindStopped) // the fake head acks it
			if tc.holdRemove {
				select {
				case <-rt.entered:
				case <-time.After(time.Minute):
					t.Fatal("the container's removal never began")
				}
			} else {
				waitFor(t, time.Minute, "the attempt removing (stop held)", func() bool {
					a := w.Attempts()
					return len(a) == 1 && a[0].State == attempt.Removing
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := w.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			cs, err := drt.List(context.Background(), map[string]string{LabelCluster: cluster, LabelTask: "g/s"})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				t.Errorf("container %s (running %v) of the stopped attempt left after Shutdown", c.Name, c.Running)
			}
		})
	}
}
