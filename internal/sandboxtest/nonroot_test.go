package sandboxtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	mf "github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/worker"
)

// On a cluster whose ACLs were bootstrapped and that has no admission
// policy rows, the built-in default for clusters with ACLs runs every
// container as 65534:65534 (docs/security.md): a task's container shows
// that user in docker inspect, prints it with id -u and writes in its
// working directory; a sandbox's execs run as 65534 and write in its
// working directory, also in files the API wrote there. policy get names
// the default. After `policy set --cluster --user 0:0` tasks and new
// sandboxes run as root. Needs Docker.
func TestACLDefaultRunsAsNobody(t *testing.T) {
	e := newEnvOpts(t, 0, func(c *head.Config) { c.ACL = true }, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, adminSecret, err := e.c.Client().BootstrapACL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := mf.Dial(ctx, e.c.GRPCAddrs(), mf.WithToken(adminSecret), mf.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	e.cl = admin
	_, workerSecret, err := admin.CreateToken(ctx, "", mf.RoleWorker, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.addWorker(func(cfg *worker.Config) { cfg.Token = workerSecret })
	for _, h := range e.c.Running() {
		testcluster.WaitFor(t, 10*time.Second, "head "+h.ID()+" to apply the bootstrap", func() bool { return h.FSM().View().ACLDefaultAdmission() })
	}

	p, src, err := admin.GetAdmissionPolicy(ctx, "default", mf.ReadOptions{RequireLeader: true})
	if err != nil || src != mf.AdmissionFromACLDefault || p.GetRunAsUser() != "65534:65534" || len(p.GetAllowedNetworks()) != 0 {
		t.Fatalf("policy get default: %v from %v, %v; want user 65534:65534 and no network but none from the built-in default for clusters with ACLs", p, src, err)
	}
	// No network but none: a service (bridge by default: its port is
	// published) is refused at submission, naming the default.
	svc := &mf.GraphSpec{Id: "svc", Tasks: []*mf.TaskSpec{{Name: "s", Image: e.image, Kind: mf.KindService, Service: &mf.ServiceSpec{Name: "model/x"},
		Command: []string{"sh", "-c", "sleep 60"}, Resources: &mf.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}}}}
	if _, err := admin.Submit(ctx, svc); err == nil || !strings.Contains(err.Error(), `network "bridge" is not allowed by the built-in default policy for clusters with ACLs (allowed: none)`) {
		t.Fatalf("a service under the built-in default with ACLs: %v; want refused for its bridge network", err)
	}

	// task runs a task that writes in its working directory and reports
	// its uid, and returns the uid and its container's Config.User.
	task := func(id string) (uid, configUser string) {
		t.Helper()
		g := &mf.GraphSpec{Id: id, Tasks: []*mf.TaskSpec{{Name: "t", Image: e.image, WorkingDir: "/work",
			Command:   []string{"sh", "-c", `echo hi > here && echo MEGAFLOW_RESULT "{\"uid\": \"$(id -u)\"}"; sleep 2`},
			Resources: &mf.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}}}}
		if _, err := admin.Submit(ctx, g); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		// Its container, while it runs (the worker removes it after).
		testcluster.WaitFor(t, time.Minute, "task "+id+"/t's container", func() bool {
			for _, cid := range e.containers("") {
				ins, err := e.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
				if err == nil && ins.Container.Config.Labels[worker.LabelTask] == id+"/t" {
					configUser = ins.Container.Config.User
					return true
				}
			}
			return false
		})
		res, err := admin.Wait(ctx, id)
		if err != nil || res.State != mf.GraphSucceeded {
			tk, _, _ := admin.GetTask(ctx, id+"/t", mf.ReadOptions{})
			t.Fatalf("graph %s: %v, %v; want it to succeed (task: %v)", id, res, err, tk)
		}
		tk, _, err := admin.GetTask(ctx, id+"/t", mf.ReadOptions{RequireLeader: true})
		if err != nil {
			t.Fatal(err)
		}
		return string(tk.Result), configUser
	}
	if uid, user := task("nobody"); uid != `{"uid": "65534"}` || user != "65534:65534" {
		t.Fatalf("a task under the built-in default with ACLs: result %s, docker inspect Config.User %q; want uid 65534, 65534:65534", uid, user)
	}

	// sandbox checks a sandbox's uid and that it writes in its working
	// directory, also in a file the API wrote there.
	sandbox := func(wantUID string) {
		t.Helper()
		s := e.create(ctx, mf.SandboxSpec{WorkingDir: "/work"})
		defer func() { _ = s.Close(ctx) }()
		if err := s.WriteFile(ctx, "/work/given", []byte("given\n"), 0o644); err != nil {
			t.Fatalf("WriteFile: %v", err)
		}
		res, err := s.Exec(ctx, []string{"sh", "-c", `id -u; echo mine > mine && cat mine && echo more >> given && cat given`}, mf.ExecOptions{})
		want := wantUID + "\nmine\ngiven\nmore\n"
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != want {
			var out, errOut string
			if res != nil {
				out, errOut = string(res.Stdout), string(res.Stderr)
			}
			t.Fatalf("sandbox exec: %q (stderr %q), %v; want %q", out, errOut, err, want)
		}
	}
	sandbox("65534")

	if _, _, err := admin.SetClusterAdmissionPolicy(ctx, &mf.AdmissionPolicy{AllowedNetworks: []string{"*"}, RunAsUser: "0:0"}); err != nil {
		t.Fatal(err)
	}
	if uid, user := task("root"); uid != `{"uid": "0"}` || user != "0:0" {
		t.Fatalf("a task under a cluster row with --user 0:0: result %s, Config.User %q; want uid 0, 0:0", uid, user)
	}
	sandbox("0")
}
