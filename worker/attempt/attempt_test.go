package attempt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fmtEffects prints effects compactly, times relative to t0.
func fmtEffects(effs []Effect) string {
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "none"
		}
		return "+" + t.Sub(t0).String()
	}
	var parts []string
	for _, e := range effs {
		switch e := e.(type) {
		case StartContainer:
			parts = append(parts, "start(deadline "+rel(e.Deadline)+")")
		case CancelStart:
			parts = append(parts, "cancel-start")
		case WaitContainer:
			parts = append(parts, "wait "+e.ContainerID)
		case StopContainer:
			parts = append(parts, fmt.Sprintf("stop %s grace %s", e.ContainerID, e.Grace))
		case RemoveContainer:
			parts = append(parts, "remove "+e.ContainerID)
		case Report:
			ev := e.Event
			s := "report "
			if e.Final {
				s = "final "
			}
			s += strings.TrimPrefix(ev.Kind.String(), "ATTEMPT_EVENT_KIND_")
			if ev.ContainerId != "" {
				s += " " + ev.ContainerId
			}
			if ev.Kind != wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED {
				s += fmt.Sprintf(" code=%d", ev.ExitCode)
			}
			if ev.OomKilled {
				s += " oom"
			}
			if ev.NotRetryable {
				s += " not-retryable"
			}
			if ev.Reason != "" {
				s += fmt.Sprintf(" reason=%q", ev.Reason)
			}
			if ev.Result != nil {
				s += " result=" + string(ev.Result)
			}
			if ev.Endpoint != "" {
				s += " endpoint=" + ev.Endpoint
			}
			if ev.UnixNanos != 0 {
				s += " at " + rel(time.Unix(0, ev.UnixNanos).UTC())
			}
			parts = append(parts, s)
		case SetTimer:
			parts = append(parts, "timer "+rel(e.At))
		case Forget:
			parts = append(parts, "forget")
		case ProbeReadiness:
			parts = append(parts, "probe")
		case WatchLiveness:
			parts = append(parts, "watch")
		default:
			parts = append(parts, fmt.Sprintf("%T", e))
		}
	}
	return strings.Join(parts, "; ")
}

type step struct {
	at   time.Duration // since t0
	ev   Event
	want string // fmtEffects of the result
}

var (
	errGone  = fmt.Errorf("wait c1: %w", contract.ErrNotFound)
	errDown  = fmt.Errorf("docker: %w", contract.ErrUnavailable)
	errImage = fmt.Errorf("pull: %w", contract.ErrImageNotFound)
)

