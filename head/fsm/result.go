package fsm

// Apply returns one of these to the proposer (through raft's ApplyFuture
// Response), or an *errs.Error for a command refused at apply time; the
// refused command changed nothing, except where its error says otherwise.

// SubmitResult is the result of OpSubmitGraph.
type SubmitResult struct {
	GraphID string
	// Committed is true once the graph is in the table: after its last
	// chunk, or for a retry of a graph already committed. False: the chunk
	// was staged.
	Committed bool
	// Existed is true when the graph was already committed with the same
	// spec digest (an idempotent retry); nothing changed.
	Existed bool
	// Index is the Raft index at which the graph became visible (its
	// create_index); 0 while staged.
	Index uint64
}

// CancelResult is the result of OpCancel.
type CancelResult struct {
	// Cancelled counts the tasks that moved to CANCELLED, dependents
	// cancelled as "upstream_failed" included.
	Cancelled uint32
}

// DropStagedResult is the result of OpDropStaged.
type DropStagedResult struct {
	// Dropped counts the staged chunks removed.
	Dropped uint32
}
