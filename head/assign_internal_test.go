package head

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/wire"
)

// batchAssignments puts each run of consecutive assignments in batches of
// at most maxBytes, keeps stops where they are, and sends an assignment
// alone in its run, or larger than the bound, as an Assignment.
func TestBatchAssignments(t *testing.T) {
	assign := func(id string, pad int) *wire.HeadMessage {
		return &wire.HeadMessage{Msg: &wire.HeadMessage_Assign{Assign: &wire.Assignment{TaskId: id, Attempt: 1,
			Spec: &wire.TaskSpec{Image: strings.Repeat("x", pad)}}}}
	}
	a, b, c, d := assign("g/a", 10), assign("g/b", 10), assign("g/c", 10), assign("g/d", 10)
	big := assign("g/big", 400)
	stop := stopMsg("g/s", 1, "cancelled")
	size := proto.Size(a.GetAssign()) // every small one has this size
	// show writes msgs as a list: a task id alone, [ids] for a batch, -id for a stop.
	show := func(msgs []*wire.HeadMessage) string {
		var parts []string
		for _, m := range msgs {
			switch {
			case m.GetAssign() != nil:
				parts = append(parts, m.GetAssign().GetTaskId())
			case m.GetStop() != nil:
				parts = append(parts, "-"+m.GetStop().GetTaskId())
			case m.GetAssignments() != nil:
				var ids []string
				for _, x := range m.GetAssignments().GetAssignments() {
					ids = append(ids, x.GetTaskId())
				}
				parts = append(parts, "["+strings.Join(ids, " ")+"]")
			default:
				parts = append(parts, fmt.Sprintf("%T", m.GetMsg()))
			}
		}
		return strings.Join(parts, " ")
	}
	for _, tc := range []struct {
		name     string
		msgs     []*wire.HeadMessage
		maxBytes int
		want     string
	}{
		{"nothing", nil, 1 << 20, ""},
		{"one assignment goes alone", []*wire.HeadMessage{a}, 1 << 20, "g/a"},
		{"a run in one batch", []*wire.HeadMessage{a, b, c}, 1 << 20, "[g/a g/b g/c]"},
		{"stops first, in place", []*wire.HeadMessage{stop, a, b}, 1 << 20, "-g/s [g/a g/b]"},
		{"a stop between two runs", []*wire.HeadMessage{a, b, stop, c, d}, 1 << 20, "[g/a g/b] -g/s [g/c g/d]"},
		{"a stop after a lone assignment", []*wire.HeadMessage{a, stop, b}, 1 << 20, "g/a -g/s g/b"},
		{"cut at the byte bound", []*wire.HeadMessage{a, b, c, d}, 2 * size, "[g/a g/b] [g/c g/d]"},
		{"one over the bound goes alone", []*wire.HeadMessage{a, big, b}, 4 * size, "g/a g/big g/b"},
		{"bound of exactly one", []*wire.HeadMessage{a, b}, size, "g/a g/b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := show(batchAssignments(tc.msgs, tc.maxBytes)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
