package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	dockerclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
)

// enginePaused reports whether the engine holds sandbox s's one container
// paused.
func (e *env) enginePaused(ctx context.Context, s *client.Sandbox) bool {
	e.t.Helper()
	ids := e.containers(s.ID())
	if len(ids) != 1 {
		e.t.Fatalf("sandbox %s has %d containers; want 1", s.ID(), len(ids))
	}
	ins, err := e.cli.ContainerInspect(ctx, ids[0], dockerclient.ContainerInspectOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return ins.Container.State.Paused
}

// wantPausedErr fails the test unless err is the typed error of a call
// refused because sandbox id is paused.
func wantPausedErr(t *testing.T, what, id string, err error) {
	t.Helper()
	if !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSandboxPaused ||
		!strings.Contains(err.Error(), "megaflow sandbox resume "+id) {
		t.Fatalf("%s in paused sandbox %s: %v (reason %q); want FailedPrecondition, %s, saying to resume it with megaflow sandbox resume",
			what, id, err, errs.ReasonOf(err), client.ReasonSandboxPaused)
	}
}

// headsSay checks that every running head's table shows sandbox s in
// state want (once it applied index), and that an exec through each head
// is refused as paused (want PAUSED) or runs (want READY).
func (e *env) headsSay(ctx context.Context, s *client.Sandbox, index uint64, want client.SandboxState) {
	e.t.Helper()
	e.c.WaitApplied(index, 30*time.Second)
	for _, m := range e.c.Members {
		if m.Head() == nil {
			continue
		}
		one, err := client.Dial(ctx, []string{m.GRPCAddr})
		if err != nil {
			e.t.Fatal(err)
		}
		hs, err := one.GetSandbox(ctx, s.ID())
		if err != nil || hs.Info().GetState() != want {
			one.Close()
			e.t.Fatalf("head %s: sandbox %s: %v, %v; want %s", m.ID, s.ID(), hs.Info(), err, want)
		}
		list, err := one.ListSandboxes(ctx, "", false)
		if err != nil || len(list) == 0 {
			one.Close()
			e.t.Fatalf("head %s: ListSandboxes: %v, %v", m.ID, list, err)
		}
		listed := false
		for _, sb := range list {
			if sb.GetId() == s.ID() {
				listed = true
				if sb.GetState() != want {
					e.t.Fatalf("head %s lists sandbox %s %s; want %s", m.ID, s.ID(), sb.GetState(), want)
				}
			}
		}
		if !listed {
			one.Close()
			e.t.Fatalf("head %s does not list live sandbox %s", m.ID, s.ID())
		}
		res, err := hs.Exec(ctx, []string{"echo", m.ID}, client.ExecOptions{})
		one.Close()
		if want == client.SandboxPaused {
			wantPausedErr(e.t, "an exec through head "+m.ID, s.ID(), err)
		} else if err != nil || string(res.Stdout) != m.ID+"\n" {
			e.t.Fatalf("exec through head %s: %+v, %v", m.ID, res, err)
		}
	}
}

// Pause and resume on one worker: the pause freezes the container (the
// engine says so) and every head shows PAUSED and refuses its execs, file
// calls and snapshots with SANDBOX_PAUSED; a second pause is no error;
// the idle timeout does not count while paused (a sandbox idle for less
// time expires meanwhile, the paused one does not) and counts afresh from
// the resume; the resume keeps files and processes, and a second resume
// is no error. A pause while an exec runs is SANDBOX_BUSY; pausing a
// sandbox not started yet, an ended one or an unknown one is refused.
func TestSandboxPauseResume(t *testing.T) {
	t.Parallel() // it waits out idle timeouts of 10 s (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const idle = 10 * time.Second // long enough for a loaded host to exec between checks
	s := e.create(ctx, client.SandboxSpec{IdleTimeout: idle})
	res, err := s.Exec(ctx, sh(`echo kept > /tmp/state; sleep 1000 > /dev/null 2>&1 & echo $! > /tmp/bg`), client.ExecOptions{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("setup exec: %+v, %v", res, err)
	}

	// A pause while an exec runs would freeze it: refused.
	started := make(chan struct{})
	execDone := make(chan error, 1)
	busyCtx, stopBusy := context.WithCancel(ctx)
	defer stopBusy()
	go func() { // owned: stopBusy (or its 10-minute timeout) ends it
		_, err := s.ExecStream(busyCtx, sh(`echo started; sleep 600`), client.ExecOptions{},
			writerFunc(func(p []byte) { closeOnce(started, bytes.Contains(p, []byte("started"))) }), nil)
		execDone <- err
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the busy exec never started")
	}
	if err := s.Pause(ctx); !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSandboxBusy {
		t.Fatalf("pause while an exec runs: %v (reason %q); want FailedPrecondition, %s", err, errs.ReasonOf(err), client.ReasonSandboxBusy)
	}
	if info, _ := s.Refresh(ctx); info.GetState() != client.SandboxReady || e.enginePaused(ctx, s) {
		t.Fatalf("after a refused pause: %s, engine paused %v; want READY, running", info.GetState(), e.enginePaused(ctx, s))
	}
	stopBusy()
	if err := <-execDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled busy exec: %v; want context.Canceled", err)
	}

	// Once the worker has ended the cancelled exec, the pause goes
	// through; a second one is no error.
	testcluster.WaitFor(t, time.Minute, "the worker to end the cancelled exec", func() bool {
		err := s.Pause(ctx)
		if err != nil && errs.ReasonOf(err) != client.ReasonSandboxBusy {
			t.Fatalf("pause: %v", err)
		}
		return err == nil
	})
	if err := s.Pause(ctx); err != nil {
		t.Fatalf("a second pause: %v", err)
	}
	if st := s.Info().GetState(); st != client.SandboxPaused {
		t.Fatalf("after pause: %s; want PAUSED", st)
	}
	pausedAt := s.Info().GetIndex()
	if !e.enginePaused(ctx, s) {
		t.Fatal("the engine says the paused sandbox's container is not paused")
	}
	e.headsSay(ctx, s, pausedAt, client.SandboxPaused)
	if err := s.WriteFile(ctx, "/tmp/x", []byte("x"), 0); err == nil {
		t.Fatal("WriteFile in a paused sandbox succeeded")
	} else {
		wantPausedErr(t, "WriteFile", s.ID(), err)
	}
	_, err = s.ReadFile(ctx, "/tmp/state")
	wantPausedErr(t, "ReadFile", s.ID(), err)
	_, err = s.Snapshot(ctx, "paused")
	wantPausedErr(t, "Snapshot", s.ID(), err)

	// Another sandbox on the same worker, its last exec after the pause:
	// once its idle timeout ends it, the paused one, idle longer, would
	// have ended at the same tick of the worker's idle loop if its timer
	// counted.
	control := e.create(ctx, client.SandboxSpec{IdleTimeout: idle})
	if _, err := control.Exec(ctx, []string{"true"}, client.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if info := e.waitState(ctx, control, client.SandboxExpired, time.Minute); info.GetReasonCode() != wire.ReasonCode_REASON_CODE_SANDBOX_IDLE {
		t.Fatalf("the control sandbox: %s %s; want EXPIRED, SANDBOX_IDLE", info.GetState(), info.GetReasonCode())
	}
	if info, err := s.Refresh(ctx); err != nil || info.GetState() != client.SandboxPaused {
		t.Fatalf("the paused sandbox after the control expired: %v, %v; want PAUSED", info, err)
	}

	for i := range 2 {
		if err := s.Resume(ctx); err != nil {
			t.Fatalf("resume %d: %v", i+1, err)
		}
		if st := s.Info().GetState(); st != client.SandboxReady {
			t.Fatalf("after resume %d: %s; want READY", i+1, st)
		}
	}
	if e.enginePaused(ctx, s) {
		t.Fatal("the engine still holds the resumed sandbox's container paused")
	}
	res, err = s.Exec(ctx, sh(`cat /tmp/state; kill -0 $(cat /tmp/bg) && echo alive`), client.ExecOptions{})
	if err != nil || string(res.Stdout) != "kept\nalive\n" {
		t.Fatalf("after resume: %+v, %v; want the file and the background process kept", res, err)
	}
	e.headsSay(ctx, s, s.Info().GetIndex(), client.SandboxReady)
	// Counted afresh from the resume: the idle timeout ends it now.
	if info := e.waitState(ctx, s, client.SandboxExpired, time.Minute); info.GetReasonCode() != wire.ReasonCode_REASON_CODE_SANDBOX_IDLE {
		t.Fatalf("after the resume: %s %s; want EXPIRED, SANDBOX_IDLE", info.GetState(), info.GetReasonCode())
	}

	// Refusals, changing nothing.
	if err := s.Pause(ctx); !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSandboxExpired {
		t.Fatalf("pause of an expired sandbox: %v; want FailedPrecondition, %s", err, client.ReasonSandboxExpired)
	}
	if err := s.Resume(ctx); !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSandboxExpired {
		t.Fatalf("resume of an expired sandbox: %v; want FailedPrecondition, %s", err, client.ReasonSandboxExpired)
	}
	e.waitGone(s, time.Minute)
}

// A leader change while a sandbox is paused: every remaining head, and
// the killed one once restarted, shows it PAUSED and refuses its execs;
// the new leader resumes it. Paused again, it still ends at its lifetime.
func TestSandboxPauseLeaderChange(t *testing.T) {
	t.Parallel() // it waits for an election and a lifetime (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{})
	if err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	old := e.c.WaitLeader(30 * time.Second)
	e.c.Kill(old)
	next := e.c.WaitLeader(time.Minute)
	if next == old {
		t.Fatalf("head %d still leads after its kill", old)
	}
	e.headsSay(ctx, s, s.Info().GetIndex(), client.SandboxPaused)
	if !e.enginePaused(ctx, s) {
		t.Fatal("the container runs after the leader change")
	}
	e.c.Restart(old)
	e.headsSay(ctx, s, s.Info().GetIndex(), client.SandboxPaused)

	if err := s.Resume(ctx); err != nil {
		t.Fatalf("resume through the new leader: %v", err)
	}
	e.headsSay(ctx, s, s.Info().GetIndex(), client.SandboxReady)
	if e.enginePaused(ctx, s) {
		t.Fatal("the resumed container is still paused")
	}

	// The lifetime keeps running while paused: it ends the paused
	// sandbox, whose container is stopped and removed.
	if err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTimeout(ctx, time.Second); err != nil {
		t.Fatalf("set the lifetime of a paused sandbox: %v", err)
	}
	if info := e.waitState(ctx, s, client.SandboxExpired, time.Minute); info.GetReasonCode() != wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE {
		t.Fatalf("a paused sandbox past its lifetime: %s %s; want EXPIRED, CANCELLED_DEADLINE", info.GetState(), info.GetReasonCode())
	}
	e.waitGone(s, time.Minute)
}

// A worker restarted while its sandbox is paused adopts the container
// paused and keeps its mark (while it is down, the heads refuse the
// sandbox's execs from their tables): it refuses an exec that reaches it
// (SANDBOX_PAUSED), and its idle timer does not count (a control sandbox
// adopted with it expires meanwhile). A pause made on the worker alone (a
// leader that died before committing it) leaves the sandbox READY in the
// table, the worker refusing its calls; a resume repairs it.
func TestSandboxPauseWorkerRestart(t *testing.T) {
	t.Parallel() // it waits out idle timeouts of 10 s (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const idle = 10 * time.Second // long enough for a loaded host to exec between checks
	// The control sandbox is kept busy by an exec until the worker dies,
	// and s by an exec just before its pause: neither goes idle before
	// the restart, however slow this host.
	control := e.create(ctx, client.SandboxSpec{IdleTimeout: idle})
	started := make(chan struct{})
	busyDone := make(chan error, 1)
	go func() { // owned: the worker's kill ends the exec's stream
		_, err := control.ExecStream(ctx, sh(`echo started; sleep 600`), client.ExecOptions{},
			writerFunc(func(p []byte) { closeOnce(started, bytes.Contains(p, []byte("started"))) }), nil)
		busyDone <- err
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the control's busy exec never started")
	}
	s := e.create(ctx, client.SandboxSpec{IdleTimeout: idle})
	if _, err := s.Exec(ctx, []string{"true"}, client.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	e.c.KillWorker(0)
	if err := <-busyDone; !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("the control's exec as its worker died: %v; want Unavailable", err)
	}
	// The heads refuse from their tables alone, the worker unreached.
	_, err := s.Exec(ctx, []string{"true"}, client.ExecOptions{})
	wantPausedErr(t, "an exec while the worker is dead", s.ID(), err)
	e.c.RestartWorker(0)
	wcli := wire.NewSandboxWorkerServiceClient(dialHead(t, e.c.Workers()[0].Worker().SandboxAddr()))
	// execOnWorker runs an exec straight on the worker, past the heads.
	execOnWorker := func(id string) error {
		st, err := wcli.Exec(ctx, &wire.SandboxExecRequest{SandboxId: id, Attempt: 1, Argv: []string{"true"}})
		if err != nil {
			return errs.FromStatus(err)
		}
		for {
			m, err := st.Recv()
			if err != nil {
				return errs.FromStatus(err)
			}
			if m.GetExit() != nil {
				return nil
			}
		}
	}
	var last error
	testcluster.WaitFor(t, time.Minute, "the restarted worker to hold the paused sandbox", func() bool {
		last = execOnWorker(s.ID())
		return errs.ReasonOf(last) == client.ReasonSandboxPaused
	})
	wantPausedErr(t, "an exec on the restarted worker", s.ID(), last)
	if !e.enginePaused(ctx, s) {
		t.Fatal("the restarted worker unpaused the container")
	}
	if info := e.waitState(ctx, control, client.SandboxExpired, time.Minute); info.GetReasonCode() != wire.ReasonCode_REASON_CODE_SANDBOX_IDLE {
		t.Fatalf("the control sandbox: %s %s; want EXPIRED, SANDBOX_IDLE", info.GetState(), info.GetReasonCode())
	}
	wantPausedErr(t, "an exec on the worker after the control expired", s.ID(), execOnWorker(s.ID()))
	if info, err := s.Refresh(ctx); err != nil || info.GetState() != client.SandboxPaused {
		t.Fatalf("after the worker's restart: %v, %v; want PAUSED", info, err)
	}
	if err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Exec(ctx, []string{"echo", "back"}, client.ExecOptions{}); err != nil || string(res.Stdout) != "back\n" {
		t.Fatalf("exec after the resume: %+v, %v", res, err)
	}

	// The worker pauses, and no mark commits: READY in the table, the
	// worker refusing the relayed exec with the same typed error.
	if _, err := wcli.SetPaused(ctx, &wire.SandboxSetPausedRequest{SandboxId: s.ID(), Attempt: 1, Paused: true}); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.Refresh(ctx); info.GetState() != client.SandboxReady || !e.enginePaused(ctx, s) {
		t.Fatalf("after a pause on the worker alone: %s, engine paused %v; want READY, paused", info.GetState(), e.enginePaused(ctx, s))
	}
	_, err = s.Exec(ctx, []string{"true"}, client.ExecOptions{})
	wantPausedErr(t, "an exec relayed to a worker holding the container paused", s.ID(), err)
	if err := s.Resume(ctx); err != nil {
		t.Fatalf("resume of a READY sandbox whose worker holds it paused: %v", err)
	}
	if res, err := s.Exec(ctx, []string{"echo", "repaired"}, client.ExecOptions{}); err != nil || string(res.Stdout) != "repaired\n" {
		t.Fatalf("exec after the repairing resume: %+v, %v", res, err)
	}
}

// writerFunc is an io.Writer calling f with each write.
type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// closeOnce closes ch when cond holds and it is still open.
func closeOnce(ch chan struct{}, cond bool) {
	if !cond {
		return
	}
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// Pause and resume without workers (no Docker needed): a PENDING sandbox
// is refused as not ready, a closed one as CLOSED, an unknown one as not
// found, a malformed id as invalid; nothing changes.
func TestSandboxPauseWithoutWorkers(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cl.CreateSandbox(ctx, client.SandboxSpec{Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(context.Context) error{"pause": s.Pause, "resume": s.Resume} {
		if err := call(ctx); !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSandboxNotReady ||
			!strings.Contains(err.Error(), "PENDING") {
			t.Fatalf("%s of a PENDING sandbox: %v (reason %q); want FailedPrecondition, %s", name, err, errs.ReasonOf(err), client.ReasonSandboxNotReady)
		}
	}
	if info, err := s.Refresh(ctx); err != nil || info.GetState() != client.SandboxPending {
		t.Fatalf("after the refusals: %v, %v; want PENDING", info, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(ctx); !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSandboxClosed {
		t.Fatalf("pause of a closed sandbox: %v; want FailedPrecondition, %s", err, client.ReasonSandboxClosed)
	}
	svc := wire.NewSandboxServiceClient(dialHead(t, c.GRPCAddrs()[0]))
	if _, err := svc.PauseSandbox(ctx, &wire.PauseSandboxRequest{Id: "sbx-nosuchsandbox"}); errs.ReasonOf(errs.FromStatus(err)) != client.ReasonSandboxNotFound {
		t.Fatalf("pause of an unknown sandbox: %v; want NotFound, %s", err, client.ReasonSandboxNotFound)
	}
	if _, err := svc.ResumeSandbox(ctx, &wire.ResumeSandboxRequest{Id: "not-a-sandbox-id"}); !errors.Is(errs.FromStatus(err), errs.ErrInvalidArgument) {
		t.Fatalf("resume of a malformed id: %v; want InvalidArgument", err)
	}
}

// dialHead is a plain gRPC connection to one head (or a worker's sandbox
// address), closed at the end of the test.
func dialHead(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
