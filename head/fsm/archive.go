package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The graph archive's op of rules 5 (state/archive.go): finished graphs
// past their retention leave the live table for a summary, and summaries
// past the archive's retention are dropped.

// MaxArchiveBatch bounds the graph ids of one ArchiveGraphsCommand, in
// graph_ids and in drop_ids each: one entry removes at most this many
// graphs' rows, so that no apply holds the table for long.
const MaxArchiveBatch = 256

// ArchiveGraphsResult is the result of an OpArchiveGraphs.
type ArchiveGraphsResult struct {
	// Archived lists the graphs moved to the archive, in the command's
	// order; the others were not archivable at apply (skipped).
	Archived []string
	// Dropped counts the summaries removed from the archive.
	Dropped uint32
}

// applyArchiveGraphs archives the command's graphs that are still
// archivable (state.Txn.ArchiveGraphs) and drops the summaries of
// drop_ids (state.Txn.DropArchived). Below rules 5 it is refused, changing
// nothing (heads propose none before); so is a command over
// MaxArchiveBatch or without a time.
func applyArchiveGraphs(txn *state.Txn, cmd *wire.ArchiveGraphsCommand) (*ArchiveGraphsResult, error) {
	if r := txn.Rules(); r < state.RulesArchive {
		return nil, errs.New(errs.FailedPrecondition, "%s needs rules %d, the table is at rules %d: wait until every head runs a build with them",
			OpArchiveGraphs, state.RulesArchive, r)
	}
	switch {
	case len(cmd.GetGraphIds()) > MaxArchiveBatch || len(cmd.GetDropIds()) > MaxArchiveBatch:
		return nil, errs.New(errs.InvalidArgument, "archive graphs: %d graphs and %d drops, at most %d each: split the command",
			len(cmd.GetGraphIds()), len(cmd.GetDropIds()), MaxArchiveBatch)
	case cmd.GetUnixNanos() <= 0:
		return nil, errs.New(errs.InvalidArgument, "archive graphs: unix_nanos %d: the leader must stamp its time", cmd.GetUnixNanos())
	}
	return &ArchiveGraphsResult{
		Archived: txn.ArchiveGraphs(cmd.GetGraphIds(), cmd.GetUnixNanos()),
		Dropped:  txn.DropArchived(cmd.GetDropIds()),
	}, nil
}
