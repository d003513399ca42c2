package worker

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// TestMain checks that no test leaks a goroutine. The idle keep-alive
// connections of runtime/testimage's Docker client are not ours: that client
// lives as long as the test binary.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}

const (
	kindStarted  = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED
	kindExited   = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED
	kindFailed   = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED
	kindTimedOut = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_TIMED_OUT
	kindStopped  = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED
)

// leftSpec is the spec of a container a previous run of worker w1 left,
// running command.
func leftSpec(dataDir, task string, n uint32, command string) contract.Spec {
	k := attempt.Key{TaskID: task, Attempt: n}
	graph, _, _ := strings.Cut(task, "/")
	return contract.Spec{
		Name:    ContainerName("w1", k),
		Image:   "busybox",
		Command: []string{command},
		Labels: map[string]string{
			LabelCluster: "megaflow", LabelWorker: "w1", LabelTask: task,
			LabelAttempt: fmt.Sprint(n), LabelGraph: graph,
		},
		LogPath: logPath(dataDir, k),
	}
}

func kinds(evs []*wire.AttemptEvent) string {
	var s []string
	for _, e := range evs {
		s = append(s, strings.TrimPrefix(e.GetKind().String(), "ATTEMPT_EVENT_KIND_"))
	}
	return strings.Join(s, ",")
}
