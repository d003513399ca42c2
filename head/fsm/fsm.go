package fsm

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Config configures an FSM.
type Config struct {
	// EventRingSize is how many of the most recent events the FSM keeps for
	// Watch streams, 1 to 10,000,000. Each costs about 200 bytes.
	EventRingSize int
}

// DefaultConfig returns the defaults: a ring of 100,000 events.
func DefaultConfig() Config { return Config{EventRingSize: 100_000} }

// Validate reports the first field out of bounds, naming it and the bound.
func (c Config) Validate() error {
	if c.EventRingSize < 1 || c.EventRingSize > 10_000_000 {
		return errs.New(errs.InvalidArgument, "fsm: EventRingSize %d: must be 1 to 10,000,000", c.EventRingSize)
	}
	return nil
}

// FSM is the head's Raft state machine. Raft calls Apply, ApplyBatch,
// Snapshot and Restore on its FSM goroutine, one at a time; View,
// EventsAfter, Changed, WaitForIndex and AppliedIndex may be called from any
// goroutine at any time.
type FSM struct {
	store *state.Store

	// mu guards the event ring, the applied index and the change channel.
	mu      sync.Mutex
	ring    ring
	applied uint64
	// changed is closed after each apply or restore and replaced.
	changed chan struct{}
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// New returns an FSM with an empty table. The head creates one and hands it
// to raft.NewRaft.
func New(cfg Config) (*FSM, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &FSM{
		store:   state.NewStore(),
		ring:    newRing(cfg.EventRingSize),
		changed: make(chan struct{}),
	}, nil
}

// View returns an immutable view of the table as of the last applied entry,
// for reads from any goroutine.
func (f *FSM) View() *state.View { return f.store.Snapshot() }

// Apply applies one committed log entry. Raft calls it on the FSM goroutine
// for LogCommand entries. It returns a result (SubmitResult, CancelResult,
// DropStagedResult, WorkerUpsertResult, WorkerDownResult, PlanResult,
// TaskEventsResult, AttemptsLostResult, SetQuotaResult,
// FailQueuedResult, SnapshotAddResult, SnapshotDeleteResult,
// SetAdmissionPolicyResult, ArchiveGraphsResult, a *wire.Token for
// OpTokenCreate (the row as stored), a bool for OpTokenRevoke, a bool for
// OpSandboxSetDeadline and OpSandboxPause; a uint64 for OpSetClusterID and OpSetRules), an *errs.Error for a command refused at apply time, or
// nil for an ignorable op this version does not know. It panics on an entry
// that cannot be decoded, an unknown op without OpIgnorable, or an
// OpSetRules above RulesCurrent (ErrRulesTooNew): the log is corrupt or from
// a newer version, and going on would diverge.
func (f *FSM) Apply(l *raft.Log) any {
	txn := f.store.WriteTxn(l.Index)
	defer func() {
		if r := recover(); r != nil {
			abortAndPanic(txn, r)
		}
	}()
	res := f.apply(txn, l.Index, l.Data)
	events := txn.TakeEvents()
	txn.Commit()
	f.publish(l.Index, events)
	return res
}

// ApplyBatch applies several committed entries in one table transaction
// (several once it wrote maxBatchTaskWrites task rows), each stamped with
// its own index, and returns one result per entry (nil for
// entries that are not LogCommand). Raft calls it on the FSM goroutine in
// place of Apply. Readers see each transaction's entries at once.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	results := make([]any, len(logs))
	var txn *state.Txn
	var last uint64
	commit := func() {
		events := txn.TakeEvents()
		txn.Commit()
		f.publish(last, events)
		txn = nil
	}
	defer func() {
		if r := recover(); r != nil {
			abortAndPanic(txn, r)
		}
	}()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if txn == nil {
			txn = f.store.WriteTxn(l.Index)
		} else {
			txn.SetIndex(l.Index)
		}
		results[i] = f.apply(txn, l.Index, l.Data)
		last = l.Index
		if txn.TaskWrites() >= maxBatchTaskWrites {
			commit()
		}
	}
	if txn != nil {
		commit()
	}
	return results
}

