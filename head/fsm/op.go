package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Op is the first byte of a log entry: which command follows. Ops are
// append-only: never renumber or reuse one.
type Op uint8

// The ops. An op with OpIgnorable set that this version does not know is
// skipped, so that a leader on a newer version may propose optional ops
// during a rolling upgrade; an unknown op without it stops the head.
const (
	// OpSubmitGraph carries a wire.SubmitGraphCommand.
	OpSubmitGraph Op = 1
	// OpCancel carries a wire.CancelCommand.
	OpCancel Op = 2
	// OpDropStaged carries a wire.DropStagedCommand.
	OpDropStaged Op = 3
	// OpWorkerUpsert carries a wire.WorkerUpsertCommand.
	OpWorkerUpsert Op = 4
	// OpWorkerDown carries a wire.WorkerDownCommand.
	OpWorkerDown Op = 5
	// OpPlan carries a wire.PlanCommand.
	OpPlan Op = 6
	// OpTaskEvents carries a wire.TaskEventsCommand.
	OpTaskEvents Op = 7
	// OpAttemptsLost carries a wire.AttemptsLostCommand.
	OpAttemptsLost Op = 8
	// OpSetQuota carries a wire.SetQuotaCommand.
	OpSetQuota Op = 9
	// OpFailQueued carries a wire.FailQueuedCommand.
	OpFailQueued Op = 10
	// OpPoolWarm carries a wire.PoolWarmCommand (ops 15-17 are the
	// scheduling branch's range).
	OpPoolWarm Op = 15
	// OpGpuHealth carries a wire.GpuHealthCommand.
	OpGpuHealth Op = 16
	// OpDeleteGraph carries a wire.DeleteGraphCommand.
	OpDeleteGraph Op = 11
	// OpSetClusterID carries a wrapperspb.UInt64Value: the cluster id the
	// leader chose (nonzero), set unless one is set already
	// (state.Txn.SetClusterID). The result is the cluster's id, a uint64.
	OpSetClusterID Op = 18
	// OpSetRules carries a wrapperspb.UInt64Value: the rules version the
	// entries after it apply under (rules.go). The result is the version
	// in force afterwards, a uint64.
	OpSetRules Op = 19
	// OpSnapshotAdd carries a wire.SnapshotAddCommand (rules 3).
	OpSnapshotAdd Op = 20
	// OpSnapshotDelete carries a wire.SnapshotDeleteCommand (rules 3).
	OpSnapshotDelete Op = 21
	// OpSandboxPause carries a wire.SandboxPauseCommand (rules 4). The
	// result is whether it changed the table, a bool.
	OpSandboxPause Op = 22
	// OpSandboxSetDeadline carries a wire.SandboxSetDeadlineCommand
	// (rules 3).
	OpSandboxSetDeadline Op = 23
	// OpSetAdmissionPolicy carries a wire.SetAdmissionPolicyCommand
	// (rules 5). The result is a SetAdmissionPolicyResult.
	OpSetAdmissionPolicy Op = 24
	// OpArchiveGraphs carries a wire.ArchiveGraphsCommand (rules 5). The
	// result is an *ArchiveGraphsResult.
	OpArchiveGraphs Op = 25
	// OpTokenCreate carries a wire.TokenCreateCommand (rules 6).
	OpTokenCreate Op = 26
	// OpTokenRevoke carries a wire.TokenRevokeCommand (rules 6).
	OpTokenRevoke Op = 27

	// OpIgnorable is the bit that marks an op safe to skip when unknown.
	OpIgnorable Op = 0x80
)

var opNames = map[Op]string{
	OpSubmitGraph:        "SubmitGraph",
	OpCancel:             "Cancel",
	OpDropStaged:         "DropStaged",
	OpWorkerUpsert:       "WorkerUpsert",
	OpWorkerDown:         "WorkerDown",
	OpPlan:               "Plan",
	OpTaskEvents:         "TaskEvents",
	OpAttemptsLost:       "AttemptsLost",
	OpSetQuota:           "SetQuota",
	OpFailQueued:         "FailQueued",
	OpPoolWarm:           "PoolWarm",
	OpGpuHealth:          "GpuHealth",
	OpDeleteGraph:        "DeleteGraph",
	OpSetClusterID:       "SetClusterID",
	OpSetRules:           "SetRules",
	OpSnapshotAdd:        "SnapshotAdd",
	OpSnapshotDelete:     "SnapshotDelete",
	OpSandboxSetDeadline: "SandboxSetDeadline",
	OpSandboxPause:       "SandboxPause",
	OpSetAdmissionPolicy: "SetAdmissionPolicy",
	OpArchiveGraphs:      "ArchiveGraphs",
	OpTokenCreate:        "TokenCreate",
	OpTokenRevoke:        "TokenRevoke",
}

