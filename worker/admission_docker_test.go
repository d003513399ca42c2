package worker

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker/attempt"
)

// TestDockerAdmissionConfinement: a container the worker starts under an
// admission policy with run_as_user 65534:65534, a read-only root and
// max_pids 64 shows them in the engine's inspect (Config.User,
// HostConfig.ReadonlyRootfs, HostConfig.PidsLimit); inside, id -u prints
// 65534, the root cannot be written and /tmp can. It needs a Docker
// Engine (skipped without one, failed without one when CI is set).
func TestDockerAdmissionConfinement(t *testing.T) {
	rt, image, cluster := dockerTestRuntime(t, "mfadm-")
	head := newFakeHead(t, "h1")
	dir := t.TempDir()
	cfg := testConfig(t, rt, dir, head.addr)
	cfg.ClusterName = cluster
	startWorker(t, cfg)

	s := spec(image, "sh", "-c", `echo "uid=$(id -u) gid=$(id -g)"; `+
		`if touch /root-file 2>/dev/null; then echo root-writable; else echo root-read-only; fi; `+
		`echo x > /tmp/f && echo tmp-writable; echo done; sleep 30`)
	m := assignMsg("g/confined", 1, s)
	m.GetAssign().Tenant = "team-a"
	m.GetAssign().AdmissionPolicy = &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, RunAsUser: "65534:65534", ReadOnlyRootFs: true, MaxPids: 64}
	m.GetAssign().AdmissionSource = wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER
	head.send(m)

	const long = 60 * time.Second
	var started *wire.AttemptEvent
	waitFor(t, long, "g/confined started", func() bool {
		for _, e := range head.eventsOf("g/confined", 1) {
			switch e.GetKind() {
			case kindStarted:
				started = e
				return true
			case kindFailed, kindExited:
				t.Fatalf("g/confined ended before it started: %v", e)
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ins, err := rt.Client().ContainerInspect(ctx, started.GetContainerId(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ins.Container
	if c.Config.User != "65534:65534" || !c.HostConfig.ReadonlyRootfs || c.HostConfig.PidsLimit == nil || *c.HostConfig.PidsLimit != 64 {
		pids := int64(-1)
		if c.HostConfig.PidsLimit != nil {
			pids = *c.HostConfig.PidsLimit
		}
		t.Fatalf("docker inspect: User %q, ReadonlyRootfs %v, PidsLimit %d; want 65534:65534, true, 64", c.Config.User, c.HostConfig.ReadonlyRootfs, pids)
	}
	logFile := logPath(dir, attempt.Key{TaskID: "g/confined", Attempt: 1})
	var out string
	waitFor(t, long, "the confined task's output", func() bool {
		b, _ := os.ReadFile(logFile)
		out = string(b)
		return strings.Contains(out, "done")
	})
	t.Logf("container %s output:\n%s", started.GetContainerId(), out)
	for _, want := range []string{"uid=65534 gid=65534", "root-read-only", "tmp-writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	head.send(stopMsg("g/confined", 1, "done"))
	waitFor(t, long, "g/confined stopped", func() bool {
		for _, e := range head.eventsOf("g/confined", 1) {
			if e.GetKind() == kindStopped {
				return true
			}
		}
		return false
	})
}