func TestStep(t *testing.T) {
	key := Key{TaskID: "g/t", Attempt: 2}
	base := Config{Key: key, StopGrace: 10 * time.Second}
	withTimeout := base
	withTimeout.Timeout = 30 * time.Second
	withMem := base
	withMem.MemoryLimit = 32 << 20
	withImage := base
	withImage.Image = "nope:latest"
	service := base
	service.Service = true
	fromStart := withTimeout
	fromStart.TimeoutFromStart = true

	cases := []struct {
		name  string
		cfg   Config
		steps []step
		final State
	}{
		{"success with result", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{time.Second, StartDone{ContainerID: "c1"}, "report STARTED c1 at +1s; wait c1"},
			{5 * time.Second, WaitDone{Exit: contract.Exit{Code: 0}, Result: []byte(`{"r":1}`)}, `final EXITED c1 code=0 result={"r":1} at +5s`},
			{6 * time.Second, Acked{}, "remove c1"},
			{7 * time.Second, RemoveDone{}, "forget"},
		}, Done},
		{"expire stops a running attempt, FAILED not retryable", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, Expire{Reason: "idle"}, ""}, // not running yet: nothing
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, Expire{Reason: "sandbox idle", Code: wire.ReasonCode_REASON_CODE_SANDBOX_IDLE}, "stop c1 grace 10s"},
			{time.Second, Expire{Reason: "again"}, ""},
			{2 * time.Second, StopDone{}, ""},
			{2 * time.Second, WaitDone{Exit: contract.Exit{Code: 143}},
				`final FAILED c1 code=143 not-retryable reason="sandbox idle" at +2s`},
		}, Reported},
		{"non-zero exit keeps no result", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, WaitDone{Exit: contract.Exit{Code: 3, Reason: "exited with code 3"}, Result: []byte(`{}`)},
				`final EXITED c1 code=3 reason="exited with code 3" at +1s`},
		}, Reported},
		{"ignored result line is explained", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, WaitDone{Exit: contract.Exit{Code: 0}, ResultNote: "MEGAFLOW_RESULT line ignored: not valid JSON"},
				`final EXITED c1 code=0 reason="MEGAFLOW_RESULT line ignored: not valid JSON" at +1s`},
		}, Reported},
		{"OOM is a failure naming the limit", withMem, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, WaitDone{Exit: contract.Exit{Code: 137, OOMKilled: true}},
				`final FAILED c1 code=137 oom reason="OOM killed (memory limit 32 MiB)" at +1s`},
			{time.Second, Acked{}, "remove c1"},
			{time.Second, RemoveDone{Err: errDown}, "forget"},
		}, Done},
		{"an OOM kill the runtime inferred says so", withMem, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, WaitDone{Exit: contract.Exit{Code: 137, OOMKilled: true, Reason: "probably OOM killed: a SIGKILL nobody sent"}},
				`final FAILED c1 code=137 oom reason="probably OOM killed: a SIGKILL nobody sent (memory limit 32 MiB)" at +1s`},
		}, Reported},
		{"missing image fails with a clear reason and nothing to remove", withImage, []step{
			{0, Begin{}, "start(deadline none)"},
			{time.Second, StartDone{Err: errImage},
				`final FAILED code=0 not-retryable reason="image \"nope:latest\" not found (pull it on the worker or fix the task's image): pull: image not found" at +1s`},
			{2 * time.Second, Acked{}, "forget"},
		}, Done},
		{"a command that is not found is not retryable", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, WaitDone{Exit: contract.Exit{Code: 127}},
				`final EXITED c1 code=127 not-retryable reason="command not found (exit code 127; fix the task's command or image)" at +1s`},
		}, Reported},
		{"an invalid spec is not retryable", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{Err: fmt.Errorf("process start x: %w: no such file", contract.ErrInvalidSpec)},
				`final FAILED code=0 not-retryable reason="start container: process start x: invalid container spec: no such file" at +0s`},
		}, Reported},
		{"runtime down at start", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{Err: errDown}, `final FAILED code=0 reason="container runtime unavailable: docker: container runtime unavailable" at +0s`},
		}, Reported},
		{"other start error", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{Err: errors.New("bad mount")}, `final FAILED code=0 reason="start container: bad mount" at +0s`},
		}, Reported},
		{"head stops a running attempt", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, StopRequest{Reason: "cancelled by user"}, "stop c1 grace 10s"},
			{time.Second, StopRequest{Reason: "again"}, ""},
			{2 * time.Second, StopDone{}, ""},
			{2 * time.Second, WaitDone{Exit: contract.Exit{Code: 143}}, `final STOPPED c1 code=143 reason="cancelled by user" at +2s`},
			{3 * time.Second, StopRequest{Reason: "late"}, ""},
			{3 * time.Second, Acked{}, "remove c1"},
			{3 * time.Second, RemoveDone{}, "forget"},
		}, Done},
		{"an exit the stop found already there is the attempt's own, with its result", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, StopRequest{Reason: "worker w1 is shutting down"}, "stop c1 grace 10s"},
			{time.Second, StopDone{}, ""},
			{time.Second, WaitDone{Exit: contract.Exit{Code: 0, ExitedFirst: true}, Result: []byte(`{"r":1}`)},
				`final EXITED c1 code=0 result={"r":1} at +1s`},
		}, Reported},
		{"a failure the stop found already there is the attempt's own", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, StopRequest{Reason: "cancel"}, "stop c1 grace 10s"},
			{time.Second, WaitDone{Exit: contract.Exit{Code: 2, Reason: "exited with code 2", ExitedFirst: true}},
				`final EXITED c1 code=2 reason="exited with code 2" at +1s`},
		}, Reported},
		{"exit before the stop returns: remove waits for the stop", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, StopRequest{Reason: "cancel"}, "stop c1 grace 10s"},
			{2 * time.Second, WaitDone{Exit: contract.Exit{Code: 143}}, `final STOPPED c1 code=143 reason="cancel" at +2s`},
			{2 * time.Second, Acked{}, ""},
			{3 * time.Second, StopDone{}, "remove c1"},
			{3 * time.Second, RemoveDone{}, "forget"},
		}, Done},
		{"timeout while running", withTimeout, []step{
			{0, Begin{}, "start(deadline +30s); timer +30s"},
			{time.Second, StartDone{ContainerID: "c1"}, "report STARTED c1 at +1s; wait c1"},
			{29 * time.Second, Tick{}, ""}, // early tick: nothing
			{30 * time.Second, Tick{}, `stop c1 grace 10s; timer none`},
			{31 * time.Second, StopDone{}, ""},
			{31 * time.Second, WaitDone{Exit: contract.Exit{Code: 137}}, `final TIMED_OUT c1 code=137 reason="timed out after 30s" at +31s`},
		}, Reported},
		{"exit before the timeout disarms the timer", withTimeout, []step{
			{0, Begin{}, "start(deadline +30s); timer +30s"},
			{time.Second, StartDone{ContainerID: "c1"}, "report STARTED c1 at +1s; wait c1"},
			{2 * time.Second, WaitDone{Exit: contract.Exit{Code: 0}}, "final EXITED c1 code=0 at +2s; timer none"},
			{40 * time.Second, Tick{}, ""},
		}, Reported},
		{"timeout from the start: the wait for a container does not count", fromStart, []step{
			{0, Begin{}, "start(deadline none)"},
			{time.Minute, Tick{}, ""},
			{time.Minute, StartDone{ContainerID: "c1"}, "report STARTED c1 at +1m0s; wait c1; timer +1m30s"},
			{89 * time.Second, Tick{}, ""},
			{90 * time.Second, Tick{}, "stop c1 grace 10s; timer none"},
			{91 * time.Second, StopDone{}, ""},
			{91 * time.Second, WaitDone{Exit: contract.Exit{Code: 137}}, `final TIMED_OUT c1 code=137 reason="timed out after 30s" at +1m31s`},
		}, Reported},
		{"timeout from the start: a stop while waiting still ends it", fromStart, []step{
			{0, Begin{}, "start(deadline none)"},
			{time.Hour, StopRequest{Reason: "cancelled"}, "cancel-start"},
			{time.Hour, StartDone{Err: errors.New("context canceled")}, `final STOPPED code=0 reason="cancelled" at +1h0m0s`},
		}, Reported},
		{"timeout while starting cancels the start", withTimeout, []step{
			{0, Begin{}, "start(deadline +30s); timer +30s"},
			{30 * time.Second, Tick{}, "cancel-start; timer none"},
			{31 * time.Second, StartDone{Err: errors.New("context canceled")}, `final TIMED_OUT code=0 reason="timed out after 30s" at +31s`},
			{31 * time.Second, Acked{}, "forget"},
		}, Done},
		{"stop while starting; the start still succeeds", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{time.Second, StopRequest{Reason: "superseded by attempt 3"}, "cancel-start"},
			{time.Second, StopRequest{Reason: "twice"}, ""},
			{2 * time.Second, StartDone{ContainerID: "c1"}, "stop c1 grace 10s; wait c1"},
			{3 * time.Second, StopDone{}, ""},
			{3 * time.Second, WaitDone{Exit: contract.Exit{Code: 143}}, `final STOPPED c1 code=143 reason="superseded by attempt 3" at +3s`},
			{3 * time.Second, Acked{}, "remove c1"},
		}, Removing},
		{"service: probed once running, ready reported, then runs on", service, []step{
			{0, Begin{}, "start(deadline none)"},
			{time.Second, StartDone{ContainerID: "c1"}, "report STARTED c1 at +1s; wait c1; probe"},
			{5 * time.Second, ProbeDone{Endpoint: "http://10.0.0.5:30000"}, "report SERVICE_READY c1 code=0 endpoint=http://10.0.0.5:30000 at +5s; watch"},
			{9 * time.Second, WaitDone{Exit: contract.Exit{Code: 137}}, "final EXITED c1 code=137 at +9s"},
			{9 * time.Second, ProbeDone{Endpoint: "http://late:1"}, ""},
		}, Reported},
		{"service: not ready in time is stopped and FAILED", service, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1; probe"},
			{time.Minute, ProbeDone{Err: errors.New("no successful probe within 1m0s")}, "stop c1 grace 10s"},
			{time.Minute, StopDone{}, ""},
			{time.Minute, WaitDone{Exit: contract.Exit{Code: 143}}, `final FAILED c1 code=143 reason="service not ready: no successful probe within 1m0s" at +1m0s`},
		}, Reported},
		{"service: failing its probe once ready is stopped and FAILED", service, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1; probe"},
			{time.Second, ProbeDone{Endpoint: "http://10.0.0.5:30000"}, "report SERVICE_READY c1 code=0 endpoint=http://10.0.0.5:30000 at +1s; watch"},
			{time.Minute, LivenessLost{Err: errors.New("3 probes in a row failed")}, "stop c1 grace 10s"},
			{time.Minute, LivenessLost{Err: errors.New("again")}, ""},
			{time.Minute, StopDone{}, ""},
			{time.Minute, WaitDone{Exit: contract.Exit{Code: 143}}, `final FAILED c1 code=143 reason="service stopped answering its probe: 3 probes in a row failed" at +1m0s`},
		}, Reported},
		{"service: an adopted container is probed again once confirmed", service, []step{
			{0, Adopt{ContainerID: "c1", Running: true}, ""},
			{time.Second, Confirm{}, "wait c1; probe"},
			{2 * time.Second, ProbeDone{Endpoint: "http://10.0.0.5:30000"}, "report SERVICE_READY c1 code=0 endpoint=http://10.0.0.5:30000 at +2s; watch"},
		}, Running},
		{"stop before begin", base, []step{
			{0, StopRequest{Reason: "cancel"}, `final STOPPED code=0 reason="cancel" at +0s`},
			{0, Begin{}, ""},
			{0, Acked{}, "forget"},
		}, Done},
		{"container vanishes while running", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, WaitDone{Err: errGone}, `final FAILED code=0 reason="container disappeared: wait c1: container not found" at +1s`},
			{time.Second, Acked{}, "forget"},
		}, Done},
		{"wait fails: retried with backoff", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, WaitDone{Err: errDown}, "timer +2s"},
			{2 * time.Second, Tick{}, "wait c1; timer none"},
			{2 * time.Second, WaitDone{Err: errDown}, "timer +4s"},
			{4 * time.Second, Tick{}, "wait c1; timer none"},
			{5 * time.Second, WaitDone{Exit: contract.Exit{Code: 1}}, "final EXITED c1 code=1 at +5s"},
		}, Reported},
		{"stop fails: retried; a vanished container ends it", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{time.Second, StopRequest{Reason: "cancel"}, "stop c1 grace 10s"},
			{2 * time.Second, StopDone{Err: errDown}, "timer +3s"},
			{3 * time.Second, Tick{}, "stop c1 grace 10s; timer none"},
			{4 * time.Second, StopDone{Err: fmt.Errorf("stop: %w", contract.ErrNotFound)}, ""},
			{4 * time.Second, WaitDone{Err: errGone}, `final STOPPED code=0 reason="cancel" at +4s`},
			{4 * time.Second, Acked{}, "forget"},
		}, Done},
		{"adopted running container: confirmed", withTimeout, []step{
			{0, Adopt{ContainerID: "c9", Running: true, Deadline: t0.Add(time.Minute)}, ""},
			{time.Second, Tick{}, ""},
			{2 * time.Second, Confirm{}, "wait c9; timer +1m0s"},
			{3 * time.Second, Confirm{}, ""},
			{time.Minute, Tick{}, "stop c9 grace 10s; timer none"},
			{time.Minute, WaitDone{Exit: contract.Exit{Code: 137}}, `final TIMED_OUT c9 code=137 reason="timed out after 30s" at +1m0s`},
		}, Reported},
		{"adopted running container: the head stops it", base, []step{
			{0, Adopt{ContainerID: "c9", Running: true}, ""},
			{time.Second, StopRequest{Reason: "not current"}, "stop c9 grace 10s; wait c9"},
			{2 * time.Second, Confirm{}, ""},
			{2 * time.Second, WaitDone{Exit: contract.Exit{Code: 143}}, `final STOPPED c9 code=143 reason="not current" at +2s`},
			{2 * time.Second, StopDone{}, ""},
			{2 * time.Second, Acked{}, "remove c9"},
			{2 * time.Second, RemoveDone{}, "forget"},
		}, Done},
		{"adopted exited container is waited on, reported and removed", base, []step{
			{0, Adopt{ContainerID: "c9", Deadline: t0.Add(-time.Minute)}, "wait c9"},
			{0, Tick{}, ""},
			{0, WaitDone{Exit: contract.Exit{Code: 0}, Result: []byte(`[1]`)}, "final EXITED c9 code=0 result=[1] at +0s"},
			{0, Acked{}, "remove c9"},
			{0, RemoveDone{}, "forget"},
		}, Done},
		{"late results are ignored", base, []step{
			{0, Begin{}, "start(deadline none)"},
			{0, WaitDone{Exit: contract.Exit{Code: 1}}, ""},
			{0, StopDone{}, ""},
			{0, RemoveDone{}, ""},
			{0, Acked{}, ""},
			{0, Confirm{}, ""},
			{0, StartDone{ContainerID: "c1"}, "report STARTED c1 at +0s; wait c1"},
			{0, StartDone{ContainerID: "c2"}, ""},
		}, Running},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := New(tc.cfg)
			for i, s := range tc.steps {
				got := fmtEffects(m.Step(s.ev, t0.Add(s.at)))
				if got != s.want {
					t.Fatalf("step %d %T%+v:\n got  %s\n want %s", i, s.ev, s.ev, got, s.want)
				}
			}
			if m.State() != tc.final {
				t.Errorf("final state %s, want %s", m.State(), tc.final)
			}
		})
	}
}

