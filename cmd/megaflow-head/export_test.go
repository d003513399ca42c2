package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/cluster"
	"github.com/megaflow/megaflow/runtime/fake"
)

// The way back from a lost quorum: the table a stopped head left on disk,
// exported to a file by `megaflow-head export-snapshot`, restored into a
// fresh cluster, holds the finished graph with its results.
func TestExportSnapshotOfAStoppedHead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(dir string) (*cluster.Cluster, *client.Client) {
		c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Heads: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitLeader(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		cl, err := c.Dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c, cl
	}
	old, cl := run(t.TempDir())
	if _, err := old.AddWorker(cluster.WorkerOptions{Runtime: fake.New(nil)}); err != nil {
		t.Fatal(err)
	}
	g := &client.GraphSpec{Id: "lost-quorum"}
	for i := range 3 {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", i), Image: "busybox", Command: []string{"/bin/work"},
			Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}})
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.Wait(ctx, g.Id); err != nil || got.State != client.GraphSucceeded {
		t.Fatalf("graph: %v, %v", got, err)
	}
	cl.Close()
	dataDir := old.Members[0].DataDir
	old.Stop()

	out := filepath.Join(t.TempDir(), "table.snap")
	var stdout bytes.Buffer
	cmd := newCommand()
	cmd.SetOut(&stdout)
	cmd.SetArgs([]string{"export-snapshot", "--data-dir", dataDir, "--out", out})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("export-snapshot: %v", err)
	}
	if !strings.Contains(stdout.String(), "1 graphs (0 archived), 3 tasks, 1 workers") {
		t.Fatalf("export-snapshot said %q", stdout.String())
	}

	fresh, cl := run(t.TempDir())
	defer fresh.Stop()
	defer cl.Close()
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := cl.SnapshotRestore(ctx, f, false); err != nil {
		t.Fatal(err)
	}
	got, _, err := cl.GetGraph(ctx, g.Id, client.ReadOptions{RequireLeader: true})
	if err != nil || got.State != client.GraphSucceeded || got.Counts.GetSucceeded() != 3 {
		t.Fatalf("graph after the restore: %v, %v", got, err)
	}

	// A running head's directory is refused (its lock), naming it.
	cmd = newCommand()
	cmd.SetArgs([]string{"export-snapshot", "--data-dir", fresh.Members[0].DataDir, "--out", out + "2"})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil {
		t.Fatal("export-snapshot of a running head's directory succeeded")
	}
	if _, err := os.Stat(out + "2"); !os.IsNotExist(err) {
		t.Fatalf("a failed export left %s (stat: %v)", out+"2", err)
	}
}
