package process

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// A task that starts a process in a session of its own (setsid) and so
// outside its process group loses it when it is stopped, when it ends by
// itself, and when it is removed: the process runtime kills every process
// that carries the task's marker, not only the group (issue 18, finding
// 10: `setsid sleep 778 &` survived its cancel).
func TestSetsidDescendantsEndWithTheTask(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		name  string
		sleep string
		end   func(t *testing.T, id string)
	}{
		{"stopped", uniqueSleep(0), func(t *testing.T, id string) {
			if err := r.Stop(ctx, id, time.Second); err != nil {
				t.Fatal(err)
			}
		}},
		{"ended by itself", uniqueSleep(1), func(t *testing.T, id string) { wait(t, r, id) }},
		{"removed", uniqueSleep(2), func(t *testing.T, id string) {
			if err := r.Remove(ctx, id); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script := "setsid sleep " + c.sleep + " & setsid sh -c 'sleep " + c.sleep + " & sleep " + c.sleep + "' & sleep 300"
			if c.name == "ended by itself" {
				script = "setsid sleep " + c.sleep + " & setsid sh -c 'sleep " + c.sleep + " & sleep " + c.sleep + "' & sleep 2"
			}
			id, err := r.Start(ctx, contract.Spec{Command: []string{"sh", "-c", script}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Remove(ctx, id) })
			eventually(t, "3 detached sleeps running", func() bool { return count("sleep", c.sleep) == 3 })
			c.end(t, id)
			eventually(t, "no sleep "+c.sleep+" left", func() bool { return count("sleep", c.sleep) == 0 })
		})
	}
}

// uniqueSleep is a sleep duration (seconds) no other test run on this
// machine uses, so that counting "sleep N" processes sees only ours.
func uniqueSleep(i int) string { return strconv.Itoa(1_000_000 + 3*os.Getpid() + i) }
