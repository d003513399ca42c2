package state

import (
	"encoding/hex"

	memdb "github.com/hashicorp/go-memdb"
)

// Table and index names.
const (
	tableGraphs  = "graphs"
	tableTasks   = "tasks"
	tableStaged  = "staged"
	tableMeta    = "meta"
	tableWorkers = "workers"
	tableQuotas  = "quotas"
	tablePools   = "pools"
	// tableSnapshots holds sandbox snapshots (snapshot.go).
	tableSnapshots = "snapshots"
	// tableAdmission holds the admission policies by tenant (admission.go).
	tableAdmission = "admission"
	// tableTokens holds the API tokens by accessor (token.go).
	tableTokens = "tokens"
	// indexHash holds the tokens by the hex SHA-256 of their secret.
	indexHash = "hash"

	indexID     = "id"
	indexTenant = "tenant"
	indexState  = "state"
	indexWorker = "worker"
	indexStatus = "status"
	// indexService holds the service tasks that have not ended, by
	// service name (service.go).
	indexService = "service"
	// indexGang holds the tasks of gangs, by "<graph id>/<gang>" (gang.go).
	indexGang = "gang"
	// indexGraphService holds the service tasks that have not ended, by
	// graph id (service.go: stopGraphServices).
	indexGraphService = "graph_service"
	// indexSnapshotUse holds the sandbox tasks created from a snapshot that
	// may still hold a container (not ended, or with an active attempt), by
	// snapshot id (snapshot.go: SnapshotUsers).
	indexSnapshotUse = "snapshot_use"
)

// metaRow is a named counter in the meta table.
type metaRow struct {
	Key   string
	Value uint64
}

// Keys of the meta table.
const (
	metaIndex    = "index"     // last applied Raft index
	metaQueueSeq = "queue_seq" // next queue_seq to hand out
)

// schema returns the table schema. Every index entry costs about 400 bytes
// of heap (go-immutable-radix nodes, leaves and their channels), so tasks
// have few: none by graph (a graph's tasks are the "<graph id>/" prefix of
// the id index) and none by tenant (a tenant's tasks are those of its
// graphs); the worker index holds only the tasks ASSIGNED or RUNNING.
func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableGraphs: {
			Name: tableGraphs,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) { return stringKey(o.(*Graph).ID, 0), true },
					args:   stringArgs, prefix: stringPrefixArgs,
				}},
				indexTenant: {Name: indexTenant, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						g := o.(*Graph)
						return stringKey(g.Tenant, len(g.ID)+1), true
					},
					args: stringArgs,
				}},
				indexState: {Name: indexState, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						g := o.(*Graph)
						b := make([]byte, 1, 1+len(g.ID)+1)
						b[0] = byte(g.State)
						return b, true
					},
					args: graphStateArgs,
				}},
			},
		},
		tableTasks: {
			Name: tableTasks,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) { return stringKey(o.(*Task).ID, 0), true },
					args:   stringArgs, prefix: stringPrefixArgs,
				}},
				indexState: {Name: indexState, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						t := o.(*Task)
						return taskStateKey(t, len(t.ID)+1), true
					},
					args: taskStateArgs,
				}},
				indexGang: {Name: indexGang, AllowMissing: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						t := o.(*Task)
						g := t.Spec.GetGang()
						if g == "" {
							return nil, false
						}
						return stringKey(gangKey(t.GraphID, g), len(t.ID)+1), true
					},
					args: stringArgs,
				}},
				indexWorker: {Name: indexWorker, AllowMissing: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						t := o.(*Task)
						a := t.ActiveAttempt()
						if a == nil {
							return nil, false
						}
						return stringKey(a.WorkerID, len(t.ID)+1), true
					},
					args: stringArgs,
				}},
				indexService: {Name: indexService, AllowMissing: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						t := o.(*Task)
						name := t.ServiceName()
						if name == "" || IsTerminal(t.State) {
							return nil, false
						}
						return stringKey(name, len(t.ID)+1), true
					},
					args: stringArgs,
				}},
				indexSnapshotUse: {Name: indexSnapshotUse, AllowMissing: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						t := o.(*Task)
						id := t.Spec.GetSandbox().GetFromSnapshot()
						if id == "" || (IsTerminal(t.State) && t.ActiveAttempt() == nil) {
							return nil, false
						}
						return stringKey(id, len(t.ID)+1), true
					},
					args: stringArgs,
				}},
				indexGraphService: {Name: indexGraphService, AllowMissing: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						t := o.(*Task)
						if t.ServiceName() == "" || IsTerminal(t.State) {
							return nil, false
						}
						return stringKey(t.GraphID, len(t.ID)+1), true
					},
					args: stringArgs,
				}},
			},
		},
		tableStaged: {
			Name: tableStaged,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						c := o.(*StagedChunk)
						return stagedKey(c.GraphID, c.Chunk), true
					},
					args: stagedArgs,
				}},
			},
		},
		tableWorkers: {
			Name: tableWorkers,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) { return stringKey(o.(*Worker).ID(), 0), true },
					args:   stringArgs,
				}},
				indexStatus: {Name: indexStatus, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						w := o.(*Worker)
						b := make([]byte, 1, 1+len(w.ID())+1)
						b[0] = byte(w.Status)
						return b, true
					},
					args: workerStatusArgs,
				}},
			},
		},
		tableQuotas: {
			Name: tableQuotas,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) { return stringKey(o.(*Quota).Tenant, 0), true },
					args:   stringArgs,
				}},
			},
		},
		tablePools: {
			Name: tablePools,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) { return stringKey(o.(*PoolTarget).key(), 0), true },
					args:   stringArgs,
				}},
			},
		},
		tableAdmission: {
			Name: tableAdmission,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) { return stringKey(o.(*AdmissionPolicy).P.GetTenant(), 0), true },
					args:   stringArgs,
				}},
			},
		},
		tableTokens: {
			Name: tableTokens,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) { return stringKey(o.(*Token).T.GetAccessor(), 0), true },
					args:   stringArgs,
				}},
				indexHash: {Name: indexHash, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						return stringKey(hex.EncodeToString(o.(*Token).T.GetSecretHash()), 0), true
					},
					args: stringArgs,
				}},
			},
		},
		tableSnapshots: {
			Name: tableSnapshots,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) { return stringKey(o.(*Snapshot).S.GetId(), 0), true },
					args:   stringArgs, prefix: stringPrefixArgs,
				}},
				indexTenant: {Name: indexTenant, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						s := o.(*Snapshot).S
						return stringKey(s.GetTenant(), len(s.GetId())+1), true
					},
					args: stringArgs,
				}},
				indexWorker: {Name: indexWorker, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) {
						s := o.(*Snapshot).S
						return stringKey(s.GetWorkerId(), len(s.GetId())+1), true
					},
					args: stringArgs,
				}},
			},
		},
		tableArchive: archiveSchema(),
		tableMeta: {
			Name: tableMeta,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: &funcIndexer{
					object: func(o any) ([]byte, bool) { return stringKey(o.(*metaRow).Key, 0), true },
					args:   stringArgs,
				}},
			},
		},
	}}
}
