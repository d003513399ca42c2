package fsm

import (
	"fmt"
	"strings"

	"github.com/megaflow/megaflow/head/state"
	"google.golang.org/protobuf/encoding/prototext"
)

// Dump renders every row of v canonically as text, one row a line, in the
// snapshot's order (format.go): the next queue_seq, graphs and tasks by id,
// staged chunks, workers by id with the GPUs they hold, quotas, pre-warm
// targets, sandbox snapshots, admission policies, archived summaries, tokens. It leaves out the applied index, so that two tables built by
// different routes (one entry at a time, in batches, from a snapshot and the
// rest of the log) dump equal exactly when they hold the same rows. Tests
// compare dumps to check replay (the FSM's own and internal/testcluster's);
// the text is stable within one binary only (prototext), so compare dumps
// of one process, never stored ones.
func Dump(v *state.View) string {
	var b strings.Builder
	fmt.Fprintf(&b, "next_queue_seq %d\n", v.NextQueueSeq())
	fmt.Fprintf(&b, "rules %d\n", v.Rules())
	opts := prototext.MarshalOptions{}
	for g := range v.Graphs() {
		fmt.Fprintf(&b, "graph %s\n", opts.Format(g.ToWire()))
	}
	for t := range v.Tasks() {
		fmt.Fprintf(&b, "task %s\n", opts.Format(t.ToWire()))
	}
	for c := range v.StagedChunks() {
		fmt.Fprintf(&b, "staged %s %d %s\n", c.GraphID, c.Chunk, opts.Format(c.Command))
	}
	for _, w := range v.Workers() {
		fmt.Fprintf(&b, "worker %s gpus %v\n", opts.Format(w.ToWire()), w.GPUsInUse())
	}
	for _, q := range v.QuotaRows() {
		fmt.Fprintf(&b, "quota %s\n", opts.Format(q.ToWire()))
	}
	for _, p := range v.PoolTargets() {
		fmt.Fprintf(&b, "pool %s\n", opts.Format(p))
	}
	for _, s := range v.Snapshots("") {
		fmt.Fprintf(&b, "snapshot %s\n", opts.Format(s))
	}
	for _, p := range v.AdmissionPolicies() {
		fmt.Fprintf(&b, "admission %s\n", opts.Format(p))
	}
	for g := range v.ArchivedGraphs() {
		fmt.Fprintf(&b, "archived %s\n", opts.Format(g))
	}
	for _, t := range v.TokenRows() {
		fmt.Fprintf(&b, "token %s\n", opts.Format(t))
	}
	return b.String()
}

// DiffDumps returns "" when two dumps are equal, or else a readable account
// of where they differ: each line only in a (prefixed "- ") or only in b
// ("+ "), at most limit of them (0: all), then how many more there are.
// A row that changed shows as one "-" and one "+" line.
func DiffDumps(a, b string, limit int) string {
	if a == b {
		return ""
	}
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	inB := map[string]int{}
	for _, l := range bl {
		inB[l]++
	}
	inA := map[string]int{}
	for _, l := range al {
		inA[l]++
	}
	var out []string
	for _, l := range al {
		if inB[l] > 0 {
			inB[l]--
			continue
		}
		out = append(out, "- "+l)
	}
	for _, l := range bl {
		if inA[l] > 0 {
			inA[l]--
			continue
		}
		out = append(out, "+ "+l)
	}
	more := 0
	if limit > 0 && len(out) > limit {
		more, out = len(out)-limit, out[:limit]
	}
	s := strings.Join(out, "\n")
	if more > 0 {
		s += fmt.Sprintf("\n... and %d more differing lines", more)
	}
	return s
}
