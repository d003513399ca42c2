package head

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// archiveSim is a table under rules 5 and helpers to add graphs that end
// at a given time.
type archiveSim struct{ *leaderSim }

func newArchiveSim(t *testing.T) archiveSim {
	t.Helper()
	s := archiveSim{newLeaderSim(t)}
	s.must(fsm.OpSetRules, wrapperspb.UInt64(5))
	return s
}

func (s archiveSim) must(op fsm.Op, msg proto.Message) {
	s.t.Helper()
	if err := s.apply(op, msg); err != nil {
		s.t.Fatal(err)
	}
}

// graph submits a one-task graph with labels and, unless ended is
// negative, cancels it ended after the epoch (its finish time).
func (s archiveSim) graph(id string, ended time.Duration, labels ...string) {
	s.t.Helper()
	g := &wire.GraphSpec{Id: id, Tasks: []*wire.TaskSpec{{Name: "a", Image: "img"}}, Labels: map[string]string{}}
	for i := 0; i+1 < len(labels); i += 2 {
		g.Labels[labels[i]] = labels[i+1]
	}
	s.must(fsm.OpSubmitGraph, &wire.SubmitGraphCommand{Header: g, Tasks: g.Tasks, Chunks: 1, SpecDigest: []byte(id),
		UnixNanos: s.epoch.UnixNano(), TaskCount: 1})
	if ended >= 0 {
		s.must(fsm.OpCancel, &wire.CancelCommand{GraphId: id, Reason: "done", UnixNanos: s.epoch.Add(ended).UnixNano()})
	}
}

// ids renders the commands: "[a b | c]" per command, graphs then drops.
func ids(cmds []*wire.ArchiveGraphsCommand) string {
	var out []string
	for _, c := range cmds {
		out = append(out, "["+strings.Join(append(append([]string{}, c.GraphIds...), append([]string{"|"}, c.DropIds...)...), " ")+"]")
	}
	return strings.Join(out, " ")
}

// TestArchiveCommands: the leader's choice of graphs to archive and
// summaries to drop (archiveCommands) by the head's retention, the
// graph's label ("0" keeps it, a duration overrides, one that does not
// parse is ignored), the guards (running, a snapshot taken of it), the
// archive's retention, and the batch bound; each command carries the time.
func TestArchiveCommands(t *testing.T) {
	s := newArchiveSim(t)
	s.graph("old", 0)
	s.graph("young", 5*time.Hour)
	s.graph("kept-by-label", 0, LabelGraphRetention, "0")
	s.graph("short-label", 5*time.Hour, LabelGraphRetention, "30m")
	s.graph("bad-label", 0, LabelGraphRetention, "soon")
	s.graph("running", -1)
	s.graph("sbx-snapped", 0)
	s.must(fsm.OpWorkerUpsert, &wire.WorkerUpsertCommand{UnixNanos: s.epoch.UnixNano(), Info: &wire.WorkerInfo{Id: "w1", Runtime: "fake",
		Capacity: &wire.Resources{CpuMillis: 8000, MemoryBytes: 8 << 30}}})
	s.must(fsm.OpSnapshotAdd, &wire.SnapshotAddCommand{MaxPerTenant: 4, Snapshot: &wire.Snapshot{Id: "snap-a", Tenant: "default",
		SandboxId: "sbx-snapped", WorkerId: "w1", Image: "megaflow-snapshot:snap-a", ImageId: "sha256:abc", CreateUnixNanos: 1}})
	now := s.epoch.Add(6*time.Hour + time.Second)
	for _, tc := range []struct {
		graphKeep time.Duration
		want      string
	}{
		{6 * time.Hour, "[bad-label old short-label |]"},
		{0, "[short-label |]"},
		{30 * time.Minute, "[bad-label old short-label young |]"},
		{7 * time.Hour, "[short-label |]"},
	} {
		cmds := archiveCommands(s.f.View(), now, tc.graphKeep, 30*24*time.Hour)
		if got := ids(cmds); got != tc.want {
			t.Errorf("graph retention %v: %s, want %s", tc.graphKeep, got, tc.want)
		}
		for _, c := range cmds {
			if c.UnixNanos != now.UnixNano() {
				t.Errorf("graph retention %v: command stamped %d, want now %d", tc.graphKeep, c.UnixNanos, now.UnixNano())
			}
		}
	}

	// Archive them, then the archive's retention drops the summaries.
	for _, c := range archiveCommands(s.f.View(), now, 6*time.Hour, 0) {
		s.must(fsm.OpArchiveGraphs, c)
	}
	if got := ids(archiveCommands(s.f.View(), now, 6*time.Hour, 0)); got != "" {
		t.Fatalf("after archiving: %s, want nothing to do", got)
	}
	// What `megaflow operator snapshot save` reports counts both.
	if info := snapshotInfo(s.f.View(), 0, nil); info.GetGraphs() != 4 || info.GetArchivedGraphs() != 3 {
		t.Errorf("snapshot info: %d graphs, %d archived; want 4 live (young, kept-by-label, running, sbx-snapped) and 3 archived", info.GetGraphs(), info.GetArchivedGraphs())
	}
	for _, tc := range []struct {
		after, archiveKeep time.Duration
		want               string
	}{
		{29 * 24 * time.Hour, 30 * 24 * time.Hour, ""},
		{30*24*time.Hour + time.Second, 30 * 24 * time.Hour, "[| bad-label old short-label]"},
		{365 * 24 * time.Hour, 0, ""},
	} {
		if got := ids(archiveCommands(s.f.View(), now.Add(tc.after), 0, tc.archiveKeep)); got != tc.want {
			t.Errorf("%v later, archive retention %v: %s, want %s", tc.after, tc.archiveKeep, got, tc.want)
		}
	}
}

