package spec

import (
	"bytes"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestSandboxState(t *testing.T) {
	const (
		pending  = wire.SandboxState_SANDBOX_STATE_PENDING
		starting = wire.SandboxState_SANDBOX_STATE_STARTING
		ready    = wire.SandboxState_SANDBOX_STATE_READY
		closed   = wire.SandboxState_SANDBOX_STATE_CLOSED
		expired  = wire.SandboxState_SANDBOX_STATE_EXPIRED
		lost     = wire.SandboxState_SANDBOX_STATE_LOST
		failed   = wire.SandboxState_SANDBOX_STATE_FAILED
		paused   = wire.SandboxState_SANDBOX_STATE_PAUSED
	)
	for _, tc := range []struct {
		task   wire.TaskState
		code   wire.ReasonCode
		want   wire.SandboxState
		paused bool
	}{
		{wire.TaskState_TASK_STATE_PENDING, 0, pending, false},
		{wire.TaskState_TASK_STATE_QUEUED, 0, pending, false},
		{wire.TaskState_TASK_STATE_QUEUED, wire.ReasonCode_REASON_CODE_QUEUED, pending, false},
		{wire.TaskState_TASK_STATE_ASSIGNED, 0, starting, false},
		{wire.TaskState_TASK_STATE_RUNNING, 0, ready, false},
		{wire.TaskState_TASK_STATE_CANCELLED, wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, closed, false},
		{wire.TaskState_TASK_STATE_CANCELLED, 0, closed, false},
		{wire.TaskState_TASK_STATE_CANCELLED, wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE, expired, false},
		{wire.TaskState_TASK_STATE_FAILED, wire.ReasonCode_REASON_CODE_SANDBOX_IDLE, expired, false},
		{wire.TaskState_TASK_STATE_TIMED_OUT, wire.ReasonCode_REASON_CODE_TIMEOUT, expired, false},
		{wire.TaskState_TASK_STATE_FAILED, wire.ReasonCode_REASON_CODE_SANDBOX_LOST, lost, false},
		{wire.TaskState_TASK_STATE_FAILED, wire.ReasonCode_REASON_CODE_WORKER_LOST, lost, false},
		{wire.TaskState_TASK_STATE_FAILED, wire.ReasonCode_REASON_CODE_LEASE_LAPSED, lost, false},
		{wire.TaskState_TASK_STATE_FAILED, wire.ReasonCode_REASON_CODE_START_FAILED, failed, false},
		{wire.TaskState_TASK_STATE_FAILED, wire.ReasonCode_REASON_CODE_EXIT_CODE, failed, false},
		{wire.TaskState_TASK_STATE_FAILED, wire.ReasonCode_REASON_CODE_UNPLACEABLE, failed, false},
		{wire.TaskState_TASK_STATE_SUCCEEDED, 0, failed, false},
		// The pause mark shows only while the task runs.
		{wire.TaskState_TASK_STATE_RUNNING, 0, paused, true},
		{wire.TaskState_TASK_STATE_CANCELLED, wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, closed, true},
		{wire.TaskState_TASK_STATE_CANCELLED, wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE, expired, true},
		{wire.TaskState_TASK_STATE_FAILED, wire.ReasonCode_REASON_CODE_SANDBOX_LOST, lost, true},
		{wire.TaskState_TASK_STATE_ASSIGNED, 0, starting, true},
	} {
		if got := SandboxState(tc.task, tc.code, tc.paused); got != tc.want {
			t.Errorf("SandboxState(%s, %s, paused %v) = %s; want %s", tc.task, tc.code, tc.paused, got, tc.want)
		}
	}
	for s, live := range map[wire.SandboxState]bool{pending: true, starting: true, ready: true, paused: true,
		closed: false, expired: false, lost: false, failed: false} {
		if SandboxLive(s) != live {
			t.Errorf("SandboxLive(%s) = %v; want %v", s, !live, live)
		}
	}
}

func TestSandboxGraph(t *testing.T) {
	id := NewSandboxID(bytes.NewReader(bytes.Repeat([]byte{7}, 16)))
	if err := CheckSandboxID("id", id); err != nil {
		t.Fatal(err)
	}
	g, err := SandboxGraph(&wire.SandboxCreateSpec{Id: id, Image: "busybox", IdleTimeoutSeconds: 30, Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(Normalize(g), DefaultLimits()); err != nil {
		t.Fatalf("the sandbox graph does not validate: %v", err)
	}
	task := g.Tasks[0]
	if g.DeadlineSeconds != SandboxDefaultLifetimeSeconds || task.Name != SandboxTaskName || task.MaxRetries != 0 ||
		task.GetSandbox().GetIdleTimeoutSeconds() != 30 || task.Env["A"] != "1" {
		t.Fatalf("graph %v", g)
	}
	for name, s := range map[string]*wire.SandboxCreateSpec{
		"id":                   {Id: "g-1", Image: "x"},
		"image":                {Id: id},
		"lifetime_seconds":     {Id: id, Image: "x", LifetimeSeconds: SandboxMaxSeconds + 1},
		"idle_timeout_seconds": {Id: id, Image: "x", IdleTimeoutSeconds: -1},
		"working_dir":          {Id: id, Image: "x", WorkingDir: "rel"},
	} {
		_, err := SandboxGraph(s)
		if errs.ClassOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), strings.TrimSuffix(name, "_seconds")) {
			t.Errorf("%s: %v; want InvalidArgument naming it", name, err)
		}
	}
}

func TestCheckSandboxExec(t *testing.T) {
	ok := &wire.SandboxExecRequest{SandboxId: "sbx-abc", Argv: []string{"ls"}}
	if err := CheckSandboxExec(ok); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*wire.SandboxExecRequest{
		"argv":           {SandboxId: "sbx-abc"},
		"sandbox_id":     {SandboxId: "sbx-ABC", Argv: []string{"ls"}},
		"cwd":            {SandboxId: "sbx-abc", Argv: []string{"ls"}, Cwd: "x"},
		"timeout_millis": {SandboxId: "sbx-abc", Argv: []string{"ls"}, TimeoutMillis: -1},
		"stdin":          {SandboxId: "sbx-abc", Argv: []string{"ls"}, Stdin: make([]byte, SandboxMaxStdin+1)},
		"env":            {SandboxId: "sbx-abc", Argv: []string{"ls"}, Env: map[string]string{"A=B": "1"}},
	} {
		err := CheckSandboxExec(r)
		if errs.ClassOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v; want InvalidArgument naming it", name, err)
		}
	}
}
