package state

import "github.com/megaflow/megaflow/internal/wire"

// StagedChunk is one chunk of a graph whose submission spans several log
// entries. Staged chunks are invisible to graph and task reads; the last
// chunk commits the graph and drops them, and the leader's sweeper drops
// chunks whose submission never finished (see View.StagedGraphs).
type StagedChunk struct {
	GraphID string
	Chunk   uint32
	// Command is the chunk as proposed; shared and immutable.
	Command *wire.SubmitGraphCommand
}

// StagedGraph summarizes the staged chunks of one graph for the leader's
// sweeper.
type StagedGraph struct {
	GraphID string
	// FirstUnixNanos is the earliest command time among the staged chunks
	// (nanoseconds since the Unix epoch, the leader's clock).
	FirstUnixNanos int64
	// Chunks is the number of chunks the submission announced; Staged how
	// many of them are in the table.
	Chunks uint32
	Staged uint32
}

// StageChunk stores a chunk of a graph being submitted, replacing a chunk
// with the same graph id and number. The FSM calls it for every chunk but
// the last.
func (t *Txn) StageChunk(c *StagedChunk) {
	must(t.mem.Insert(tableStaged, c))
}

// StagedChunks returns the staged chunks of one graph by chunk number.
func (t *Txn) StagedChunks(graphID string) []*StagedChunk {
	var out []*StagedChunk
	it := get(t.mem, tableStaged, indexID, graphID)
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*StagedChunk))
	}
	return out
}

// DropStaged removes the staged chunks of one graph and returns how many
// there were.
func (t *Txn) DropStaged(graphID string) uint32 {
	n, err := t.mem.DeleteAll(tableStaged, indexID, graphID)
	must(err)
	return uint32(n)
}
