package state

import (
	"iter"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The graph archive (docs/operations.md, "Retention of finished graphs"):
// a finished graph past its retention leaves the live table, its task rows
// removed as DeleteGraph removes them, and a summary of it stays in the
// archive table: its wire.Graph row with archived_unix_nanos set (counts,
// metrics, labels, times, spec digest), a few hundred bytes where the live
// graph held kilobytes per task. So the head's memory follows live work,
// not history. A graph id in the archive is taken: a submission of it
// answers that it existed and runs nothing again.

// RulesArchive is the first rules version that has the graph archive:
// OpArchiveGraphs applies (ArchiveGraph, DropArchived; refused below it,
// changing nothing). Heads archive graphs only from it on.
const RulesArchive uint64 = 5

// tableArchive holds the archived graphs' summaries (*wire.Graph rows).
const tableArchive = "archive"

// archiveSchema returns the archive table's schema: by id only (unique,
// as the graphs' table). Each index entry costs about 400 bytes of heap,
// as much as the rest of a summary (bench/results/retention.md), so the
// archive has no index by tenant or by age: the tenant listing and the
// leader's expiry sweep walk the ids.
func archiveSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tableArchive,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
				object: func(o any) ([]byte, bool) { return stringKey(o.(*wire.Graph).GetId(), 0), true },
				args:   stringArgs, prefix: stringPrefixArgs,
			}},
		},
	}
}

// archivable reports why graph g (a row of txn's table) may not be
// archived now, or nil when it may: it must be finished (not
// RUNNING, a finish time set), every task terminal with no attempt still
// holding a worker (DeleteGraph's guard), no attempt's artifacts still
// uploading (artifacts_pending), and no sandbox snapshot taken of it
// (snapshotOf: the snapshot's sandbox_id). The leader asks it (View) to
// choose graphs and the FSM asks it again (Txn) at apply: the log decides.
func archivable(txn *memdb.Txn, g *Graph, snapshotOf map[string]bool) error {
	switch {
	case g.State == wire.GraphState_GRAPH_STATE_RUNNING || g.FinishUnixNanos == 0:
		return errs.New(errs.FailedPrecondition, "graph %q is %s: only a finished graph is archived", g.ID, g.State)
	case snapshotOf[g.ID]:
		return errs.New(errs.FailedPrecondition, "graph %q has a sandbox snapshot: it is archived after the snapshot is deleted", g.ID)
	}
	for _, task := range tasksOfGraph(txn, g.ID) {
		if !IsTerminal(task.State) || task.ActiveAttempt() != nil {
			return errs.New(errs.FailedPrecondition, "graph %q: task %q is %s with its attempt still on a worker", g.ID, task.ID, task.State)
		}
		for i := range task.Attempts {
			if task.Attempts[i].ArtifactsPending {
				return errs.New(errs.FailedPrecondition, "graph %q: task %q attempt %d is still uploading its artifacts",
					g.ID, task.ID, task.Attempts[i].Number)
			}
		}
	}
	return nil
}

// snapshotSources returns the graph ids that sandbox snapshots were taken
// of (their sandbox_id).
func snapshotSources(txn *memdb.Txn) map[string]bool {
	out := map[string]bool{}
	for _, s := range collect[*Snapshot](get(txn, tableSnapshots, indexID)) {
		out[s.S.GetSandboxId()] = true
	}
	return out
}

// Archivable returns the ids of the graphs among ids that may be archived
// now (archivable), in the order of ids; ids not in the table are left
// out. The leader calls it to choose what to propose.
func (v *View) Archivable(ids []string) []string {
	txn := v.txn()
	snaps := snapshotSources(txn)
	var out []string
	for _, id := range ids {
		if g := v.Graph(id); g != nil && archivable(txn, g, snaps) == nil {
			out = append(out, id)
		}
	}
	return out
}

// ArchiveGraphs moves each graph of ids that may be archived now
// (archivable: re-checked here, so the log decides) from the live table to
// the archive: its task rows and graph row removed as DeleteGraph removes
// them, its summary (the graph's wire form with archived_unix_nanos set to
// nanos) inserted. It returns the ids archived, in the order of ids; an id
// not in the table or not archivable is skipped, changing nothing. The FSM
// calls it for an OpArchiveGraphs (rules 5).
func (t *Txn) ArchiveGraphs(ids []string, nanos int64) []string {
	snaps := snapshotSources(t.mem)
	var out []string
	for _, id := range ids {
		g := t.Graph(id)
		if g == nil || archivable(t.taskTxn(), g, snaps) != nil {
			continue
		}
		sum := g.ToWire()
		sum.ArchivedUnixNanos = nanos
		if _, err := t.DeleteGraph(id); err != nil {
			panic("state: archive " + id + ": " + err.Error()) // archivable said it may go
		}
		must(t.mem.Insert(tableArchive, sum))
		out = append(out, id)
	}
	return out
}