// String names the op, e.g. "SubmitGraph", or "op(131)" if unknown.
func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Encode builds a log entry: op followed by msg's protobuf encoding. The
// leader calls it before raft.Apply, from any goroutine. It returns an
// InvalidArgument error for op 0 or a message that cannot be encoded.
func Encode(op Op, msg proto.Message) ([]byte, error) {
	if op == 0 {
		return nil, errs.New(errs.InvalidArgument, "fsm: encode: op 0 is not an op")
	}
	b := make([]byte, 1, 1+proto.Size(msg))
	b[0] = byte(op)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, msg)
	if err != nil {
		return nil, errs.New(errs.InvalidArgument, "fsm: encode %s: %v", op, err)
	}
	return b, nil
}

// commands returns a new, empty command of each op's type.
var commands = map[Op]func() proto.Message{
	OpSubmitGraph:        func() proto.Message { return &wire.SubmitGraphCommand{} },
	OpCancel:             func() proto.Message { return &wire.CancelCommand{} },
	OpDropStaged:         func() proto.Message { return &wire.DropStagedCommand{} },
	OpWorkerUpsert:       func() proto.Message { return &wire.WorkerUpsertCommand{} },
	OpWorkerDown:         func() proto.Message { return &wire.WorkerDownCommand{} },
	OpPlan:               func() proto.Message { return &wire.PlanCommand{} },
	OpTaskEvents:         func() proto.Message { return &wire.TaskEventsCommand{} },
	OpAttemptsLost:       func() proto.Message { return &wire.AttemptsLostCommand{} },
	OpSetQuota:           func() proto.Message { return &wire.SetQuotaCommand{} },
	OpFailQueued:         func() proto.Message { return &wire.FailQueuedCommand{} },
	OpPoolWarm:           func() proto.Message { return &wire.PoolWarmCommand{} },
	OpGpuHealth:          func() proto.Message { return &wire.GpuHealthCommand{} },
	OpDeleteGraph:        func() proto.Message { return &wire.DeleteGraphCommand{} },
	OpSetClusterID:       func() proto.Message { return &wrapperspb.UInt64Value{} },
	OpSetRules:           func() proto.Message { return &wrapperspb.UInt64Value{} },
	OpSnapshotAdd:        func() proto.Message { return &wire.SnapshotAddCommand{} },
	OpSnapshotDelete:     func() proto.Message { return &wire.SnapshotDeleteCommand{} },
	OpSandboxSetDeadline: func() proto.Message { return &wire.SandboxSetDeadlineCommand{} },
	OpSandboxPause:       func() proto.Message { return &wire.SandboxPauseCommand{} },
	OpSetAdmissionPolicy: func() proto.Message { return &wire.SetAdmissionPolicyCommand{} },
	OpArchiveGraphs:      func() proto.Message { return &wire.ArchiveGraphsCommand{} },
	OpTokenCreate:        func() proto.Message { return &wire.TokenCreateCommand{} },
	OpTokenRevoke:        func() proto.Message { return &wire.TokenRevokeCommand{} },
}

// DecodeEntry decodes a log entry made by Encode into its op and command
// (a *wire.SubmitGraphCommand for OpSubmitGraph, and so on). An unknown op
// with OpIgnorable set decodes to (op, nil, nil): the FSM skips it. Any
// other input returns an errs.Internal error and never panics: an empty
// entry, an unknown op without OpIgnorable (a head older than the
// leader), or a payload that is not the op's command in protobuf (bad
// wire format, invalid UTF-8 in a string). The FSM's Apply turns such an
// error into a panic: the entry was committed, so the log is corrupt and
// the head must stop rather than diverge from the others. It is a pure
// function, safe for concurrent use; FuzzDecodeEntry checks it on garbage.
func DecodeEntry(data []byte) (Op, proto.Message, error) {
	if len(data) == 0 {
		return 0, nil, errs.New(errs.Internal, "fsm: empty log entry")
	}
	op := Op(data[0])
	newCmd, ok := commands[op]
	if !ok {
		if op&OpIgnorable != 0 {
			return op, nil, nil
		}
		return op, nil, errs.New(errs.Internal, "fsm: unknown op %d; is this head older than the leader?", uint8(op))
	}
	cmd := newCmd()
	if err := proto.Unmarshal(data[1:], cmd); err != nil {
		return op, nil, errs.New(errs.Internal, "fsm: decode %s: %v", op, err)
	}
	return op, cmd, nil
}
