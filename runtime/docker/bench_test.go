package docker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/testimage"
)

// BenchmarkTaskOverhead measures this runtime's cost per task, Start + Wait
// + Remove of `true` in the busybox test image with its output copied to a
// log file, against `docker run --rm` of the same image and command with
// the same isolation flags through the docker CLI, alternating the two in
// one run so both see the same engine. It reports the median of each and
// their ratio (runtime/cli; the target is <= 1.05). A third arm, the bare
// API sequence (create, start, wait, remove, with the same host config but
// no log copy and no inspect), shows what this runtime adds on top of the
// engine itself (api-ratio = runtime/api).
//
//	go test -run '^$' -bench TaskOverhead -benchtime 30x ./runtime/docker
func BenchmarkTaskOverhead(b *testing.B) {
	_, tag := testimage.Require(b)
	dockerCLI, err := exec.LookPath("docker")
	if err != nil {
		if os.Getenv("CI") != "" {
			b.Fatal("the docker CLI is not on PATH")
		}
		b.Skip("the docker CLI is not on PATH")
	}
	rt, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()
	dir := b.TempDir()
	labels := testimage.Labels(map[string]string{"megaflow.test.name": "bench"})

	viaRuntime := func(i int) time.Duration {
		spec := contract.Spec{
			Name:    fmt.Sprintf("mf-bench-%s-%d", testimage.RunID(), i),
			Image:   tag,
			Command: []string{"true"},
			Labels:  labels,
			LogPath: filepath.Join(dir, fmt.Sprintf("%d.log", i)),
		}
		t0 := time.Now()
		id, err := rt.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if exit, err := rt.Wait(ctx, id); err != nil || exit.Code != 0 {
			b.Fatalf("wait: %+v, %v", exit, err)
		}
		if err := rt.Remove(ctx, id); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	args := []string{"run", "--rm", "--init", "--network", "none", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--pids-limit", "1024"}
	for k, v := range labels {
		args = append(args, "--label", k+"="+v)
	}
	args = append(args, tag, "true")
	viaCLI := func() time.Duration {
		t0 := time.Now()
		if out, err := exec.Command(dockerCLI, args...).CombinedOutput(); err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
		return time.Since(t0)
	}

	cli := rt.Client()
	viaAPI := func(i int) time.Duration {
		opts := createOptions(contract.Spec{
			Name: fmt.Sprintf("mf-bench-api-%s-%d", testimage.RunID(), i), Image: tag, Command: []string{"true"}, Labels: labels,
		}, rt.cfg.DefaultPidsLimit)
		t0 := time.Now()
		c, err := cli.ContainerCreate(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			b.Fatal(err)
		}
		w := cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case <-w.Result:
		case err := <-w.Error:
			b.Fatal(err)
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}

	viaRuntime(-1) // warm up every path
	viaCLI()
	viaAPI(-1)
	var rts, clis, apis []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Rotate the order so no arm always follows another.
		for k := 0; k < 3; k++ {
			switch (i + k) % 3 {
			case 0:
				rts = append(rts, viaRuntime(i))
			case 1:
				clis = append(clis, viaCLI())
			case 2:
				apis = append(apis, viaAPI(i))
			}
		}
	}
	b.StopTimer()
	mr, mc, ma := median(rts), median(clis), median(apis)
	b.ReportMetric(float64(mr.Microseconds())/1000, "runtime-ms/task")
	b.ReportMetric(float64(mc.Microseconds())/1000, "cli-ms/task")
	b.ReportMetric(float64(ma.Microseconds())/1000, "api-ms/task")
	b.ReportMetric(float64(mr)/float64(mc), "ratio")
	b.ReportMetric(float64(mr)/float64(ma), "api-ratio")
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