// DropArchived removes the summaries of the archived graphs among ids and
// returns how many it removed; an id not in the archive changes nothing.
// The FSM calls it for an OpArchiveGraphs (the archive's retention) and
// for an OpDeleteGraph of an archived graph.
func (t *Txn) DropArchived(ids []string) uint32 {
	var n uint32
	for _, id := range ids {
		if raw := first(t.mem, tableArchive, indexID, id); raw != nil {
			must(t.mem.Delete(tableArchive, raw))
			n++
		}
	}
	return n
}

// Archived returns archived graph id's summary as this transaction sees
// it, or nil. It is shared: do not modify it.
func (t *Txn) Archived(id string) *wire.Graph { return archived(t.mem, id) }

// Archived returns archived graph id's summary, or nil. It is shared: do
// not modify it.
func (v *View) Archived(id string) *wire.Graph { return archived(v.txn(), id) }

func archived(txn *memdb.Txn, id string) *wire.Graph {
	if raw := first(txn, tableArchive, indexID, id); raw != nil {
		return raw.(*wire.Graph)
	}
	return nil
}

// ArchivedGraphs yields every archived summary by id. The snapshot writer
// and the leader's expiry sweep call it. The rows are shared: do not modify them.
func (v *View) ArchivedGraphs() iter.Seq[*wire.Graph] {
	return rows[*wire.Graph](func(txn *memdb.Txn) memdb.ResultIterator { return get(txn, tableArchive, indexID) }, v)
}

// listArchived returns up to limit archived summaries matching f, by id,
// from pageToken, and the next page's token; as ListGraphs, with the tag
// 'a'. A filter walks the ids (the archive has no other index).
func (v *View) listArchived(f GraphFilter, pageToken string, limit int) ([]*wire.Graph, string, error) {
	match := func(g *wire.Graph) bool {
		return (f.Tenant == "" || g.GetTenant() == f.Tenant) && (f.State == 0 || g.GetState() == f.State)
	}
	s := scan[*wire.Graph]{table: tableArchive, index: indexID, tag: 'a', match: match,
		inRange: func(*wire.Graph) bool { return true },
		key:     func(g *wire.Graph) []byte { return stringKey(g.GetId(), 0) }}
	return s.page(v.txn(), pageToken, limit)
}

// ListGraphsWithArchive returns up to limit graphs matching f in their
// wire form, the live ones first (as ListGraphs), then the archived
// summaries (archived_unix_nanos set) by id, and the next page's token
// ("" after the last). A token from the archived part carries the tag
// 'a'; any other token continues the live part. gRPC
// handlers call it for ListGraphs with include_archived.
func (v *View) ListGraphsWithArchive(f GraphFilter, pageToken string, limit int) ([]*wire.Graph, string, error) {
	if limit <= 0 {
		return nil, "", errs.New(errs.InvalidArgument, "page size %d: must be positive", limit)
	}
	if raw, err := tokenEncoding.DecodeString(pageToken); err == nil && len(raw) > 0 && raw[0] == 'a' {
		return v.listArchived(f, pageToken, limit)
	}
	live, next, err := v.ListGraphs(f, pageToken, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]*wire.Graph, 0, len(live))
	for _, g := range live {
		out = append(out, g.ToWire())
	}
	if next != "" {
		return out, next, nil
	}
	if len(out) == limit {
		// The live part ended exactly: the next page starts the archive,
		// if it has anything to show.
		if more, _, err := v.listArchived(f, "", 1); err != nil || len(more) == 0 {
			return out, "", err
		}
		return out, tokenEncoding.EncodeToString([]byte{'a'}), nil
	}
	arch, next, err := v.listArchived(f, "", limit-len(out))
	if err != nil {
		return nil, "", err
	}
	return append(out, arch...), next, nil
}

// Archived adds an archived summary to a restore.
func (r *Restore) Archived(g *wire.Graph) error { return r.mem.Insert(tableArchive, g) }
