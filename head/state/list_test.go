package state

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// listFixture has graphs whose ids sort differently as prefixes of task
// ids ("a-b/..." < "a/..." but "a" < "a-b"), two tenants, queues,
// priorities and tasks on workers.
func listFixture(t *testing.T) *testStore {
	s := newTestStore(t)
	s.insert("a", "acme", "x", "y<x", "z@eval!2", "w@eval")
	s.insert("a-b", "acme", "x!1", "y@eval!2")
	s.insert("a.c", "beta", "x", "q<x")
	s.insert("b", "acme", "m!1", "n")
	s.move("a/x", "w1", assigned, running)
	s.move("a-b/x", "w1", assigned)
	s.move("b/n", "w2", assigned, running, succeeded)
	s.move("a.c/x", "w2", assigned)
	return s
}

// expectTasks is the brute-force answer: filter all tasks, sort them in the
// order ListTasks documents for the filter.
func expectTasks(v *View, f TaskFilter) []string {
	var all []*Task
	for t := range v.Tasks() {
		if (f.GraphID == "" || t.GraphID == f.GraphID) && (f.Tenant == "" || t.Tenant == f.Tenant) &&
			(f.WorkerID == "" || (t.ActiveAttempt() != nil && t.WorkerID() == f.WorkerID)) && (f.State == 0 || t.State == f.State) {
			all = append(all, t)
		}
	}
	slices.SortFunc(all, func(x, y *Task) int {
		switch {
		case f.GraphID != "" || f.WorkerID != "":
		case f.State == queued:
			return cmp.Or(cmp.Compare(x.Queue(), y.Queue()), -cmp.Compare(x.Priority, y.Priority),
				cmp.Compare(x.QueueSeq, y.QueueSeq), cmp.Compare(x.ID, y.ID))
		case f.State != 0:
		case f.Tenant != "":
			return cmp.Or(cmp.Compare(x.GraphID, y.GraphID), cmp.Compare(x.ID, y.ID))
		}
		return cmp.Compare(x.ID, y.ID)
	})
	return ids(all)
}