func TestStepIsDeterministic(t *testing.T) {
	run := func() string {
		m := New(Config{Key: Key{"g/t", 1}, Timeout: time.Minute, StopGrace: time.Second})
		var out []string
		for i, ev := range []Event{Begin{}, StartDone{ContainerID: "c"}, Tick{}, StopRequest{Reason: "x"}, StopDone{}, WaitDone{Exit: contract.Exit{Code: 1}}, Acked{}, RemoveDone{}} {
			out = append(out, fmtEffects(m.Step(ev, t0.Add(time.Duration(i)*time.Second))))
		}
		return strings.Join(out, "\n")
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("two runs differ:\n%s\n---\n%s", a, b)
	}
}

func TestAccessors(t *testing.T) {
	m := New(Config{Key: Key{"g/t", 4}, Timeout: time.Minute})
	m.Step(Begin{}, t0)
	m.Step(StartDone{ContainerID: "c"}, t0)
	if m.Key().String() != "g/t#4" || m.ContainerID() != "c" || !m.Started() || !m.Deadline().Equal(t0.Add(time.Minute)) || m.State().String() != "running" {
		t.Fatalf("accessors: %v %q %v %v %s", m.Key(), m.ContainerID(), m.Started(), m.Deadline(), m.State())
	}
	if s := State(99).String(); s != "state(99)" {
		t.Errorf("State(99) = %q", s)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 512: "512 B", 1024: "1 KiB", 32 << 20: "32 MiB", 3 << 29: "1.5 GiB", 1 << 40: "1 TiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// Retryable is false for what a retry cannot fix, true for the rest.
func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("docker start: %w", contract.ErrImageNotFound), false},
		{fmt.Errorf("docker start: %w", contract.ErrInvalidSpec), false},
		{fmt.Errorf("GPU check refused the start (%w): device gone", ErrNotRetryable), false},
		{fmt.Errorf("docker start: %w", contract.ErrUnavailable), true},
		{context.DeadlineExceeded, true},
		{errors.New("bad mount"), true},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Expire's final event carries its code (the head's SANDBOX_IDLE).
func TestExpireCarriesItsCode(t *testing.T) {
	m := New(Config{Key: Key{TaskID: "sbx-a/box", Attempt: 1}, StopGrace: time.Second})
	m.Step(Begin{}, t0)
	m.Step(StartDone{ContainerID: "c1"}, t0)
	m.Step(Expire{Reason: "idle", Code: wire.ReasonCode_REASON_CODE_SANDBOX_IDLE}, t0)
	effs := m.Step(WaitDone{Exit: contract.Exit{Code: 143}}, t0.Add(time.Second))
	for _, e := range effs {
		if r, ok := e.(Report); ok && r.Final {
			if r.Event.GetReasonCode() != wire.ReasonCode_REASON_CODE_SANDBOX_IDLE || !r.Event.GetNotRetryable() ||
				r.Event.GetKind() != wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED {
				t.Fatalf("final event %v; want FAILED, SANDBOX_IDLE, not retryable", r.Event)
			}
			return
		}
	}
	t.Fatalf("no final event in %s", fmtEffects(effs))
}
