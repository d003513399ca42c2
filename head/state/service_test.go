package state

import (
	"slices"
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
)

// insertService inserts graph id with a service task "srv" serving name
// under policy, and the batch tasks of specs.
func (s *testStore) insertService(id, name, policy string, specs ...string) {
	s.tb.Helper()
	g, tasks := buildRows(id, "t", append([]string{"srv"}, specs...)...)
	tasks[0].Spec.Kind = wire.TaskKind_TASK_KIND_SERVICE
	tasks[0].Spec.Service = &wire.ServiceSpec{Name: name, RestartPolicy: policy}
	s.write(func(txn *Txn) {
		if err := txn.InsertGraph(g, tasks, int64(s.index)); err != nil {
			s.tb.Fatal(err)
		}
	})
}

// event applies one worker event to the current attempt of task id.
func (s *testStore) event(id, worker string, ev *wire.AttemptEvent) bool {
	s.tb.Helper()
	var changed bool
	s.write(func(txn *Txn) {
		ev.TaskId = id
		if a := txn.Task(id).CurrentAttempt(); ev.Attempt == 0 && a != nil {
			ev.Attempt = a.Number
		}
		changed = txn.ApplyAttemptEvent(worker, ev, int64(s.index), RetryBackoff{Fixed: 7})
	})
	return changed
}

func urls(eps []Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.URL)
	}
	return out
}

func ready(url string) *wire.AttemptEvent {
	return &wire.AttemptEvent{Kind: evServiceReady, Endpoint: url}
}

// The restart policy decides what the end of a service attempt does.
func TestServiceRestartPolicy(t *testing.T) {
	exited := func(code int32) *wire.AttemptEvent { return &wire.AttemptEvent{Kind: evExited, ExitCode: code} }
	cases := []struct {
		policy     string
		ev         *wire.AttemptEvent
		maxRetries int32
		want       wire.TaskState
		restarts   uint32
		retries    uint32
		attempt    wire.TaskState // how the attempt ended
	}{
		{"", exited(0), 0, queued, 1, 0, succeeded},
		{"always", exited(3), 0, queued, 1, 0, failed},
		{"always", &wire.AttemptEvent{Kind: evFailed, Reason: "oom"}, 0, queued, 1, 0, failed},
		{"always", &wire.AttemptEvent{Kind: evTimedOut}, 0, queued, 1, 0, timedOut},
		{"on-failure", exited(0), 0, succeeded, 0, 0, succeeded},
		{"on-failure", exited(137), 0, queued, 1, 0, failed},
		{"never", exited(0), 0, succeeded, 0, 0, succeeded},
		{"never", exited(1), 0, failed, 0, 0, failed},
		{"never", exited(1), 2, queued, 0, 1, failed}, // max_retries still applies
	}
	for _, c := range cases {
		t.Run(c.policy+"/"+c.ev.Kind.String(), func(t *testing.T) {
			s := newTestStore(t)
			s.insertService("g", "model/m", c.policy)
			if c.maxRetries > 0 {
				s.write(func(txn *Txn) {
					cur := txn.Task("g/srv")
					n := cur.clone()
					n.Spec = &wire.TaskSpec{Name: "srv", Kind: cur.Spec.Kind, Service: cur.Spec.Service, MaxRetries: c.maxRetries}
					txn.putTask(cur, n)
				})
			}
			s.move("g/srv", "w1", assigned, running)
			if !s.event("g/srv", "w1", ready("http://10.0.0.5:30000")) {
				t.Fatal("SERVICE_READY changed nothing")
			}
			if got := urls(s.Snapshot().ServiceEndpoints("model/m")); !slices.Equal(got, []string{"http://10.0.0.5:30000"}) {
				t.Fatalf("endpoints %v", got)
			}
			s.event("g/srv", "w1", c.ev)
			task := s.task("g/srv")
			a := task.Attempts[0]
			if task.State != c.want || task.Restarts != c.restarts || task.RetriesUsed != c.retries || a.State != c.attempt {
				t.Fatalf("task %s restarts %d retries %d, attempt %s; want %s %d %d %s", task.State, task.Restarts,
					task.RetriesUsed, a.State, c.want, c.restarts, c.retries, c.attempt)
			}
			if c.want == queued && c.restarts > 0 && task.NotBeforeUnixNanos != int64(s.index)+7 {
				t.Fatalf("restart not before %d, want the leader's backoff %d", task.NotBeforeUnixNanos, int64(s.index)+7)
			}
			if a.Endpoint != "http://10.0.0.5:30000" {
				t.Fatalf("the ended attempt lost its endpoint: %+v", a)
			}
			if got := s.Snapshot().ServiceEndpoints("model/m"); len(got) != 0 {
				t.Fatalf("endpoints after the attempt ended: %v", got)
			}
			// Snapshots keep what service tasks add to a row.
			back, err := TaskFromWire(task.ToWire())
			if err != nil || back.Restarts != task.Restarts || back.Attempts[0].Endpoint != a.Endpoint ||
				back.Attempts[0].ReadyUnixNanos != a.ReadyUnixNanos || a.ReadyUnixNanos == 0 {
				t.Fatalf("round trip through the wire form: %+v, %v", back, err)
			}
		})
	}
}

