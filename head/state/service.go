package state

import (
	"fmt"
	"iter"
	"net/url"
	"slices"
	"strings"

	"github.com/megaflow/megaflow/internal/wire"
)

// Service tasks (TaskSpec.kind TASK_KIND_SERVICE) in the table.
//
// A service task is long-running: its worker assigns it a port, probes its
// readiness and reports SERVICE_READY with the endpoint ("http://host:port")
// once the probe passes. The endpoint is recorded on the attempt
// (Attempt.Endpoint) and is live exactly while the task is RUNNING on that
// attempt: every path that ends the attempt (an exit, a failure, a timeout,
// a cancel, a lost worker) withdraws it in the same transaction, with no
// command of its own. The service index lists the service tasks that have
// not ended, by service name.
//
// Restart policy (ServiceSpec.restart_policy), applied when an attempt of a
// service task ends on its own (EXITED, FAILED, TIMED_OUT):
//   - "always" (and ""): the task goes back to QUEUED for a new attempt,
//     whatever the exit code;
//   - "on-failure": the same unless the attempt EXITED 0, which ends the
//     task SUCCEEDED;
//   - "never": the attempt ends the task as a batch task's would (SUCCEEDED
//     on exit 0; a failure is retried only within max_retries).
//
// A restart is a new attempt through the head, placed by the scheduler like
// a retry, after a backoff grown by Task.Restarts (RetryBackoff); restarts
// are counted in
// Task.Restarts and never charged to max_retries, so "always" restarts
// without end, like a Kubernetes pod's. Attempts lost with their worker
// count against MaxLostAttempts as for any task. A cancel (of the task or
// its graph) ends a service task CANCELLED.

// Services end with their graph. A graph with at least one batch task is
// over when its batch tasks are: the moment the last of them ends (however
// it ends, short of a cancel of the whole graph), the graph's service tasks
// that have not ended are CANCELLED with ReasonStoppedWithGraph in the same
// transaction (stopGraphServices), their attempts kept active until their
// workers report them stopped, as for any cancel. Those services count as
// neither success nor failure for the graph's state: a graph whose batch
// tasks all succeeded SUCCEEDS (countMove). A graph of service tasks only
// runs until they end on their own or are cancelled.

// ReasonStoppedWithGraph is the reason of a service task stopped because
// every batch task of its graph had ended.
const ReasonStoppedWithGraph = "stopped with its graph: every batch task of the graph has ended"

// stopGraphServices cancels, with ReasonStoppedWithGraph, the service tasks
// of graph graphID that have not ended, if they are all that is left of the
// graph. moveTask calls it after a batch task of the graph ended.
func (t *Txn) stopGraphServices(graphID string, nanos int64) {
	g := t.Graph(graphID)
	left := g.TaskCount - g.Counts.done()
	if left == 0 {
		return
	}
	var live []*Task
	for it := get(t.taskTxnFor(indexGraphService), tableTasks, indexGraphService, graphID); ; {
		o := it.Next()
		if o == nil {
			break
		}
		if live = append(live, o.(*Task)); uint32(len(live)) > left {
			panic(fmt.Sprintf("state: index %d: graph %q has %d live service tasks but %d tasks not ended", t.index, graphID, len(live), left))
		}
	}
	if uint32(len(live)) != left {
		return // batch tasks are still to end
	}
	for _, s := range live { // in id order: the index's order within a graph
		t.move(t.Task(s.ID), cancelled, wire.ReasonCode_REASON_CODE_STOPPED_WITH_GRAPH, ReasonStoppedWithGraph, nanos, nil)
	}
}

// stoppedWithGraph counts graph graphID's service tasks that
// stopGraphServices cancelled.
func (t *Txn) stoppedWithGraph(graphID string) uint32 {
	var n uint32
	for _, task := range t.TasksOfGraph(graphID) {
		if task.State == cancelled && task.ReasonCode == wire.ReasonCode_REASON_CODE_STOPPED_WITH_GRAPH && task.ServiceName() != "" {
			n++
		}
	}
	return n
}

