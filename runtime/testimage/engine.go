package testimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

const (
	// TestLabel marks every container a test creates ("1"), so a person
	// can find and remove leftovers with
	// docker rm -f $(docker ps -aq --filter label=megaflow.test=1).
	TestLabel = "megaflow.test"
	// RunLabel holds RunID: it tells this test binary's containers from
	// those of test binaries running beside it.
	RunLabel = "megaflow.test.run"
)

var (
	engineOnce sync.Once
	engineCli  *client.Client
	engineErr  error

	imageOnce sync.Once
	imageErr  error

	runID = func() string {
		var b [6]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
)

// RunID is a random id fixed for the life of this test binary; Labels puts
// it under RunLabel.
func RunID() string { return runID }

// Labels returns the labels every test container carries (TestLabel=1 and
// RunLabel=RunID()) merged with extra; extra cannot override them.
func Labels(extra map[string]string) map[string]string {
	l := make(map[string]string, len(extra)+2)
	for k, v := range extra {
		l[k] = v
	}
	l[TestLabel] = "1"
	l[RunLabel] = runID
	return l
}

// Engine returns a client of the local Docker Engine (DOCKER_HOST, or the
// local socket) that answered a ping, shared by the whole test binary.
// Tests call it first. When the engine cannot be reached the test fails if
// the environment variable CI is set (CI must not skip Docker tests
// silently) and is skipped otherwise.
func Engine(t testing.TB) *client.Client {
	t.Helper()
	engineOnce.Do(func() {
		engineCli, engineErr = client.New(client.FromEnv)
		if engineErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := engineCli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
			engineErr = err
		}
	})
	if engineErr != nil {
		msg := fmt.Sprintf("Docker Engine unreachable (DOCKER_HOST=%q): %v", os.Getenv("DOCKER_HOST"), engineErr)
		if os.Getenv("CI") != "" {
			t.Fatalf("%s; CI needs a running Docker Engine for the runtime tests", msg)
		}
		t.Skipf("%s; set CI=1 to make this a failure", msg)
	}
	return engineCli
}

// Require returns the engine's client and DefaultTag, building the busybox
// image at most once per test binary (and not at all when the engine
// already holds the same content). It fails the test when the build fails,
// and skips or fails as Engine does when there is no engine.
func Require(t testing.TB) (*client.Client, string) {
	t.Helper()
	cli := Engine(t)
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		imageErr = Build(ctx, cli, DefaultTag)
	})
	if imageErr != nil {
		t.Fatalf("building the test image: %v", imageErr)
	}
	return cli, DefaultTag
}

// Sweep force-removes every container of this test binary (RunLabel =
// RunID()) and returns their names, sorted. A TestMain calls it after the
// tests to clean up and to report what a test left behind.
func Sweep(ctx context.Context, cli *client.Client) ([]string, error) {
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", RunLabel+"="+runID),
	})
	if err != nil {
		return nil, fmt.Errorf("testimage: list test containers: %w", err)
	}
	var names []string
	for _, c := range res.Items {
		name := c.ID[:12]
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		names = append(names, name)
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			return names, fmt.Errorf("testimage: remove %s: %w", name, err)
		}
	}
	sort.Strings(names)
	return names, nil
}
