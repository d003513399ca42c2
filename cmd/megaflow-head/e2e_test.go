package main_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testbin"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// freePorts returns n distinct free loopback addresses: every listener is
// held until all are picked (picked one at a time, the kernel may hand out
// a port it has just handed out: CI once gave h1's gRPC port to h2's
// gossip, and h2 could not start).
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out
}

type proc struct {
	id, grpc string
	args     []string
	cmd      *exec.Cmd
	log      *bytes.Buffer
}

func (p *proc) start(t *testing.T, bin string) {
	t.Helper()
	p.log = &bytes.Buffer{}
	p.cmd = exec.Command(bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// Three megaflow-head processes bootstrap through gossip; the leader is
// killed with SIGKILL while a client writes; the client carries on, and the
// killed head restarted on its data dir catches up.
func TestHeadProcessesSurviveKill9OfLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and runs processes")
	}
	dir := t.TempDir()
	bin := testbin.Path(t, "megaflow-head")
	cli := testbin.Path(t, "megaflow")
	var procs []*proc
	var seeds []string
	ports := freePorts(t, 9)
	for i := range 3 {
		gossip := ports[3*i]
		seeds = append(seeds, gossip)
		p := &proc{id: fmt.Sprintf("h%d", i+1), grpc: ports[3*i+1]}
		p.args = []string{"--node-id", p.id, "--data-dir", filepath.Join(dir, p.id),
			"--raft-addr", ports[3*i+2], "--grpc-addr", p.grpc, "--gossip-addr", gossip, "--bootstrap-expect", "3", "--http-addr", "127.0.0.1:0"}
		procs = append(procs, p)
	}
	for i, p := range procs {
		p.args = append(p.args, "--join", seeds[(i+1)%3])
		p.start(t, bin)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				_ = p.cmd.Wait()
			}
			if t.Failed() {
				t.Logf("--- %s log:\n%s", p.id, p.log.String())
			}
		}
	})
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.grpc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, addrs, client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var leader string
	testcluster.WaitFor(t, 60*time.Second, "a leader", func() bool {
		st, err := cl.ClusterStatus(ctx)
		if err == nil {
			leader = st.LeaderId
		}
		return err == nil && leader != "" && len(st.Heads) == 3
	})

	submit := func(from, to int) uint64 {
		var last uint64
		for i := from; i < to; i++ {
			g := &client.GraphSpec{Id: fmt.Sprintf("g%d", i)}
			for j := range 50 {
				g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", j), Image: "busybox", Command: []string{"true"}})
			}
			res, err := cl.Submit(ctx, g)
			if err != nil {
				t.Fatalf("submit g%d: %v", i, err)
			}
			last = res.Index
		}
		return last
	}
	submit(0, 20)
	var killed *proc
	for _, p := range procs {
		if p.id == leader {
			killed = p
		}
	}
	if err := killed.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = killed.cmd.Wait()
	last := submit(20, 40) // the client follows the new leader

	// The CLI sees a new leader.
	out, err := exec.Command(cli, "cluster", "--heads", strings.Join(addrs, ",")).CombinedOutput()
	if err != nil || strings.Contains(string(out), "leader "+leader+" ") {
		t.Fatalf("megaflow cluster after kill: %v\n%s", err, out)
	}
	for i := range 40 {
		g, _, err := cl.GetGraph(ctx, fmt.Sprintf("g%d", i), client.ReadOptions{MinIndex: last})
		if err != nil || g.TaskCount != 50 {
			t.Fatalf("graph g%d after failover: %v, err %v", i, g, err)
		}
	}
	// Restart the killed head on its data dir; it catches up.
	killed.start(t, bin)
	kc, err := client.Dial(ctx, []string{killed.grpc})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	testcluster.WaitFor(t, 60*time.Second, "the restarted head to catch up", func() bool {
		g, _, err := kc.GetGraph(ctx, "g39", client.ReadOptions{})
		return err == nil && g.TaskCount == 50
	})
	if os.Getenv("MEGAFLOW_TEST_LOG") == "1" {
		t.Logf("cluster:\n%s", out)
	}
}