// serviceEnded handles a service task that ended for good (it failed or
// exited under its restart policy, was cancelled, or was stopped with its
// graph). When no task of any graph provides its service any more,
// every task that waits for that service, has not started (PENDING or
// QUEUED), and whose own graph provided the service (a service task of
// that name, now ended) is CANCELLED, naming the service and how its
// graph's provider ended, and its dependents resolved, as upstream_failed
// does for depends_on: it would otherwise wait forever. Waiters in graphs
// that never provided the service keep waiting: a provider may still be
// submitted.
func (t *Txn) serviceEnded(svc *Task, nanos int64) {
	name := svc.ServiceName()
	if it := get(t.taskTxnFor(indexService), tableTasks, indexService, name); it.Next() != nil {
		return // another task still provides it
	}
	var waiters []*Task
	for _, st := range []wire.TaskState{pending, queued} {
		it := get(t.taskTxn(), tableTasks, indexState, st)
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if task := raw.(*Task); slices.Contains(task.Spec.GetUsesServices(), name) {
				waiters = append(waiters, task)
			}
		}
	}
	why := map[string]string{} // graph id -> the reason, "" if the graph did not provide the service
	for _, w := range waiters {
		cur := t.Task(w.ID)
		if (cur.State != pending && cur.State != queued) || cur.GraphID == t.cancelling {
			continue // an earlier waiter's dependents took it, or its graph's cancel will
		}
		r, seen := why[cur.GraphID]
		if !seen {
			r = serviceGoneReason(t.TasksOfGraph(cur.GraphID), name)
			why[cur.GraphID] = r
		}
		if r == "" {
			continue
		}
		n := t.move(cur, cancelled, wire.ReasonCode_REASON_CODE_SERVICE_GONE, r, nanos, nil)
		if _, err := t.ResolveDependents(n, nanos); err != nil {
			panic(fmt.Sprintf("state: index %d: %v", t.index, err))
		}
	}
}

// serviceGoneReason is the reason of a task cancelled because service name,
// provided by a task among tasks (its graph's), ended with no provider
// left; "" when none of tasks provides name.
func serviceGoneReason(tasks []*Task, name string) string {
	for _, p := range tasks {
		if p.ServiceName() != name || !IsTerminal(p.State) {
			continue
		}
		why := fmt.Sprintf("service %q ended (task %s %s", name, p.ID, strings.ToLower(strings.TrimPrefix(p.State.String(), "TASK_STATE_")))
		if p.Reason != "" {
			why += ": " + p.Reason
		}
		return why + ") and no task provides it"
	}
	return ""
}

// Restart policies of ServiceSpec.restart_policy (internal/spec checks
// them).
const (
	restartAlways    = "always"
	restartOnFailure = "on-failure"
)

// evServiceReady is the event a worker sends when a service attempt passed
// its readiness probe.
const evServiceReady = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_SERVICE_READY

// MaxEndpointBytes bounds an endpoint URL a worker may publish.
const MaxEndpointBytes = 256

// ServiceName returns the name the task's endpoint is published under
// ("model/qwen-7b"), or "" if the task is not a service.
func (t *Task) ServiceName() string {
	if t.Spec.GetKind() != wire.TaskKind_TASK_KIND_SERVICE {
		return ""
	}
	return t.Spec.GetService().GetName()
}

// LiveEndpoint returns the endpoint the task serves now: its current
// attempt's, if the task is RUNNING and the attempt reported ready; else "".
func (t *Task) LiveEndpoint() string {
	if t.State != running {
		return ""
	}
	if a := t.CurrentAttempt(); a != nil && a.State == running {
		return a.Endpoint
	}
	return ""
}

// Endpoint is one live endpoint of a service.
type Endpoint struct {
	// URL is "http://host:port".
	URL string
	// TaskID and Attempt name the attempt serving it; WorkerID runs it.
	TaskID   string
	Attempt  uint32
	WorkerID string
	// ReadyUnixNanos is when it became ready (leader time).
	ReadyUnixNanos int64
}

// Service is one service name with the tasks that serve it.
type Service struct {
	// Name is the service name, e.g. "model/qwen-7b".
	Name string
	// Tasks are the service tasks of that name that have not ended, in id
	// order.
	Tasks []*Task
}

// Endpoints returns the live endpoints of s's tasks, sorted by URL.
func (s Service) Endpoints() []Endpoint {
	var out []Endpoint
	for _, t := range s.Tasks {
		if u := t.LiveEndpoint(); u != "" {
			a := t.CurrentAttempt()
			out = append(out, Endpoint{URL: u, TaskID: t.ID, Attempt: a.Number, WorkerID: a.WorkerID, ReadyUnixNanos: a.ReadyUnixNanos})
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return strings.Compare(a.URL, b.URL) })
	return out
}

// ServiceEndpoints returns the live endpoints of the service name, sorted
// by URL; none if no task serves it now. The leader calls it to gate and
// build the environment of tasks that use the service.
func (v *View) ServiceEndpoints(name string) []Endpoint {
	return v.service(name).Endpoints()
}

