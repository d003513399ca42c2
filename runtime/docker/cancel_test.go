package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
)

// A Start cancelled while its create is with the engine leaves nothing:
// the engine finishes a create whose client went away, so Start waits for
// the create's answer and removes the container before it returns. The
// engine's own events are the witness: by the time Start returned, each
// create it sent has its destroy (before, the create was cut short and
// the engine made the container afterwards, unseen until the worker's
// reconciliation). A Start whose ctx ended before it began sends nothing.
func TestCancelDuringCreateLeavesNothing(t *testing.T) {
	e := newEnv(t)
	since := time.Now().Add(-time.Second)
	ctx := context.Background()

	type round struct {
		name    string
		created bool // Start sent the create
	}
	var rounds []round
	// An already cancelled ctx, then cancels that land (on this engine's
	// tens of milliseconds per create) during the create, or after it.
	for i, delay := range []time.Duration{-1, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond} {
		spec := e.spec("c"+strconv.Itoa(i), "sleep", "300")
		sctx, cancel := context.WithCancel(ctx)
		if delay < 0 {
			cancel()
		} else {
			time.AfterFunc(delay, cancel)
		}
		id, err := e.rt.Start(sctx, spec)
		cancel()
		switch {
		case err == nil:
			// Created and started before the cancel: the caller owns it.
			if rerr := e.rt.Remove(ctx, id); rerr != nil {
				t.Fatalf("Remove %s: %v", spec.Name, rerr)
			}
			rounds = append(rounds, round{spec.Name, true})
		case !errors.Is(err, context.Canceled):
			t.Fatalf("Start %s cancelled after %v: %v, want context.Canceled", spec.Name, delay, err)
		default:
			t.Logf("cancelled after %v: %v", delay, err)
			rounds = append(rounds, round{spec.Name, !strings.Contains(err.Error(), "before it was created")})
		}
		if _, ierr := e.rt.cli.ContainerInspect(ctx, spec.Name, client.ContainerInspectOptions{}); ierr == nil {
			t.Errorf("container %s exists after Start returned %v", spec.Name, err)
		}
	}
	if rounds[0].created {
		t.Errorf("a Start whose ctx had ended sent its create")
	}

	// Every event of the test's containers up to now: the engine logs a
	// create before it answers it, and a destroy before it answers the
	// remove.
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res := e.rt.cli.Events(ectx, client.EventsListOptions{
		Since:   strconv.FormatInt(since.Unix(), 10),
		Until:   strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10),
		Filters: make(client.Filters).Add("type", "container").Add("label", "megaflow.test.name="+t.Name()),
	})
	seen := map[string][]events.Action{}
	for done := false; !done; {
		select {
		case m := <-res.Messages:
			n := m.Actor.Attributes["name"]
			seen[n] = append(seen[n], m.Action)
		case err := <-res.Err:
			if err != nil && !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "EOF") {
				t.Fatalf("events: %v", err)
			}
			done = true
		case <-ectx.Done():
			t.Fatal("the engine's events did not end within 30 s")
		}
	}
	for _, r := range rounds {
		got := fmt.Sprint(seen[r.name])
		has := func(a events.Action) bool { return slices.Contains(seen[r.name], a) }
		switch {
		case !r.created && len(seen[r.name]) != 0:
			t.Errorf("%s: events %s, want none (its Start never sent the create)", r.name, got)
		case r.created && !(has(events.ActionCreate) && has(events.ActionDestroy)):
			t.Errorf("%s: events %s by the time Start returned; want a create and its destroy", r.name, got)
		default:
			t.Logf("%s: %s", r.name, got)
		}
	}
}
