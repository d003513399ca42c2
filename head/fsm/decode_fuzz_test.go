package fsm

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// seedCommands is one command of each op, for the fuzz seeds and the
// table test.
func seedCommands() map[Op]proto.Message {
	return map[Op]proto.Message{
		OpSubmitGraph: &wire.SubmitGraphCommand{Header: &wire.GraphSpec{Id: "g", Tenant: "t"}, Tasks: []*wire.TaskSpec{
			{Name: "a", Image: "img", Command: []string{"true"}, Env: map[string]string{"K": "v"}}}, Chunks: 1, TaskCount: 1},
		OpCancel:       &wire.CancelCommand{GraphId: "g", TaskId: "g/a", Reason: "why", UnixNanos: 5},
		OpDropStaged:   &wire.DropStagedCommand{},
		OpWorkerUpsert: &wire.WorkerUpsertCommand{Info: &wire.WorkerInfo{Id: "w1", Capacity: &wire.Resources{CpuMillis: 1000}}},
		OpWorkerDown:   &wire.WorkerDownCommand{WorkerId: "w1", Reason: "gone"},
		OpPlan:         &wire.PlanCommand{},
		OpTaskEvents:   &wire.TaskEventsCommand{},
		OpAttemptsLost: &wire.AttemptsLostCommand{},
		OpSetQuota:     &wire.SetQuotaCommand{Quota: &wire.Quota{Tenant: "t", MaxRunning: 3}},
		OpFailQueued:   &wire.FailQueuedCommand{TaskIds: []string{"g/a"}, Reasons: []string{"r"}},
		OpPoolWarm:     &wire.PoolWarmCommand{},
		OpGpuHealth:    &wire.GpuHealthCommand{},
		OpDeleteGraph:  &wire.DeleteGraphCommand{GraphId: "g"},
		OpSetClusterID: wrapperspb.UInt64(0xabc),
		OpSetRules:     wrapperspb.UInt64(1),
		OpSnapshotAdd: &wire.SnapshotAddCommand{MaxPerTenant: 2, Snapshot: &wire.Snapshot{Id: "snap-a1", Tenant: "t", SandboxId: "sbx-a",
			WorkerId: "w1", Image: "megaflow-snapshot:snap-a1"}},
		OpSnapshotDelete:     &wire.SnapshotDeleteCommand{Id: "snap-a1"},
		OpSandboxSetDeadline: &wire.SandboxSetDeadlineCommand{GraphId: "sbx-a", DeadlineSeconds: 60, UnixNanos: 5},
		OpSandboxPause:       &wire.SandboxPauseCommand{GraphId: "sbx-a", Attempt: 1, Paused: true, UnixNanos: 5},
		OpSetAdmissionPolicy: &wire.SetAdmissionPolicyCommand{Policy: &wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"host"}}, UnixNanos: 5},
		OpArchiveGraphs:      &wire.ArchiveGraphsCommand{GraphIds: []string{"g"}, DropIds: []string{"h"}, UnixNanos: 5},
		OpTokenCreate:        &wire.TokenCreateCommand{Token: &wire.Token{Accessor: "0123456789abcdef", Role: wire.TokenRole_TOKEN_ROLE_ADMIN}, Bootstrap: true},
		OpTokenRevoke:        &wire.TokenRevokeCommand{Accessor: "0123456789abcdef", UnixNanos: 6},
	}
}

// Every op has a command type, and every command type an op.
func TestEveryOpDecodes(t *testing.T) {
	seeds := seedCommands()
	if len(commands) != len(opNames) || len(seeds) != len(opNames) {
		t.Fatalf("%d ops named, %d with a command type, %d seeds", len(opNames), len(commands), len(seeds))
	}
	for op, cmd := range seeds {
		b, err := Encode(op, cmd)
		if err != nil {
			t.Fatal(err)
		}
		gotOp, got, err := DecodeEntry(b)
		if err != nil || gotOp != op || !proto.Equal(got, cmd) {
			t.Errorf("%s: decoded %s %v, %v", op, gotOp, got, err)
		}
	}
	for name, data := range map[string][]byte{
		"empty entry":     nil,
		"unknown op":      {0x7f, 1, 2},
		"corrupt payload": {byte(OpCancel), 0xff, 0xff},
		"invalid UTF-8":   {byte(OpCancel), 0x0a, 0x01, 0xff},
	} {
		if _, cmd, err := DecodeEntry(data); !errors.Is(err, errs.ErrInternal) || cmd != nil {
			t.Errorf("%s: %v %v, want an Internal error", name, cmd, err)
		}
	}
	if op, cmd, err := DecodeEntry([]byte{byte(OpIgnorable | 0x05), 1}); op != OpIgnorable|0x05 || cmd != nil || err != nil {
		t.Errorf("ignorable unknown op: %v %v %v", op, cmd, err)
	}
}

// FuzzDecodeEntry: DecodeEntry never panics; it returns an error, an
// ignorable unknown op, or a command of the op's type that encodes back
// to an entry decoding to the same command.
func FuzzDecodeEntry(f *testing.F) {
	for op, cmd := range seedCommands() {
		b, err := Encode(op, cmd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{byte(OpIgnorable | 0x05), 1, 2})
	f.Add([]byte{byte(OpCancel), 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		op, cmd, err := DecodeEntry(data)
		switch {
		case err != nil:
			if cmd != nil || !errors.Is(err, errs.ErrInternal) {
				t.Fatalf("error %v with command %v", err, cmd)
			}
		case cmd == nil:
			if _, known := commands[op]; known || op&OpIgnorable == 0 {
				t.Fatalf("op %s: no command and no error", op)
			}
		default:
			if want := commands[op]().ProtoReflect().Descriptor(); cmd.ProtoReflect().Descriptor() != want {
				t.Fatalf("op %s decoded to %T", op, cmd)
			}
			b, err := Encode(op, cmd)
			if err != nil {
				t.Fatalf("re-encode %s: %v", op, err)
			}
			op2, cmd2, err := DecodeEntry(b)
			if err != nil || op2 != op || !proto.Equal(cmd, cmd2) {
				t.Fatalf("%s: round trip gave %s %v, %v", op, op2, cmd2, err)
			}
		}
	})
}