func (v *View) service(name string) Service {
	return Service{Name: name, Tasks: collect[*Task](get(v.txn(), tableTasks, indexService, name))}
}

// Services iterates the services that have a task that has not ended, by
// name. ListServices calls it.
func (v *View) Services() iter.Seq[Service] {
	return func(yield func(Service) bool) {
		var cur Service
		it := get(v.txn(), tableTasks, indexService)
		for raw := it.Next(); raw != nil; raw = it.Next() {
			t := raw.(*Task)
			if name := t.ServiceName(); name != cur.Name {
				if cur.Name != "" && !yield(cur) {
					return
				}
				cur = Service{Name: name}
			}
			cur.Tasks = append(cur.Tasks, t)
		}
		if cur.Name != "" {
			yield(cur)
		}
	}
}

// Service returns the service name with its tasks that have not ended (no
// tasks: nothing serves it).
func (v *View) Service(name string) Service { return v.service(name) }

// serviceReady records a service attempt's endpoint (SERVICE_READY): the
// task must be a service, the attempt current and active (fenced by the
// caller), the endpoint an http URL with a host and port of at most
// MaxEndpointBytes. An attempt still ASSIGNED starts first. A duplicate
// changes nothing. The task's reason becomes "serving <endpoint>".
func (t *Txn) serviceReady(cur *Task, ev *wire.AttemptEvent, nanos int64) bool {
	ep := ev.GetEndpoint()
	if cur.ServiceName() == "" || !validEndpoint(ep) {
		return false
	}
	if a := cur.CurrentAttempt(); a.Endpoint == ep {
		return false
	}
	cur = t.started(cur, nanos)
	n := cur.clone()
	a := n.editAttempt()
	a.Endpoint, a.ReadyUnixNanos = ep, nanos
	n.Reason, n.ReasonCode = "serving "+ep, wire.ReasonCode_REASON_CODE_SERVING
	n.UpdateUnixNanos, n.ModifyIndex = nanos, t.index
	t.putTask(cur, n)
	t.emitTask(n, nanos)
	return true
}

// validEndpoint reports whether s is "http://host:port" (or https) and no
// longer than MaxEndpointBytes.
func validEndpoint(s string) bool {
	if s == "" || len(s) > MaxEndpointBytes {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" && u.Port() != ""
}

// serviceRestarts reports whether the end of a service attempt that ev
// reports restarts the task under its restart policy; see the comment at
// the top of this file.
func serviceRestarts(cur *Task, ev *wire.AttemptEvent) bool {
	if cur.ServiceName() == "" {
		return false
	}
	failure := false
	switch ev.GetKind() {
	case evExited:
		failure = ev.GetExitCode() != 0
	case evFailed, evTimedOut:
		failure = true
	default:
		return false
	}
	switch cur.Spec.GetService().GetRestartPolicy() {
	case "", restartAlways:
		return true
	case restartOnFailure:
		return failure
	}
	return false
}

// restartService ends cur's active attempt as ev reports and sends the task
// back to QUEUED for a new attempt, not before backoff.Wait(restarts so
// far) from now, counting the restart in Task.Restarts.
func (t *Txn) restartService(cur *Task, ev *wire.AttemptEvent, nanos int64, backoff RetryBackoff) {
	end := attemptEnd{exitCode: ev.GetExitCode(), backoff: backoff}
	switch ev.GetKind() {
	case evExited:
		cur = t.started(cur, nanos)
		end.state = succeeded
		end.reason, end.code = "exited 0", wire.ReasonCode_REASON_CODE_SERVICE_RESTART
		if ev.GetExitCode() != 0 {
			end.state, end.reason, end.code = failed, exitReason(ev), exitCodeOf(ev)
		}
	case evFailed:
		end.state, end.reason, end.code = failed, failReason(ev), exitCodeOf(ev)
	case evTimedOut:
		cur = t.started(cur, nanos)
		end.state, end.reason, end.code = timedOut, ev.GetReason(), wire.ReasonCode_REASON_CODE_TIMEOUT
		if end.reason == "" {
			end.reason = "timed out"
		}
	}
	t.endAttempt(cur, queued, "restarting: "+end.reason, end, nanos, func(n *Task) {
		n.NotBeforeUnixNanos = 0
		if wait := end.backoff.Wait(n.Restarts); wait > 0 {
			n.NotBeforeUnixNanos = nanos + wait
		}
		n.Restarts++
	})
}
