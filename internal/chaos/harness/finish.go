package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/chaos/check"
	"github.com/megaflow/megaflow/internal/chaos/fault"
	"github.com/megaflow/megaflow/internal/chaos/history"
	"github.com/megaflow/megaflow/internal/wire"
)

// finish heals the cluster, waits until every graph is finished, stops the
// workers, waits until every head applied the same index, reads every
// head's table, stops the heads and counts the processes left. It fills
// the parts of the verdict's input that come from the cluster.
func (c *cluster) finish(ctx context.Context) check.Input {
	var in check.Input
	c.healAll(ctx)
	problem := func(err error) {
		if err != nil && in.QuiesceError == "" {
			in.QuiesceError = err.Error()
		}
	}
	problem(waitFor(ctx, 90*time.Second, "a leader after healing", func() bool { return c.leader(ctx) >= 0 }))
	problem(waitFor(ctx, 3*time.Minute, "every graph to finish", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		gs, _, err := c.admin.ListGraphs(cctx, client.GraphFilter{State: client.GraphRunning, PageSize: 1, Read: client.ReadOptions{RequireLeader: true}})
		return err == nil && len(gs) == 0
	}))
	for _, p := range c.workers {
		if !p.stop(45 * time.Second) {
			problem(fmt.Errorf("worker %s did not stop within 45 s of SIGTERM (its goroutines are in %s)", p.name, p.log))
		}
	}
	// A stopped worker the leader did not see leave (its gossip leave lost
	// in a fault's wake) is declared down at its lease's end: a commit
	// after the heads seemed to agree. Wait until the leader's table has
	// no worker ALIVE.
	problem(waitFor(ctx, 90*time.Second, "every worker left or down in the leader's table", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ws, err := c.admin.ListWorkers(cctx, client.ReadOptions{RequireLeader: true})
		if err != nil {
			return false
		}
		for _, w := range ws {
			if w.Status == wire.WorkerStatus_WORKER_STATUS_ALIVE {
				return false
			}
		}
		return true
	}))
	// The heads agree once each applied the leader's commit index and it
	// stays put for a second.
	var applied []uint64
	stable := 0
	problem(waitFor(ctx, 90*time.Second, "every head at the same applied index", func() bool {
		idx := c.appliedIndexes(ctx)
		same := len(idx) == len(c.heads) && idx[0] > 0
		for _, i := range idx {
			same = same && i == idx[0]
		}
		if same && len(applied) > 0 && applied[0] == idx[0] {
			stable++
		} else {
			stable = 0
		}
		applied = idx
		return same && stable >= 10
	}))
	lead := c.leader(ctx)
	for i := range c.heads {
		if lead < 0 {
			lead = 0
		}
		j := (lead + i) % len(c.heads) // the leader's table first
		t, err := c.table(ctx, j)
		if err != nil {
			problem(fmt.Errorf("read head %s's table: %w", c.heads[j].name, err))
			continue
		}
		in.Tables = append(in.Tables, t)
	}
	// megaflow-head gives its own shutdown 30 s; 45 s leaves it room on a
	// loaded machine. One that hangs dumps its goroutines into its log.
	for _, p := range c.heads {
		if p.stop(45 * time.Second) {
			continue
		}
		if knownRaftPipelineHang(p.log) {
			problem(fmt.Errorf("head %s's shutdown hung in hashicorp/raft's pipeline replication deadlock (goroutines in %s): head/consensus must not pipeline replication", p.name, p.log))
			continue
		}
		problem(fmt.Errorf("head %s did not stop within 45 s of SIGTERM (its goroutines are in %s)", p.name, p.log))
	}
	// Processes left in the hosts once every head and worker is gone:
	// tasks whose process group outlived its worker.
	var left []string
	_ = waitFor(ctx, 10*time.Second, "the hosts to be empty", func() bool {
		left = left[:0]
		for _, h := range c.net.Hosts {
			pids, _ := c.net.Pids(ctx, h)
			for _, p := range pids {
				left = append(left, fmt.Sprintf("%s: %s", h.Name, cmdline(p)))
			}
		}
		return len(left) == 0
	})
	in.LeakedProcesses = len(left)
	for _, l := range left {
		in.LogProblems = append(in.LogProblems, "leaked process "+l)
	}
	return in
}

// cmdline is pid's command line, for reports.
func cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return strconv.Itoa(pid)
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return fmt.Sprintf("%d %s", pid, s)
}

// appliedIndexes asks every head for its applied index (0 for one that
// does not answer).
func (c *cluster) appliedIndexes(ctx context.Context) []uint64 {
	out := make([]uint64, len(c.heads))
	for i, addr := range c.grpc {
		cl, err := dialOne(ctx, addr)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if st, err := cl.ClusterStatus(cctx); err == nil {
			out[i] = st.AppliedIndex
		}
		cancel()
		cl.Close()
	}
	return out
}