func TestListTasksPages(t *testing.T) {
	s := listFixture(t)
	s.insert("c", "beta", "s", "t")
	s.move("c/s", "w1", assigned, running, cancelled) // still being stopped on w1
	s.move("c/t", "w1", assigned, running, succeeded)
	if got := ids(s.Snapshot().AssignedTo("w1")); !slices.Equal(got, []string{"a-b/x", "a/x", "c/s"}) {
		t.Fatal(got)
	}
	v := s.Snapshot()
	filters := []TaskFilter{
		{},
		{GraphID: "a"},
		{GraphID: "a-b"},
		{GraphID: "a", State: queued},
		{GraphID: "nope"},
		{Tenant: "acme"},
		{Tenant: "acme", State: queued},
		{Tenant: "beta"},
		{State: queued},
		{State: pending},
		{State: succeeded},
		{WorkerID: "w1"},
		{WorkerID: "w2"},
		{WorkerID: "w1", State: running},
		{WorkerID: "w1", Tenant: "acme", GraphID: "a-b"},
		{WorkerID: "w1", State: cancelled},
	}
	for _, f := range filters {
		want := expectTasks(v, f)
		for limit := 1; limit <= len(want)+1; limit++ {
			t.Run(fmt.Sprintf("%+v/%d", f, limit), func(t *testing.T) {
				var got []string
				token := ""
				for pages := 0; ; pages++ {
					page, next, err := v.ListTasks(f, token, limit)
					if err != nil {
						t.Fatal(err)
					}
					if len(page) > limit || (next != "" && len(page) != limit) || pages > len(want) {
						t.Fatalf("page of %d with limit %d, next %q", len(page), limit, next)
					}
					got = append(got, ids(page)...)
					if token = next; token == "" {
						break
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("got  %v\nwant %v", got, want)
				}
			})
		}
	}
}

func TestListGraphsPages(t *testing.T) {
	s := listFixture(t)
	s.move("a.c/x", "", running, succeeded)
	s.move("a.c/q", "w", assigned, running, succeeded)
	v := s.Snapshot()
	tests := []struct {
		f    GraphFilter
		want []string
	}{
		{GraphFilter{}, []string{"a", "a-b", "a.c", "b"}},
		{GraphFilter{Tenant: "acme"}, []string{"a", "a-b", "b"}},
		{GraphFilter{Tenant: "acme", State: wire.GraphState_GRAPH_STATE_RUNNING}, []string{"a", "a-b", "b"}},
		{GraphFilter{State: wire.GraphState_GRAPH_STATE_SUCCEEDED}, []string{"a.c"}},
		{GraphFilter{Tenant: "nobody"}, nil},
	}
	for _, tt := range tests {
		for limit := 1; limit <= len(tt.want)+1; limit++ {
			var got []string
			token := ""
			for {
				page, next, err := v.ListGraphs(tt.f, token, limit)
				if err != nil {
					t.Fatal(err)
				}
				for _, g := range page {
					got = append(got, g.ID)
				}
				if token = next; token == "" {
					break
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("%+v limit %d: %v, want %v", tt.f, limit, got, tt.want)
			}
		}
	}
}

func TestListTokensSurviveWrites(t *testing.T) {
	s := listFixture(t)
	page, next, err := s.Snapshot().ListTasks(TaskFilter{State: queued}, "", 2)
	if err != nil || next == "" {
		t.Fatal(err)
	}
	// Another task leaves the queue and a new graph arrives; the next page
	// goes on from the same position in the newer view.
	s.move(page[0].ID, "w9", assigned)
	s.insert("c", "acme", "new@eval") // the end of the last queue
	rest, _, err := s.Snapshot().ListTasks(TaskFilter{State: queued}, next, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rest {
		if r.ID == page[0].ID || r.ID == page[1].ID {
			t.Fatalf("row %s repeated", r.ID)
		}
	}
	if len(rest) == 0 || rest[len(rest)-1].ID != "c/new" {
		t.Fatalf("rest %v", ids(rest))
	}
}

func TestListRefusals(t *testing.T) {
	v := listFixture(t).Snapshot()
	_, byState, _ := v.ListTasks(TaskFilter{State: queued}, "", 1)
	_, byTenant, _ := v.ListTasks(TaskFilter{Tenant: "acme"}, "", 1)
	tests := []struct {
		name  string
		f     TaskFilter
		token string
		limit int
	}{
		{"zero limit", TaskFilter{}, "", 0},
		{"not base64", TaskFilter{}, "%%%", 1},
		{"empty token", TaskFilter{}, "AA", 1},
		{"other filter", TaskFilter{Tenant: "acme"}, byState, 1},
		{"other state", TaskFilter{State: pending}, byState, 1},
		{"other tenant's token", TaskFilter{State: queued}, byTenant, 1},
		{"tenant token without slash", TaskFilter{Tenant: "acme"}, tokenEncoding.EncodeToString([]byte("Tabc")), 1},
	}
	for _, tt := range tests {
		if _, _, err := v.ListTasks(tt.f, tt.token, tt.limit); errs.ClassOf(err) != errs.InvalidArgument {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	if _, _, err := v.ListGraphs(GraphFilter{}, "", -1); errs.ClassOf(err) != errs.InvalidArgument {
		t.Errorf("graphs limit: %v", err)
	}
}

func TestQueuedTasks(t *testing.T) {
	s := newTestStore(t)
	s.insert("g", "t", "a", "b!5", "c@eval!1", "d!5", "e@eval!1", "f!-3")
	s.insert("h", "t", "a!5")
	v := s.Snapshot()
	var def, eval []string
	for task := range v.QueuedTasks("") {
		def = append(def, task.ID)
	}
	for task := range v.QueuedTasks("eval") {
		eval = append(eval, task.ID)
	}
	if want := []string{"g/b", "g/d", "h/a", "g/a", "g/f"}; !slices.Equal(def, want) {
		t.Errorf("default queue %v, want %v", def, want)
	}
	if want := []string{"g/c", "g/e"}; !slices.Equal(eval, want) {
		t.Errorf("eval queue %v, want %v", eval, want)
	}
	// A sequence can be ranged over twice.
	n := 0
	seq := v.QueuedTasks("eval")
	for range seq {
		n++
	}
	for range seq {
		n++
	}
	if n != 4 {
		t.Errorf("ranged %d", n)
	}
}

// QueuedFirst yields the first n tasks of each queue in Queued's order:
// queues whose names share a prefix are told apart, a task that is not
// QUEUED is never yielded, and n at least the longest queue yields what
// Queued does.
func TestQueuedFirst(t *testing.T) {
	s := newTestStore(t)
	s.insert("g", "t", "a1@a", "a2@a!5", "a3@a", "ab1@ab", "ab2@ab", "b1@b", "b2@b!1", "b3@b", "dep<a1@a", "x1")
	all := slices.Collect(s.Snapshot().Queued())
	for _, c := range []struct {
		n    int
		want []string
	}{
		{1, []string{"g/x1", "g/a2", "g/ab1", "g/b2"}},
		{2, []string{"g/x1", "g/a2", "g/a1", "g/ab1", "g/ab2", "g/b2", "g/b1"}},
		{3, ids(all)},
		{100, ids(all)},
	} {
		got := ids(slices.Collect(s.Snapshot().QueuedFirst(c.n)))
		if !slices.Equal(got, c.want) {
			t.Errorf("QueuedFirst(%d) = %q; want %q", c.n, got, c.want)
		}
	}
	if got := len(all); got != 9 {
		t.Fatalf("Queued yields %d tasks; want the 9 without dependencies", got)
	}
	var first []string
	for task := range s.Snapshot().QueuedFirst(2) { // an early stop
		if first = append(first, task.ID); len(first) == 3 {
			break
		}
	}
	if !slices.Equal(first, []string{"g/x1", "g/a2", "g/a1"}) {
		t.Errorf("QueuedFirst(2) stopped after 3 = %q", first)
	}
}
