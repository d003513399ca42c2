// Package state owns MegaFlow's task table: the rows (graphs, tasks, staged
// chunks of graphs being submitted, workers, and a few counters), their
// go-memdb schema and indexes, the task life cycle (lifecycle.go), attempts
// and what workers report about them (attempt.go), placement (place.go),
// the accounting of what each worker holds (accounting.go), and the two
// ways in: immutable read views for anyone and write transactions for the
// FSM.
//
// The package is pure: no networking, no clock, no goroutines. Times and the
// Raft index come in as arguments. Rows are immutable once inserted; a write
// copies a row, changes the copy and inserts it again, so a *View and
// everything it returned stay valid and unchanged forever.
//
// Only packages under head/ may import it; the write API (Txn, Restore) is
// for head/fsm alone.
package state