// maxBatchTaskWrites is how many task rows ApplyBatch writes in one
// transaction before it commits and goes on in a new one (between two
// entries, never inside one). Raft hands over the entries that piled up
// while the FSM was busy; past about 8,192 changed tree nodes (a few
// hundred task moves) go-memdb's commit walks every index of the table
// (state.Txn.TaskWrites), so one transaction for a large batch made a
// head that fell behind slower the further behind it was (the soak of
// 2026-12-06: 31% of a head's CPU in that walk once it lagged).
const maxBatchTaskWrites = 512

// abortAndPanic discards txn's changes (nil: none open) and releases the
// table's write lock when an apply panicked with r (an entry this head
// cannot apply), then panics on: the table stays as it was before the
// transaction's entries (under ApplyBatch, the batch's earlier
// transactions stay committed), for whoever reads it while the head
// stops.
func abortAndPanic(txn *state.Txn, r any) {
	if txn != nil {
		txn.Abort()
	}
	panic(r)
}

// apply dispatches one entry. Every time and id comes from the command.
func (f *FSM) apply(txn *state.Txn, index uint64, data []byte) any {
	op, cmd, err := DecodeEntry(data)
	if err != nil {
		panic(fmt.Sprintf("fsm: index %d: %v", index, err)) // a committed entry: the log is corrupt
	}
	var res any
	switch cmd := cmd.(type) {
	case nil:
		return nil // an ignorable op this version does not know
	case *wire.SubmitGraphCommand:
		res, err = applySubmit(txn, cmd)
	case *wire.CancelCommand:
		res, err = applyCancel(txn, cmd)
	case *wire.DropStagedCommand:
		res, err = applyDropStaged(txn, cmd)
	case *wire.WorkerUpsertCommand:
		res, err = applyWorkerUpsert(txn, cmd)
	case *wire.WorkerDownCommand:
		res, err = applyWorkerDown(txn, cmd)
	case *wire.PlanCommand:
		res, err = applyPlan(txn, cmd)
	case *wire.TaskEventsCommand:
		res, err = applyTaskEvents(txn, cmd)
	case *wire.AttemptsLostCommand:
		res, err = applyAttemptsLost(txn, cmd)
	case *wire.SetQuotaCommand:
		res, err = applySetQuota(txn, cmd)
	case *wire.FailQueuedCommand:
		res, err = applyFailQueued(txn, cmd)
	case *wire.PoolWarmCommand:
		res, err = applyPoolWarm(txn, cmd)
	case *wire.GpuHealthCommand:
		res, err = applyGpuHealth(txn, cmd)
	case *wire.DeleteGraphCommand:
		res, err = applyDeleteGraph(txn, cmd)
	case *wire.SnapshotAddCommand:
		res, err = applySnapshotAdd(txn, cmd)
	case *wire.SnapshotDeleteCommand:
		res, err = applySnapshotDelete(txn, cmd)
	case *wire.SandboxSetDeadlineCommand:
		res, err = applySandboxSetDeadline(txn, cmd)
	case *wire.SandboxPauseCommand:
		res, err = applySandboxPause(txn, cmd)
	case *wire.SetAdmissionPolicyCommand:
		res, err = applySetAdmissionPolicy(txn, cmd)
	case *wire.ArchiveGraphsCommand:
		res, err = applyArchiveGraphs(txn, cmd)
	case *wire.TokenCreateCommand:
		res, err = applyTokenCreate(txn, cmd)
	case *wire.TokenRevokeCommand:
		res, err = applyTokenRevoke(txn, cmd)
	case *wrapperspb.UInt64Value: // OpSetClusterID, OpSetRules
		if op == OpSetRules {
			res = applySetRules(txn, index, cmd.GetValue())
		} else {
			res = txn.SetClusterID(cmd.GetValue())
		}
	default:
		panic(fmt.Sprintf("fsm: index %d: op %s decoded to %T, which apply does not handle", index, op, cmd))
	}
	if err != nil {
		return err
	}
	return res
}

// publish makes an apply's events and index visible to watchers and wakes
// everyone waiting on Changed or WaitForIndex.
func (f *FSM) publish(index uint64, events []*wire.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range events {
		f.ring.push(ev)
	}
	f.applied = index
	close(f.changed)
	f.changed = make(chan struct{})
}