// An endpoint is live only while its attempt runs; SERVICE_READY is fenced
// and checked; Services lists every service not ended.
func TestServiceEndpoints(t *testing.T) {
	s := newTestStore(t)
	s.insertService("g", "model/a", "always", "roll")
	s.insertService("h", "model/a", "always")
	s.insertService("k", "model/b", "always")
	s.move("g/srv", "w1", assigned)

	for _, c := range []struct {
		what   string
		worker string
		ev     *wire.AttemptEvent
	}{
		{"wrong worker", "w2", ready("http://10.0.0.5:30000")},
		{"no port", "w1", ready("http://10.0.0.5")},
		{"not http", "w1", ready("tcp://10.0.0.5:30000")},
		{"empty", "w1", ready("")},
		{"stale attempt", "w1", &wire.AttemptEvent{Kind: evServiceReady, Attempt: 9, Endpoint: "http://10.0.0.5:30000"}},
	} {
		if s.event("g/srv", c.worker, c.ev) {
			t.Errorf("%s: SERVICE_READY accepted", c.what)
		}
	}
	if s.event("g/roll", "w1", ready("http://10.0.0.5:30000")) {
		t.Error("SERVICE_READY accepted for a batch task")
	}
	// ASSIGNED + ready: starts it.
	if !s.event("g/srv", "w1", ready("http://10.0.0.5:30000")) {
		t.Fatal("SERVICE_READY refused")
	}
	if task := s.task("g/srv"); task.State != running || task.Reason != "serving http://10.0.0.5:30000" {
		t.Fatalf("task %s %q", task.State, task.Reason)
	}
	if s.event("g/srv", "w1", ready("http://10.0.0.5:30000")) {
		t.Error("a duplicate SERVICE_READY changed something")
	}
	s.move("h/srv", "w2", assigned, running)
	s.event("h/srv", "w2", ready("http://10.0.0.6:30001"))
	s.move("k/srv", "w2", assigned, running) // running, not ready

	v := s.Snapshot()
	if got := urls(v.ServiceEndpoints("model/a")); !slices.Equal(got, []string{"http://10.0.0.5:30000", "http://10.0.0.6:30001"}) {
		t.Fatalf("model/a endpoints %v", got)
	}
	var names []string
	for svc := range v.Services() {
		names = append(names, svc.Name+":"+joinIDs(svc.Tasks))
	}
	if want := []string{"model/a:g/srv,h/srv", "model/b:k/srv"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}

	// A lost worker withdraws its endpoint; a cancelled task leaves the
	// service index.
	s.write(func(txn *Txn) {
		txn.LoseAttempt("h/srv", 1, "w2", wire.ReasonCode_REASON_CODE_NOT_ON_WORKER, "worker w2 lost", int64(s.index))
	})
	if got := urls(s.Snapshot().ServiceEndpoints("model/a")); !slices.Equal(got, []string{"http://10.0.0.5:30000"}) {
		t.Fatalf("model/a endpoints after w2 was lost: %v", got)
	}
	s.move("k/srv", "", cancelled)
	if svc := s.Snapshot().Service("model/b"); len(svc.Tasks) != 0 {
		t.Fatalf("cancelled service still listed: %v", joinIDs(svc.Tasks))
	}
}

func joinIDs(tasks []*Task) string {
	out := ""
	for i, t := range tasks {
		if i > 0 {
			out += ","
		}
		out += t.ID
	}
	return out
}

