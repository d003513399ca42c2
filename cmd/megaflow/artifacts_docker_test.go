package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/artifact/backends"
	"github.com/megaflow/megaflow/internal/blob/s3blob/s3fake"
	"github.com/megaflow/megaflow/internal/blob/spool"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/testimage"
	"github.com/megaflow/megaflow/worker"
)

// TestArtifactsEndToEndDockerS3 runs a two-task graph in containers on the
// real Docker Engine with an S3 artifact store (gofakes3, in process) that
// is down while the parent finishes: the parent succeeds with its
// artifacts pending, the child is still placed, and once the store is back
// everything lands, the child reads its parent's output file from
// MEGAFLOW_INPUT_DIR, and the CLI fetches logs and files of the finished
// tasks with their checksums checked. A symlink out of the output
// directory is refused.
func TestArtifactsEndToEndDockerS3(t *testing.T) {
	_, image := testimage.Require(t)
	// Credentials through the standard AWS chain, as a daemon gets them.
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	s3, err := s3fake.Start("art")
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	store, err := backends.Open(ctx, s3.StoreURL("art", "cluster1"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.Artifacts = store }})
	rt, err := docker.New(docker.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	spoolDir := t.TempDir()
	var sp *spool.Spool
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Capacity: worker.Capacity{CPUMillis: 4000, MemoryBytes: 8 << 30},
		Configure: func(cfg *worker.Config) {
			cfg.ClusterName = "mft-" + testimage.RunID() + "-artifacts"
			sc := spool.DefaultConfig(spoolDir)
			sc.MinBackoff, sc.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
			if sp, err = spool.New(sc, store); err != nil {
				t.Fatal(err)
			}
			cfg.Artifacts, cfg.Spool = store, sp
			cfg.LogShipInterval = 100 * time.Millisecond
		}})
	defer func() { sp.Close() }() // after the worker stopped (cleanups run later)

	big := strings.Repeat("a", 70000) // over the table's 64 KiB result limit
	g := &client.GraphSpec{Id: "art", Tasks: []*client.TaskSpec{
		{Name: "gen", Image: image, Command: []string{"sh", "-c",
			`echo gen says hello; mkdir -p $MEGAFLOW_OUTPUT_DIR/data; echo '{"x": 42}' > $MEGAFLOW_OUTPUT_DIR/data/out.json; ` +
				`ln -s /etc/passwd $MEGAFLOW_OUTPUT_DIR/leak; echo 'MEGAFLOW_RESULT {"ok": true}'`},
			OutputPaths: []string{"data", "leak"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}},
		{Name: "use", Image: image, DependsOn: []string{"gen"}, Command: []string{"sh", "-c",
			`echo "child got: $(cat $MEGAFLOW_INPUT_DIR/gen/data/out.json)"; cp $MEGAFLOW_INPUT_DIR/gen/data/out.json $MEGAFLOW_OUTPUT_DIR/copy.json; ` +
				`echo "MEGAFLOW_RESULT {\"pad\": \"$(head -c 70000 /dev/zero | tr '\0' a)\"}"`},
			OutputPaths: []string{"copy.json"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}},
	}}
	cl := c.Client()
	s3.SetMode(s3fake.Unavailable)
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 3*time.Minute, "gen SUCCEEDED with its artifacts pending while the store is down", func() bool {
		task, _, err := cl.GetTask(ctx, "art/gen", client.ReadOptions{})
		return err == nil && task.State == client.TaskSucceeded && task.Attempts[0].ArtifactsPending
	})
	testcluster.WaitFor(t, 3*time.Minute, "use placed although the store is down", func() bool {
		task, _, err := cl.GetTask(ctx, "art/use", client.ReadOptions{})
		return err == nil && len(task.Attempts) > 0
	})
	s3.SetMode(s3fake.Up)
	res, err := cl.Wait(ctx, "art")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != client.GraphSucceeded {
		t.Fatalf("graph %v", res)
	}
	for _, id := range []string{"art/gen", "art/use"} {
		testcluster.WaitFor(t, 3*time.Minute, id+" artifacts landed", func() bool {
			task, _, err := cl.GetTask(ctx, id, client.ReadOptions{})
			return err == nil && !task.Attempts[len(task.Attempts)-1].ArtifactsPending
		})
	}
	use, _, err := cl.GetTask(ctx, "art/use", client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Artifact string `json:"megaflow_artifact"`
		Size     int64  `json:"size"`
	}
	if err := json.Unmarshal(use.Result, &ref); err != nil || ref.Artifact != "result.json" || ref.Size < 70000 {
		t.Fatalf("use's result in the table = %.200q, want a reference to result.json", use.Result)
	}

	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")
	code, out, errOut := cli(t, heads, "logs", "art/use")
	if code != 0 || !strings.Contains(out, `child got: {"x": 42}`) {
		t.Fatalf("logs art/use: %d %q %q", code, out, errOut)
	}
	code, out, errOut = cli(t, heads, "logs", "-f", "--attempt", "1", "art/gen")
	if code != 0 || !strings.HasPrefix(out, "gen says hello\n") {
		t.Fatalf("logs -f art/gen: %d %q %q", code, out, errOut)
	}
	code, out, errOut = cli(t, heads, "artifacts", "ls", "art/gen")
	if code != 0 || !strings.Contains(out, "data/out.json") || strings.Contains(out, "leak") ||
		!strings.Contains(errOut, `"leak" refused`) {
		t.Fatalf("artifacts ls art/gen: %d %q %q", code, out, errOut)
	}
	dir := t.TempDir()
	code, out, errOut = cli(t, heads, "artifacts", "get", "art/use", "-o", dir)
	if code != 0 || strings.Count(out, " ok\n") != 2 {
		t.Fatalf("artifacts get art/use: %d %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "copy.json")); err != nil || string(b) != "{\"x\": 42}\n" {
		t.Fatalf("copy.json = %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "result.json")); err != nil || !strings.Contains(string(b), big) {
		t.Fatalf("result.json: %d bytes, %v", len(b), err)
	}
	code, _, errOut = cli(t, heads, "artifacts", "get", "art/gen", "nope.txt", "-o", dir)
	if code != exitError || !strings.Contains(errOut, `has no file "nope.txt"`) {
		t.Fatalf("get of a missing file: %d %q", code, errOut)
	}
	code, out, errOut = cli(t, heads, "delete", "art")
	if code != 0 || !strings.Contains(out, "deleted graph art: 2 tasks") {
		t.Fatalf("delete art: %d %q %q", code, out, errOut)
	}
	if left, err := store.List(ctx, "default/art/"); err != nil || len(left) != 0 {
		t.Fatalf("after delete the store holds %d objects of the graph (%v)", len(left), err)
	}
}
