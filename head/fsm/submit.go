package fsm

import (
	"bytes"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// applySubmit applies one chunk of a graph submission.
//
// A graph of n chunks: chunks 0..n-2 are staged, invisible to reads; chunk
// n-1 commits the graph with the tasks of every chunk, in chunk order, and
// drops the staging. Chunks of a graph already committed with the same
// digest change nothing (Existed); with another digest they are refused
// (AlreadyExists); so do those of a graph in the archive (rules 5). A chunk whose digest differs from the staged ones starts a
// new submission attempt and replaces them. A last chunk that finds a chunk
// missing is refused (FailedPrecondition) and drops the staging, so that the
// leader resends every chunk; so does a graph refused as invalid. From
// rules 3 on, a graph whose snapshot forks the table does not back
// (state.Txn.CheckForks: another tenant's snapshot, the wrong worker, a
// snapshot's image outside a fork) is refused as well; from rules 5 on,
// so is a graph with a task its tenant's admission policy does not allow
// (state.Txn.CheckAdmission: PermissionDenied). From rules 8 on, the
// placements the last chunk carries (plan) are applied once the graph is
// in the table, as OpPlan applies them (RulesSubmitPlan).
func applySubmit(txn *state.Txn, cmd *wire.SubmitGraphCommand) (*SubmitResult, error) {
	h := cmd.GetHeader()
	id := h.GetId()
	switch {
	case !validName(id):
		return nil, errs.New(errs.InvalidArgument, "submit: invalid graph id %q", id)
	case cmd.GetChunks() == 0 || cmd.GetChunk() >= cmd.GetChunks():
		return nil, errs.New(errs.InvalidArgument, "submit graph %q: chunk %d of %d", id, cmd.GetChunk(), cmd.GetChunks())
	}
	if g := txn.Graph(id); g != nil {
		if !bytes.Equal(g.SpecDigest, cmd.GetSpecDigest()) {
			return nil, errs.New(errs.AlreadyExists,
				"graph %q already exists with a different spec; choose another id", id)
		}
		return &SubmitResult{GraphID: id, Committed: true, Existed: true, Index: g.CreateIndex}, nil
	}
	// An archived graph's id stays taken (rules 5; the archive is empty
	// below): its summary answers, nothing runs again.
	if g := txn.Archived(id); g != nil {
		if !bytes.Equal(g.GetSpecDigest(), cmd.GetSpecDigest()) {
			return nil, errs.New(errs.AlreadyExists,
				"graph %q already exists (archived) with a different spec; choose another id", id)
		}
		return &SubmitResult{GraphID: id, Committed: true, Existed: true, Index: g.GetCreateIndex()}, nil
	}
	// The chunk's specs are still private to this apply: the last moment
	// to make them share strings. Staged specs are visible to snapshots.
	in := newInterner()
	for _, s := range cmd.GetTasks() {
		in.spec(s)
	}
	staged := txn.StagedChunks(id)
	if len(staged) > 0 && !sameSubmission(staged[0].Command, cmd) {
		txn.DropStaged(id)
		staged = nil
	}
	last := cmd.GetChunks() - 1
	if cmd.GetChunk() < last {
		txn.StageChunk(&state.StagedChunk{GraphID: id, Chunk: cmd.GetChunk(), Command: cmd})
		return &SubmitResult{GraphID: id}, nil
	}
	chunks := make([]*wire.SubmitGraphCommand, cmd.GetChunks())
	chunks[last] = cmd
	for _, c := range staged {
		chunks[c.Chunk] = c.Command
	}
	txn.DropStaged(id)
	for i, c := range chunks {
		if c == nil {
			return nil, errs.New(errs.FailedPrecondition,
				"submit graph %q: chunk %d of %d never arrived; submit every chunk again", id, i, len(chunks))
		}
	}
	g, tasks, err := buildGraph(chunks)
	if err != nil {
		return nil, err
	}
	if txn.Rules() >= state.RulesSnapshots {
		if err := txn.CheckForks(g.Tenant, tasks); err != nil {
			return nil, err
		}
	}
	if txn.Rules() >= state.RulesAdmission {
		if err := txn.CheckAdmission(g, tasks); err != nil {
			return nil, err
		}
	}
	if err := txn.InsertGraph(g, tasks, cmd.GetUnixNanos()); err != nil {
		return nil, err
	}
	res := &SubmitResult{GraphID: id, Committed: true, Index: txn.Index()}
	if p := cmd.GetPlan(); p != nil && txn.Rules() >= RulesSubmitPlan {
		// The leader's placements of the graph's ready tasks (rules 8).
		if res.Plan, err = applyPlan(txn, p); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// sameSubmission reports whether two chunks belong to the same submission
// attempt of a graph.
func sameSubmission(a, b *wire.SubmitGraphCommand) bool {
	return bytes.Equal(a.GetSpecDigest(), b.GetSpecDigest()) && a.GetChunks() == b.GetChunks() &&
		a.GetTaskCount() == b.GetTaskCount()
}

// Speculate returns the table of view as it would be after the submission
// cmd (the only chunk of a graph, with its plan if it carries one) applied
// at the next index, leaving view
// and the FSM's table as they are: the leader plans a submission's ready
// tasks on it before proposing the submission (SubmitGraphCommand.plan).
// The error is the one the apply would give; cmd must not change while the
// returned view is in use (its rows share cmd's specs).
func Speculate(view *state.View, cmd *wire.SubmitGraphCommand) (*state.View, error) {
	store := view.Fork()
	txn := store.WriteTxn(view.Index() + 1)
	res, err := applySubmit(txn, cmd)
	if err != nil {
		txn.Abort()
		return nil, err
	}
	if !res.Committed || res.Existed {
		txn.Abort()
		return nil, errs.New(errs.FailedPrecondition, "submit graph %q: not a new graph in one chunk", res.GraphID)
	}
	txn.Commit()
	return store.Snapshot(), nil
}
