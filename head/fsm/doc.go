// Package fsm is the Raft state machine of the head: it owns the meaning of
// the log. Each entry is one op byte and one protobuf command (op.go);
// applying it changes the task table (head/state) in one transaction stamped
// with the entry's index, returns a result for the proposer, and publishes
// the events of the change to Watch streams (events.go). Snapshots stream
// the whole table (snapshot.go).
//
// Apply is deterministic: it reads no clock, draws no random number, starts
// no goroutine and does no I/O; every time comes from the command, chosen by
// the leader. The same log gives the same table on every head.
//
// Only packages under head/ may import it.
package fsm