// A graph's services are stopped when its last batch task ends, however it
// ends; the stopped services are neither success nor failure for the
// graph's state. A graph of services only, or one cancelled whole, is not
// affected.
func TestServicesStopWithTheirGraph(t *testing.T) {
	cases := []struct {
		name   string
		batch  []string           // batch task specs ("b<a": b depends on a)
		end    func(s *testStore) // ends the batch tasks, or not
		graph  wire.GraphState
		srv    wire.TaskState
		reason string
	}{
		{"batch succeeded", []string{"a", "b<a"}, func(s *testStore) {
			s.move("g/a", "w1", assigned, running, succeeded)
			s.move("g/b", "w1", assigned, running, succeeded)
		}, wire.GraphState_GRAPH_STATE_SUCCEEDED, cancelled, ReasonStoppedWithGraph},
		{"one still pending", []string{"a", "b<a"}, func(s *testStore) {
			s.move("g/a", "w1", assigned, running)
		}, wire.GraphState_GRAPH_STATE_RUNNING, running, ""},
		{"failed, dependent cancelled", []string{"a", "b<a"}, func(s *testStore) {
			s.move("g/a", "w1", assigned, running, failed)
		}, wire.GraphState_GRAPH_STATE_FAILED, cancelled, ReasonStoppedWithGraph},
		{"batch task cancelled", []string{"a"}, func(s *testStore) {
			s.write(func(txn *Txn) {
				txn.CancelTask("g/a", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "by hand", int64(s.index))
			})
		}, wire.GraphState_GRAPH_STATE_CANCELLED, cancelled, ReasonStoppedWithGraph},
		{"graph cancelled", []string{"a"}, func(s *testStore) {
			s.write(func(txn *Txn) {
				txn.CancelGraph("g", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "by hand", int64(s.index))
			})
		}, wire.GraphState_GRAPH_STATE_CANCELLED, cancelled, "by hand"},
		{"services only", nil, func(s *testStore) {}, wire.GraphState_GRAPH_STATE_RUNNING, running, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestStore(t)
			s.insertService("g", "model/a", "always", c.batch...)
			s.move("g/srv", "w1", assigned)
			s.event("g/srv", "w1", ready("http://10.0.0.5:30000"))
			c.end(s)
			srv, g := s.task("g/srv"), s.Snapshot().Graph("g")
			if g.State != c.graph || srv.State != c.srv || (c.reason != "" && srv.Reason != c.reason) {
				t.Fatalf("graph %s, service %s %q; want graph %s, service %s %q", g.State, srv.State, srv.Reason, c.graph, c.srv, c.reason)
			}
			if srv.State != cancelled {
				return
			}
			// Stopped: the endpoint is withdrawn at once, the attempt stays
			// active (its resources booked) until the worker reports it
			// stopped.
			if eps := s.Snapshot().ServiceEndpoints("model/a"); len(eps) != 0 {
				t.Fatalf("endpoints of a stopped service: %v", urls(eps))
			}
			if !srv.Stopping() {
				t.Fatalf("stopped service's attempt %+v is not active until its worker stops it", srv.CurrentAttempt())
			}
			s.event("g/srv", "w1", &wire.AttemptEvent{Kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED})
			if srv := s.task("g/srv"); srv.Stopping() || srv.State != cancelled {
				t.Fatalf("after the worker's STOPPED: %s, stopping %v", srv.State, srv.Stopping())
			}
			if got := s.Snapshot().Graph("g").State; got != c.graph {
				t.Fatalf("graph %s after the service stopped, want %s", got, c.graph)
			}
		})
	}
}

// A task waiting for a service its own graph provided is cancelled when
// that service ended for good and no task provides it any more; while
// another graph's task still provides it, it keeps waiting, until that one
// ends too (here with its graph's cancel).
func TestWaitersOfAnEndedServiceAreCancelled(t *testing.T) {
	for _, other := range []bool{false, true} {
		s := newTestStore(t)
		s.insertService("g", "model/a", "never", "u", "v<u")
		s.write(func(txn *Txn) {
			cur := txn.Task("g/u")
			n := cur.clone()
			n.Spec = &wire.TaskSpec{Name: "u", UsesServices: []string{"model/a"}}
			txn.putTask(cur, n)
		})
		if other {
			s.insertService("h", "model/a", "always")
		}
		s.move("g/srv", "w1", assigned)
		s.event("g/srv", "w1", &wire.AttemptEvent{Kind: evExited, ExitCode: 1})
		u, v, g := s.task("g/u"), s.task("g/v"), s.Snapshot().Graph("g")
		if other {
			if u.State != queued || g.State != wire.GraphState_GRAPH_STATE_RUNNING {
				t.Fatalf("with another provider: u %s, graph %s; want u QUEUED, graph RUNNING", u.State, g.State)
			}
			// The last provider, in another graph, ends: g's waiter goes.
			s.write(func(txn *Txn) {
				txn.CancelGraph("h", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "done with it", int64(s.index))
			})
			u, v, g = s.task("g/u"), s.task("g/v"), s.Snapshot().Graph("g")
		}
		want := `service "model/a" ended (task g/srv failed: exit code 1) and no task provides it`
		if u.State != cancelled || u.Reason != want || v.State != cancelled || v.Reason != ReasonUpstreamFailed ||
			g.State != wire.GraphState_GRAPH_STATE_FAILED {
			t.Fatalf("u %s %q, v %s %q, graph %s; want u cancelled %q, v upstream_failed, graph FAILED", u.State, u.Reason, v.State, v.Reason, g.State, want)
		}
	}
}