// TestArchiveCommandsBatches: many due graphs go in commands of at most
// fsm.MaxArchiveBatch, in id order, none left out or repeated.
func TestArchiveCommandsBatches(t *testing.T) {
	s := newArchiveSim(t)
	const n = 2*fsm.MaxArchiveBatch + 10
	for i := range n {
		s.graph(fmt.Sprintf("g%04d", i), 0)
	}
	cmds := archiveCommands(s.f.View(), s.epoch.Add(time.Hour), time.Minute, 0)
	if len(cmds) != 3 {
		t.Fatalf("%d commands, want 3", len(cmds))
	}
	next := 0
	for _, c := range cmds {
		if len(c.GraphIds) > fsm.MaxArchiveBatch {
			t.Fatalf("a command of %d graphs, over %d", len(c.GraphIds), fsm.MaxArchiveBatch)
		}
		for _, id := range c.GraphIds {
			if want := fmt.Sprintf("g%04d", next); id != want {
				t.Fatalf("graph %s in the commands where %s was due", id, want)
			}
			next++
		}
	}
	if next != n {
		t.Fatalf("%d graphs in the commands, want %d", next, n)
	}
}

// TestArchiveCommandsTaskBound: graphs whose tasks add up past the bound
// (archiveBatchTasks; a smaller one here) go in several commands, a graph
// bigger than the bound in one of its own.
func TestArchiveCommandsTaskBound(t *testing.T) {
	s := newArchiveSim(t)
	big := func(id string, n int) {
		g := &wire.GraphSpec{Id: id}
		for i := range n {
			g.Tasks = append(g.Tasks, &wire.TaskSpec{Name: fmt.Sprintf("t%d", i), Image: "img"})
		}
		s.must(fsm.OpSubmitGraph, &wire.SubmitGraphCommand{Header: &wire.GraphSpec{Id: id}, Tasks: g.Tasks, Chunks: 1, SpecDigest: []byte(id),
			UnixNanos: s.epoch.UnixNano(), TaskCount: uint32(n)})
		s.must(fsm.OpCancel, &wire.CancelCommand{GraphId: id, Reason: "done", UnixNanos: s.epoch.UnixNano()})
	}
	// The bound is a parameter: 64 tasks here (archiveCommands passes
	// archiveBatchTasks, 65,536), the same cases in 1/1000 of the rows.
	const bound = 64
	big("a", bound/2)
	big("b", bound/2)
	big("c", 1)
	big("d", bound+1)
	big("e", 1)
	if got, want := ids(archiveCommandsBounded(s.f.View(), s.epoch.Add(time.Hour), time.Minute, 0, bound)), "[a b |] [c |] [d |] [e |]"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}

// A retention label that is no duration of 0 or more is refused at
// submission, naming the label; a good one, or none, passes.
func TestCheckRetentionLabels(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   string // "" passes
	}{
		{nil, ""},
		{map[string]string{LabelGraphRetention: "72h", LabelArtifactRetention: "0"}, ""},
		{map[string]string{LabelGraphRetention: "abc"}, `label megaflow.io/graph-retention="abc"`},
		{map[string]string{LabelGraphRetention: "-5s"}, `label megaflow.io/graph-retention="-5s"`},
		{map[string]string{LabelGraphRetention: "99999999h"}, `"99999999h"`}, // overflows a duration
		{map[string]string{LabelArtifactRetention: "1 day"}, `label megaflow.io/artifact-retention="1 day"`},
	} {
		err := checkRetentionLabels(tc.labels)
		if tc.want == "" && err != nil || tc.want != "" && (errs.ClassOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkRetentionLabels(%v) = %v; want %q", tc.labels, err, tc.want)
		}
	}
}
