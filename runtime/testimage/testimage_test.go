package testimage

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

func TestContextIsDeterministic(t *testing.T) {
	a, ha, err := buildContext(Image{Tag: "x:1"})
	if err != nil {
		t.Fatal(err)
	}
	b, hb, err := buildContext(Image{Tag: "x:1"})
	if err != nil {
		t.Fatal(err)
	}
	if ha != hb || !bytes.Equal(a, b) {
		t.Fatalf("two contexts of the same image differ: %s vs %s", ha, hb)
	}
	_, hc, err := buildContext(Image{Tag: "x:1", Files: map[string][]byte{"/opt/x/probe": []byte("#!/bin/sh\necho probe\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if hc == ha {
		t.Fatal("adding a file did not change the hash")
	}
	if _, _, err := buildContext(Image{Tag: "x:1", Files: map[string][]byte{"/bin/sh/x": nil}}); err == nil {
		t.Fatal("a file under a symlink path was accepted")
	}
}

// run runs cmd in image and returns its combined output and exit code.
func run(t *testing.T, cli *client.Client, image string, cmd ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cr, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Cmd: cmd, Labels: Labels(nil)},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), cr.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	w := cli.ContainerWait(ctx, cr.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	var code int
	select {
	case r := <-w.Result:
		code = int(r.StatusCode)
	case err := <-w.Error:
		t.Fatal(err)
	}
	logs, err := cli.ContainerLogs(ctx, cr.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return out.String(), code
}

func TestBuildAndRun(t *testing.T) {
	cli, tag := Require(t)
	out, code := run(t, cli, tag, "sh", "-c", "echo hello; sleep 0; head -c 3 /dev/zero | dd bs=1 2>/dev/null | cat | wc -c; exit 3")
	if code != 3 || !strings.Contains(out, "hello") || !strings.Contains(out, "3") {
		t.Fatalf("got code %d, output %q", code, out)
	}

	// A second build of the same content is skipped: it must be quick and
	// leave the image id unchanged.
	ctx := context.Background()
	before, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := Build(ctx, cli, tag); err != nil {
		t.Fatal(err)
	}
	after, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if before.ID != after.ID {
		t.Fatalf("rebuilding identical content changed the image: %s -> %s", before.ID, after.ID)
	}
	t.Logf("idempotent Build took %v", time.Since(start))
}

func TestExtraFiles(t *testing.T) {
	cli, _ := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const tag = "megaflow-test/busybox-extra:1"
	img := Image{Tag: tag, Files: map[string][]byte{"/opt/megaflow/hello": []byte("#!/bin/sh\necho from-extra-file \"$@\"\n")}}
	if err := BuildImage(ctx, cli, img); err != nil {
		t.Fatal(err)
	}
	defer cli.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true})
	out, code := run(t, cli, tag, "/opt/megaflow/hello", "x")
	if code != 0 || strings.TrimSpace(out) != "from-extra-file x" {
		t.Fatalf("got code %d, output %q", code, out)
	}
}