// table reads head i's whole table (its own state: no forwarding).
func (c *cluster) table(ctx context.Context, i int) (check.Table, error) {
	t := check.Table{Head: c.heads[i].name, Tasks: map[string]history.TaskView{}, Graphs: map[string]string{}}
	cl, err := dialOne(ctx, c.grpc[i])
	if err != nil {
		return t, err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := cl.ClusterStatus(cctx)
	if err != nil {
		return t, err
	}
	t.Applied = st.AppliedIndex
	for tok := ""; ; {
		ts, next, err := cl.ListTasks(cctx, client.TaskFilter{PageSize: 1000, PageToken: tok, OmitSpec: true})
		if err != nil {
			return t, err
		}
		for _, task := range ts {
			t.Tasks[task.Id] = taskView(task)
		}
		if tok = next; tok == "" {
			break
		}
	}
	for tok := ""; ; {
		gs, next, err := cl.ListGraphs(cctx, client.GraphFilter{PageSize: 1000, PageToken: tok})
		if err != nil {
			return t, err
		}
		for _, g := range gs {
			t.Graphs[g.Id] = g.State.String()
		}
		if tok = next; tok == "" {
			break
		}
	}
	if st2, err := cl.ClusterStatus(cctx); err != nil || st2.AppliedIndex != t.Applied {
		return t, fmt.Errorf("head %s's applied index moved while its table was read", t.Head)
	}
	return t, nil
}

// readExecutions reads every execution file under dir
// (<host>/exec/<graph>__<task>), keyed by task id.
func readExecutions(dir string) (map[string][]check.Execution, error) {
	out := map[string][]check.Execution{}
	hosts, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		files, _ := os.ReadDir(filepath.Join(dir, h.Name(), "exec"))
		for _, f := range files {
			graph, task, ok := strings.Cut(f.Name(), "__")
			if !ok {
				continue
			}
			id := graph + "/" + task
			fh, err := os.Open(filepath.Join(dir, h.Name(), "exec", f.Name()))
			if err != nil {
				return out, err
			}
			sc := bufio.NewScanner(fh)
			for sc.Scan() {
				if e, ok := parseExecution(sc.Text()); ok {
					out[id] = append(out[id], e)
				}
			}
			fh.Close()
		}
	}
	return out, nil
}

// parseExecution parses "start|end|stop <attempt> <worker> <unix ns>"
// (stop: the execution ended by a signal).
func parseExecution(line string) (check.Execution, bool) {
	f := strings.Fields(line)
	if len(f) != 4 || (f[0] != "start" && f[0] != "end" && f[0] != "stop") {
		return check.Execution{}, false
	}
	a, err1 := strconv.ParseUint(f[1], 10, 32)
	at, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return check.Execution{}, false
	}
	return check.Execution{Attempt: uint32(a), Worker: f[2], End: f[0] != "start", Stopped: f[0] == "stop", At: at}, true
}

// freezes returns the worker freezes among faults as windows of Unix ns
// (start is the Unix time of the run's offset 0).
func freezes(faults []Injected, start time.Time) []check.Freeze {
	var out []check.Freeze
	for _, f := range faults {
		if f.Fault.Kind == fault.FreezeWorker {
			out = append(out, check.Freeze{Worker: f.Target, From: start.UnixNano() + f.Start, To: start.UnixNano() + f.End})
		}
	}
	return out
}

// knownRaftPipelineHang reports whether the goroutine dump at the end of
// the log at path shows hashicorp/raft v1.8.0's pipeline replication
// deadlock: with the transport's default MaxRPCsInFlight (2) both channels
// of a netPipeline are unbuffered; once pipelineDecode returns (a follower
// answered Success=false, or the leader stepped down), one more send parks
// on inprogressCh while decodeResponses parks on doneCh, the pipeline is
// never closed, and Raft's Shutdown waits for that goroutine forever. After
// an isolated or deaf leader steps down it is harmless until shutdown; while
// it still leads, the follower gets heartbeats but no more entries. The
// harness found it; head/consensus has since turned pipelining off, and a
// run that shows it again fails naming it.
func knownRaftPipelineHang(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	i := strings.LastIndex(string(b), "SIGQUIT: quit")
	if i < 0 {
		return false
	}
	dump := string(b[i:])
	return strings.Contains(dump, "raft.(*netPipeline).AppendEntries") && strings.Contains(dump, "raft.(*netPipeline).decodeResponses") &&
		strings.Contains(dump, "raft.(*raftState).waitShutdown")
}
