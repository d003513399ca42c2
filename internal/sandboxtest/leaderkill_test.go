package sandboxtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// The leader is killed (as kill -9 would) while 50 exec loops step 20
// sandboxes, and a sandbox is being created. Each exec appends its own
// token to a file of its sandbox, and no exec is ever retried. Afterwards:
// no sandbox is lost (each still READY on its one attempt), every exec
// either completed or failed with a retryable error (Unavailable), every
// acknowledged token is in its file exactly once and no token at all more
// than once, and the sandbox created across the kill exists once and works.
func TestSandboxLeaderKillDuringExecLoops(t *testing.T) {
	const (
		sandboxes = 20
		loops     = 50
		before    = 1 // acknowledged execs per loop before the kill
		after     = 1 // and after it
	)
	// Raft's production timing and a 30 s worker lease: 50 exec loops
	// under -race load a 2-core machine enough that the tests' fast Raft
	// timeouts make leaders step down on their own, again and again, and a
	// worker can then go 10 s without reaching a leader. What this test
	// checks is one leader's death, not a cluster without one.
	e := newEnvWith(t, 2, func(cfg *head.Config) {
		cfg.Fast = false
		cfg.Lease = lease.Config{Duration: 30 * time.Second, Margin: 5 * time.Second}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	began := time.Now()
	boxes := make([]*client.Sandbox, sandboxes)
	var wg sync.WaitGroup
	createErrs := make([]error, sandboxes)
	for i := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			boxes[i], createErrs[i] = e.cl.CreateSandbox(ctx, client.SandboxSpec{Image: e.image, CPUMillis: 300, MemoryBytes: 64 << 20, WaitReady: 2 * time.Minute})
		}()
	}
	wg.Wait()
	for i, err := range createErrs {
		if err != nil {
			t.Fatalf("CreateSandbox %d: %v", i, err)
		}
		if st := boxes[i].Info().GetState(); st != client.SandboxReady {
			t.Fatalf("sandbox %s is %s; want READY", boxes[i].ID(), st)
		}
	}

	// Each loop's record: tokens acknowledged (exit 0) and tokens whose
	// exec failed (it may or may not have run).
	type record struct {
		mu            sync.Mutex
		acked, failed []string
		// exited: tokens of execs that completed with a non-zero exit
		// (none of this script's own; the engine's 126 "cannot exec in
		// a stopped state", seen from runc on a loaded host, is one).
		exited     []string
		exitMsg    string
		ackedAfter int
		otherErr   error
	}
	// One client per head, each calling its head first (the others after
	// it, in order, when it does not answer): the loops spread over every
	// head, so the execs relayed by the leader die with it.
	addrs := e.c.GRPCAddrs()
	handles := make([][]*client.Sandbox, len(addrs))
	for i := range addrs {
		cl, err := client.Dial(ctx, append(slices.Clone(addrs[i:]), addrs[:i]...), client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for _, b := range boxes {
			h, err := cl.GetSandbox(ctx, b.ID())
			if err != nil {
				t.Fatalf("GetSandbox %s through head %s: %v", b.ID(), addrs[i], err)
			}
			handles[i] = append(handles[i], h)
		}
	}
	t.Logf("%d sandboxes READY after %v", sandboxes, time.Since(began).Round(time.Millisecond))

	recs := make([]*record, loops)
	var killed atomic.Bool
	stop := make(chan struct{})
	var lwg sync.WaitGroup
	for l := range loops {
		recs[l] = &record{}
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			r, s := recs[l], handles[l%len(handles)][l%sandboxes]
			// An agent's pace: one exec per loop every 250 ms at most
			// (an agent thinks between steps), so that 50 loops do not
			// starve the heads of the CPU.
			pace := time.NewTicker(250 * time.Millisecond)
			defer pace.Stop()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-pace.C:
				}
				tok := fmt.Sprintf("L%d-%d", l, n)
				res, err := s.Exec(ctx, sh(`echo "$T" >> /tmp/tokens`), client.ExecOptions{Env: map[string]string{"T": tok}, Timeout: time.Minute})
				r.mu.Lock()
				switch {
				case err == nil && res.ExitCode == 0:
					r.acked = append(r.acked, tok)
					if killed.Load() {
						r.ackedAfter++
					}
				case err == nil:
					r.exited = append(r.exited, tok)
					r.exitMsg = fmt.Sprintf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
				case errs.ClassOf(err) == errs.Unavailable:
					r.failed = append(r.failed, tok)
				case ctx.Err() != nil:
				default:
					if r.otherErr == nil {
						r.otherErr = fmt.Errorf("exec %s: result %+v, error %v (class %v)", tok, res, err, errs.ClassOf(err))
					}
				}
				r.mu.Unlock()
			}
		}()
	}
	stopLoops := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		lwg.Wait()
	}
	defer stopLoops()
	progress := func(after bool, want int) func() bool {
		return func() bool {
			for _, r := range recs {
				r.mu.Lock()
				n := len(r.acked)
				if after {
					n = r.ackedAfter
				}
				bad := r.otherErr
				r.mu.Unlock()
				if bad != nil {
					t.Fatal(bad)
				}
				if n < want {
					return false
				}
			}
			return true
		}
	}
	testcluster.WaitFor(t, time.Minute, fmt.Sprintf("each of %d exec loops to complete %d execs", loops, before), progress(false, before))

	// A create in flight across the kill, retried by the client (same id).
	extra := make(chan error, 1)
	var extraBox *client.Sandbox
	go func() {
		var err error
		extraBox, err = e.cl.CreateSandbox(ctx, client.SandboxSpec{Image: e.image, CPUMillis: 300, MemoryBytes: 64 << 20, WaitReady: 2 * time.Minute})
		extra <- err
	}()
	leader := e.c.WaitLeader(10 * time.Second)
	t.Logf("killing the leader, head %d, after %v", leader, time.Since(began).Round(time.Millisecond))
	killed.Store(true)
	e.c.Kill(leader)
	newLeader := e.c.WaitLeader(time.Minute)
	t.Logf("head %d leads after %v", newLeader, time.Since(began).Round(time.Millisecond))
	if newLeader == leader {
		t.Fatalf("head %d still leads after its kill", leader)
	}
	testcluster.WaitFor(t, 2*time.Minute, fmt.Sprintf("each of %d exec loops to complete %d execs after the leader's kill", loops, after), progress(true, after))
	stopLoops()

	select {
	case err := <-extra:
		if err != nil {
			t.Fatalf("CreateSandbox across the leader's kill: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("CreateSandbox across the leader's kill did not return")
	}
	if res, err := extraBox.Exec(ctx, []string{"true"}, client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in the sandbox created across the kill: %+v, %v", res, err)
	}
	if n := len(e.containers(extraBox.ID())); n != 1 {
		t.Fatalf("the sandbox created across the kill has %d containers; want 1", n)
	}

	// Count every token in its sandbox's file.
	seen := map[string]int{}
	for _, s := range boxes {
		info, err := s.Refresh(ctx)
		if err != nil || info.GetState() != client.SandboxReady {
			t.Fatalf("sandbox %s after the leader's kill: %v, %v; want READY", s.ID(), info, err)
		}
		task, _, err := e.cl.GetTask(ctx, spec.SandboxTaskID(s.ID()), client.ReadOptions{})
		if err != nil || len(task.GetAttempts()) != 1 {
			t.Fatalf("sandbox %s's task: %v, %v; want exactly 1 attempt", s.ID(), task, err)
		}
		b, err := s.ReadFile(ctx, "/tmp/tokens")
		if err != nil {
			t.Fatalf("reading sandbox %s's tokens: %v", s.ID(), err)
		}
		for _, tok := range strings.Fields(string(b)) {
			seen[tok]++
		}
	}
	var acked, failed, failedRan, exited int
	for l, r := range recs {
		for _, tok := range r.acked {
			acked++
			if seen[tok] != 1 {
				t.Errorf("loop %d: acknowledged exec %s ran %d times; want exactly once", l, tok, seen[tok])
			}
		}
		for _, tok := range r.exited {
			exited++
			t.Logf("loop %d: exec %s completed with %s", l, tok, r.exitMsg)
		}
		for _, tok := range r.failed {
			failed++
			if seen[tok] > 0 {
				failedRan++
			}
		}
	}
	for tok, n := range seen {
		if n > 1 {
			t.Errorf("token %s is in its sandbox %d times; want at most once", tok, n)
		}
	}
	if failed == 0 {
		// Not an error of the system, but the test did not test what it
		// says: every exec in flight through the killed leader must fail.
		t.Logf("no exec failed across the leader's kill (none was in flight through it)")
	}
	t.Logf("%d execs acknowledged, %d failed Unavailable (%d of those had run), %d exited non-zero; leader head %d killed, head %d leads; %v in all",
		acked, failed, failedRan, exited, leader, newLeader, time.Since(began).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("the test ran out of time: %v", ctx.Err())
	}
}
