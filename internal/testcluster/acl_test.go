package testcluster_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// offsetClock is the real clock moved forward by a settable offset: the
// heads' Now for token expiry, timers left real.
type offsetClock struct {
	clock.Clock
	offset atomic.Int64
}

func (c *offsetClock) Now() time.Time { return c.Clock.Now().Add(time.Duration(c.offset.Load())) }

// stubs are the raw gRPC clients of one head for one token ("" none).
type stubs struct {
	m  wire.MegaflowServiceClient
	sb wire.SandboxServiceClient
	op wire.OperatorServiceClient
}

func dialStubs(t *testing.T, addr, secret string) stubs {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if secret != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(acl.Credentials(secret)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return stubs{wire.NewMegaflowServiceClient(conn), wire.NewSandboxServiceClient(conn), wire.NewOperatorServiceClient(conn)}
}

// firstErr calls a server-streaming method and returns the error of its
// first Recv (nil when it sent a message).
func firstErr[T any](s grpc.ServerStreamingClient[T], err error) error {
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// A 3-head cluster with --acl: bootstrap works once; tenant b's token
// (through a follower, which forwards the token) reaches none of tenant
// a's objects, one row per RPC, while a's own token does; read and submit
// tokens make no admin call; a revoked token is refused by every head; an
// expired one too; the tokens survive a restart of every head.
func TestACLCluster(t *testing.T) {
	clk := &offsetClock{Clock: clock.Real()}
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.ACL = true
		cfg.Clock = clk
	}})
	leader := c.WaitLeader(10 * time.Second)
	follower := (leader + 1) % 3
	faddr := c.Members[follower].GRPCAddr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	anon := dialStubs(t, faddr, "")
	if _, err := anon.m.ListGraphs(ctx, &wire.ListGraphsRequest{}); status.Code(err) != codes.Unauthenticated ||
		!strings.Contains(err.Error(), "--token or MEGAFLOW_TOKEN") {
		t.Fatalf("a call without a token: %v; want Unauthenticated saying how to pass one", err)
	}
	if st, err := anon.m.ClusterStatus(ctx, &wire.ClusterStatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ClusterStatus without a token: %v %v", st, err)
	}
	boot, err := anon.m.BootstrapACL(ctx, &wire.BootstrapACLRequest{})
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if _, err := anon.m.BootstrapACL(ctx, &wire.BootstrapACLRequest{}); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "bootstrapped already") {
		t.Fatalf("second bootstrap: %v; want FailedPrecondition, bootstrapped already", err)
	}
	admin := dialStubs(t, faddr, boot.Secret)
	if st, err := admin.m.ClusterStatus(ctx, &wire.ClusterStatusRequest{}); err != nil || !st.AclEnabled {
		t.Fatalf("ClusterStatus with the admin token: %v %v", st, err)
	}
	mk := func(tenant string, role wire.TokenRole, ttl int64) *wire.CreateTokenResponse {
		t.Helper()
		r, err := admin.m.CreateToken(ctx, &wire.CreateTokenRequest{Tenant: tenant, Role: role, TtlSeconds: ttl})
		if err != nil {
			t.Fatalf("create token %s %v: %v", tenant, role, err)
		}
		return r
	}
	aTok := mk("a", wire.TokenRole_TOKEN_ROLE_SUBMIT, 0)
	bTok := mk("b", wire.TokenRole_TOKEN_ROLE_SUBMIT, 0)
	rTok := mk("a", wire.TokenRole_TOKEN_ROLE_READ, 0)
	shortTok := mk("a", wire.TokenRole_TOKEN_ROLE_READ, 60)
	if _, err := admin.m.CreateToken(ctx, &wire.CreateTokenRequest{Tenant: "a", Role: wire.TokenRole_TOKEN_ROLE_READ, TtlSeconds: 1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a 1 s token: %v; want InvalidArgument", err)
	}
	a, b, r := dialStubs(t, faddr, aTok.Secret), dialStubs(t, faddr, bTok.Secret), dialStubs(t, faddr, rTok.Secret)

	// Tenant a's objects, made with a's token (no tenant named: the token's).
	g := &wire.GraphSpec{Id: "ga", Tasks: []*wire.TaskSpec{{Name: "t", Image: "busybox", Command: []string{"true"}}}}
	sub, err := a.m.SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: g})
	if err != nil {
		t.Fatalf("submit as a: %v", err)
	}
	c.WaitApplied(sub.GetIndex(), 10*time.Second)
	if gr := c.Running()[0].FSM().View().Graph("ga"); gr == nil || gr.Tenant != "a" {
		t.Fatalf("graph ga: %+v; want tenant a (the token's)", gr)
	}
	if _, err := a.sb.CreateSandbox(ctx, &wire.CreateSandboxRequest{Spec: &wire.SandboxCreateSpec{Id: "sbx-a1", Image: "busybox"}}); err != nil {
		t.Fatalf("create sandbox as a: %v", err)
	}
	testcluster.WaitFor(t, 10*time.Second, "every head applied sandbox sbx-a1", func() bool {
		for _, h := range c.Running() {
			if h.FSM().View().Graph("sbx-a1") == nil {
				return false
			}
		}
		return true
	})

	// refusedFor says whether err is the ACL's refusal of another tenant.
	refusedFor := func(err error) bool {
		c := status.Code(err)
		return (c == codes.NotFound || c == codes.PermissionDenied) && strings.Contains(err.Error(), "tenant")
	}
	type row struct {
		name string
		call func(s stubs) error
	}
	rows := []row{
		{"GetGraph", func(s stubs) error { _, err := s.m.GetGraph(ctx, &wire.GetGraphRequest{GraphId: "ga"}); return err }},
		{"ListGraphs tenant a", func(s stubs) error { _, err := s.m.ListGraphs(ctx, &wire.ListGraphsRequest{Tenant: "a"}); return err }},
		{"GetTask", func(s stubs) error { _, err := s.m.GetTask(ctx, &wire.GetTaskRequest{TaskId: "ga/t"}); return err }},
		{"ListTasks graph", func(s stubs) error { _, err := s.m.ListTasks(ctx, &wire.ListTasksRequest{GraphId: "ga"}); return err }},
		{"ListTasks tenant a", func(s stubs) error { _, err := s.m.ListTasks(ctx, &wire.ListTasksRequest{Tenant: "a"}); return err }},
		{"Watch graph", func(s stubs) error {
			wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer wcancel()
			err := firstErr(s.m.Watch(wctx, &wire.WatchRequest{GraphId: "ga"}))
			if status.Code(err) == codes.DeadlineExceeded {
				return nil // allowed, and nothing happened
			}
			return err
		}},
		{"CancelTask", func(s stubs) error {
			_, err := s.m.CancelTask(ctx, &wire.CancelTaskRequest{TaskId: "ga/nope"})
			if status.Code(err) == codes.NotFound && !strings.Contains(err.Error(), "tenant") {
				return nil // the owner's answer: no such task
			}
			return err
		}},
		{"Logs", func(s stubs) error {
			err := firstErr(s.m.Logs(ctx, &wire.LogsRequest{TaskId: "ga/t"}))
			if err != nil && !refusedFor(err) {
				return nil // the owner gets past the ACL (no attempt yet)
			}
			return err
		}},
		{"ArtifactList", func(s stubs) error {
			_, err := s.m.ArtifactList(ctx, &wire.ArtifactListRequest{TaskId: "ga/t"})
			if err != nil && !refusedFor(err) {
				return nil
			}
			return err
		}},
		{"ArtifactGet", func(s stubs) error {
			err := firstErr(s.m.ArtifactGet(ctx, &wire.ArtifactGetRequest{TaskId: "ga/t", Path: "x"}))
			if err != nil && !refusedFor(err) {
				return nil
			}
			return err
		}},
		{"SubmitGraph tenant a", func(s stubs) error {
			g := proto.CloneOf(g)
			g.Id, g.Tenant = "ga2", "a"
			_, err := s.m.SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: g})
			return err
		}},
		{"GetAdmissionPolicy tenant a", func(s stubs) error {
			_, err := s.m.GetAdmissionPolicy(ctx, &wire.GetAdmissionPolicyRequest{Tenant: "a"})
			return err
		}},
		{"PoolWarm tenant a", func(s stubs) error {
			_, err := s.m.PoolWarm(ctx, &wire.PoolWarmRequest{Target: &wire.PoolTarget{Image: "busybox", Size: 0, Tenant: "a"}})
			return err
		}},
		{"GetSandbox", func(s stubs) error { _, err := s.sb.GetSandbox(ctx, &wire.GetSandboxRequest{Id: "sbx-a1"}); return err }},
		{"ListSandboxes tenant a", func(s stubs) error {
			_, err := s.sb.ListSandboxes(ctx, &wire.ListSandboxesRequest{Tenant: "a"})
			return err
		}},
		{"CreateSandbox tenant a", func(s stubs) error {
			_, err := s.sb.CreateSandbox(ctx, &wire.CreateSandboxRequest{Spec: &wire.SandboxCreateSpec{Id: "sbx-a2", Tenant: "a", Image: "busybox"}})
			return err
		}},
		{"ListSnapshots tenant a", func(s stubs) error {
			_, err := s.sb.ListSnapshots(ctx, &wire.ListSnapshotsRequest{Tenant: "a"})
			return err
		}},
	}
	// Calls on a's sandbox that the owner makes too, but that need a
	// worker to answer: b must be refused by the ACL, a must get past it.
	sandboxRows := []row{
		{"Exec", func(s stubs) error {
			return firstErr(s.sb.Exec(ctx, &wire.SandboxExecRequest{SandboxId: "sbx-a1", Argv: []string{"true"}}))
		}},
		{"WriteFile", func(s stubs) error {
			_, err := s.sb.WriteFile(ctx, &wire.SandboxWriteFileRequest{SandboxId: "sbx-a1", Path: "/tmp/x", Data: []byte("x")})
			return err
		}},
		{"ReadFile", func(s stubs) error {
			return firstErr(s.sb.ReadFile(ctx, &wire.SandboxReadFileRequest{SandboxId: "sbx-a1", Path: "/tmp/x"}))
		}},
		{"DownloadArchive", func(s stubs) error {
			return firstErr(s.sb.DownloadArchive(ctx, &wire.SandboxDownloadArchiveRequest{SandboxId: "sbx-a1", Path: "/tmp"}))
		}},
		{"UploadArchive", func(s stubs) error {
			st, err := s.sb.UploadArchive(ctx)
			if err != nil {
				return err
			}
			if err := st.Send(&wire.SandboxUploadArchiveRequest{SandboxId: "sbx-a1", Path: "/tmp", Data: []byte("x")}); err != nil {
				_, err = st.CloseAndRecv()
				return err
			}
			_, err = st.CloseAndRecv()
			return err
		}},
		{"SnapshotSandbox", func(s stubs) error {
			_, err := s.sb.SnapshotSandbox(ctx, &wire.SnapshotSandboxRequest{SandboxId: "sbx-a1", Name: "s"})
			return err
		}},
		{"PauseSandbox", func(s stubs) error {
			_, err := s.sb.PauseSandbox(ctx, &wire.PauseSandboxRequest{Id: "sbx-a1"})
			return err
		}},
		{"ResumeSandbox", func(s stubs) error {
			_, err := s.sb.ResumeSandbox(ctx, &wire.ResumeSandboxRequest{Id: "sbx-a1"})
			return err
		}},
		{"SetSandboxTimeout", func(s stubs) error {
			_, err := s.sb.SetSandboxTimeout(ctx, &wire.SetSandboxTimeoutRequest{Id: "sbx-a1", TimeoutSeconds: 600})
			return err
		}},
	}
	for _, rw := range rows {
		t.Run("b/"+rw.name, func(t *testing.T) {
			if err := rw.call(b); !refusedFor(err) {
				t.Fatalf("tenant b's token: %v; want NotFound or PermissionDenied naming the tenant", err)
			}
		})
		t.Run("a/"+rw.name, func(t *testing.T) {
			if err := rw.call(a); err != nil {
				t.Fatalf("tenant a's token: %v", err)
			}
		})
	}
	for _, rw := range sandboxRows {
		t.Run("b/"+rw.name, func(t *testing.T) {
			if err := rw.call(b); !refusedFor(err) {
				t.Fatalf("tenant b's token: %v; want NotFound naming the tenant", err)
			}
		})
		t.Run("a/"+rw.name, func(t *testing.T) {
			if err := rw.call(a); refusedFor(err) || status.Code(err) == codes.Unauthenticated {
				t.Fatalf("tenant a's token refused by the ACL: %v", err)
			}
		})
	}
	// Lists without a tenant are narrowed to the token's.
	if l, err := b.m.ListGraphs(ctx, &wire.ListGraphsRequest{}); err != nil || len(l.GetGraphs()) != 0 {
		t.Fatalf("b lists graphs: %v %v; want none of a's", l.GetGraphs(), err)
	}
	if l, err := b.sb.ListSandboxes(ctx, &wire.ListSandboxesRequest{}); err != nil || len(l.GetSandboxes()) != 0 {
		t.Fatalf("b lists sandboxes: %v %v; want none of a's", l.GetSandboxes(), err)
	}
	if l, err := a.m.ListGraphs(ctx, &wire.ListGraphsRequest{}); err != nil || len(l.GetGraphs()) == 0 {
		t.Fatalf("a lists graphs: %v %v; want a's", l.GetGraphs(), err)
	}
	if err := firstErr(b.m.Watch(ctx, &wire.WatchRequest{})); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("b watches every graph: %v; want PermissionDenied", err)
	}
	// Writes last: cancel and delete of a's graph, close of a's sandbox.
	for _, rw := range []row{
		{"CancelGraph", func(s stubs) error {
			_, err := s.m.CancelGraph(ctx, &wire.CancelGraphRequest{GraphId: "ga"})
			return err
		}},
		{"CloseSandbox", func(s stubs) error {
			_, err := s.sb.CloseSandbox(ctx, &wire.CloseSandboxRequest{Id: "sbx-a1"})
			return err
		}},
		{"DeleteGraph", func(s stubs) error {
			_, err := s.m.DeleteGraph(ctx, &wire.DeleteGraphRequest{GraphId: "ga"})
			return err
		}},
	} {
		if err := rw.call(b); !refusedFor(err) {
			t.Errorf("b %s: %v; want refused", rw.name, err)
		}
		if err := rw.call(a); err != nil && refusedFor(err) {
			t.Errorf("a %s refused: %v", rw.name, err)
		}
	}

	// Admin calls, refused to submit and read tokens; a read token
	// submits nothing.
	admins := []row{
		{"SetQuota", func(s stubs) error {
			_, err := s.m.SetQuota(ctx, &wire.SetQuotaRequest{Quota: &wire.Quota{Tenant: "a", MaxRunning: 1}})
			return err
		}},
		{"GetQuotas", func(s stubs) error { _, err := s.m.GetQuotas(ctx, &wire.GetQuotasRequest{}); return err }},
		{"SetAdmissionPolicy", func(s stubs) error {
			_, err := s.m.SetAdmissionPolicy(ctx, &wire.SetAdmissionPolicyRequest{Policy: &wire.AdmissionPolicy{Tenant: "a", AllowedNetworks: []string{"*"}}})
			return err
		}},
		{"ListAdmissionPolicies", func(s stubs) error {
			_, err := s.m.ListAdmissionPolicies(ctx, &wire.ListAdmissionPoliciesRequest{})
			return err
		}},
		{"RemoveHead", func(s stubs) error {
			_, err := s.m.RemoveHead(ctx, &wire.RemoveHeadRequest{HeadId: "nope"})
			return err
		}},
		{"ListWorkers", func(s stubs) error { _, err := s.m.ListWorkers(ctx, &wire.ListWorkersRequest{}); return err }},
		{"CreateToken", func(s stubs) error {
			_, err := s.m.CreateToken(ctx, &wire.CreateTokenRequest{Tenant: "a", Role: wire.TokenRole_TOKEN_ROLE_ADMIN})
			return err
		}},
		{"ListTokens", func(s stubs) error { _, err := s.m.ListTokens(ctx, &wire.ListTokensRequest{}); return err }},
		{"RevokeToken", func(s stubs) error {
			_, err := s.m.RevokeToken(ctx, &wire.RevokeTokenRequest{Accessor: boot.GetToken().GetAccessor()})
			return err
		}},
		{"SnapshotSave", func(s stubs) error { return firstErr(s.op.SnapshotSave(ctx, &wire.SnapshotSaveRequest{})) }},
	}
	for _, rw := range admins {
		for name, s := range map[string]stubs{"submit": a, "read": r} {
			if err := rw.call(s); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs role admin; your token") {
				t.Errorf("%s with a %s token: %v; want PermissionDenied naming the roles", rw.name, name, err)
			}
		}
	}
	if _, err := r.m.SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: &wire.GraphSpec{Id: "gr", Tasks: g.Tasks}}); status.Code(err) != codes.PermissionDenied ||
		!strings.Contains(err.Error(), "needs role submit; your token") {
		t.Fatalf("submit with a read token: %v", err)
	}
	if l, err := admin.m.ListTokens(ctx, &wire.ListTokensRequest{}); err != nil || len(l.GetTokens()) != 5 || len(l.GetTokens()[0].GetSecretHash()) != 0 {
		t.Fatalf("admin lists tokens: %v %v; want 5, without hashes", l, err)
	}

	// A revoked token is refused by every head once it applied the
	// revocation.
	rev, err := admin.m.RevokeToken(ctx, &wire.RevokeTokenRequest{Accessor: bTok.GetToken().GetAccessor()})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members {
		s := dialStubs(t, m.GRPCAddr, bTok.Secret)
		testcluster.WaitFor(t, 5*time.Second, "head "+m.ID+" refuses the revoked token", func() bool {
			_, err := s.m.ListGraphs(ctx, &wire.ListGraphsRequest{})
			return status.Code(err) == codes.Unauthenticated && strings.Contains(err.Error(), "not one this cluster knows")
		})
		if m.Head().AppliedIndex() < rev.GetIndex() {
			t.Errorf("head %s refused before applying the revocation?", m.ID)
		}
	}

	// An expired token is refused: the heads' clock moves past its ttl.
	short := dialStubs(t, faddr, shortTok.Secret)
	if _, err := short.m.ListGraphs(ctx, &wire.ListGraphsRequest{}); err != nil {
		t.Fatalf("the 60 s token before it expires: %v", err)
	}
	clk.offset.Store(int64(61 * time.Second))
	if _, err := short.m.ListGraphs(ctx, &wire.ListGraphsRequest{}); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("the 60 s token after 61 s: %v; want Unauthenticated, expired", err)
	}

	// The tokens survive a restart of every head, equal.
	before := fsm.Dump(c.Running()[0].FSM().View())
	if !strings.Contains(before, "token ") {
		t.Fatal("the dump shows no token")
	}
	for i := range c.Members {
		c.Kill(i)
	}
	for i := range c.Members {
		c.Restart(i)
	}
	c.WaitLeader(10 * time.Second)
	c.WaitApplied(rev.GetIndex(), 10*time.Second)
	for _, h := range c.Running() {
		if got := fsm.Dump(h.FSM().View()); tokenLines(got) != tokenLines(before) {
			t.Errorf("head %s after the restart: tokens\n%s\nwant\n%s", h.ID(), tokenLines(got), tokenLines(before))
		}
	}
	admin2 := dialStubs(t, c.Members[0].GRPCAddr, boot.Secret)
	testcluster.WaitFor(t, 10*time.Second, "the admin token works after the restart", func() bool {
		_, err := admin2.m.ListTokens(ctx, &wire.ListTokensRequest{})
		return err == nil
	})
}

func tokenLines(dump string) string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "token ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// On a cluster with ACLs on and no TLS a worker's stream needs a token of
// role worker: a worker without one is refused (and counted), one with it
// connects and runs a graph submitted with a submit token.
func TestACLWorkerToken(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.ACL = true }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client()
	_, adminSecret, err := cl.BootstrapACL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.Dial(ctx, c.GRPCAddrs(), client.WithToken(adminSecret))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	_, workerSecret, err := admin.CreateToken(ctx, "", client.RoleWorker, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, submitSecret, err := admin.CreateToken(ctx, "a", client.RoleSubmit, 0)
	if err != nil {
		t.Fatal(err)
	}
	bad := c.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil)})
	w := c.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil), Configure: func(cfg *worker.Config) { cfg.Token = workerSecret }})
	testcluster.WaitFor(t, 30*time.Second, "the worker with a token connects", func() bool {
		for _, h := range c.Running() {
			if h.WorkerConnected(w.ID) {
				return true
			}
		}
		return false
	})
	for _, h := range c.Running() {
		if h.WorkerConnected(bad.ID) {
			t.Fatalf("worker %s without a token connected to %s", bad.ID, h.ID())
		}
	}
	sub, err := client.Dial(ctx, c.GRPCAddrs(), client.WithToken(submitSecret))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := sub.Submit(ctx, tlsGraph("wg", 2)); err != nil {
		t.Fatal(err)
	}
	got, err := sub.Wait(ctx, "wg")
	if err != nil || got.State != client.GraphSucceeded || got.Tenant != "a" {
		t.Fatalf("graph wg: %+v %v; want SUCCEEDED, of tenant a", got, err)
	}
}

// The revocation bound: a follower left without a leader (the two other
// heads killed) refuses token calls with Unavailable once it has not heard
// from a leader for ACLMaxStaleness, naming why, while it answered them
// before; calls that need no token still work.
func TestACLStaleFollowerRefusesTokens(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{NoReplayCheck: "two heads are killed", Configure: func(cfg *head.Config) {
		cfg.ACL = true
		cfg.ACLMaxStaleness = 500 * time.Millisecond
	}})
	leader := c.WaitLeader(10 * time.Second)
	survivor := (leader + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := dialStubs(t, c.Members[survivor].GRPCAddr, "")
	boot, err := s.m.BootstrapACL(ctx, &wire.BootstrapACLRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(boot.GetIndex(), 10*time.Second)
	admin := dialStubs(t, c.Members[survivor].GRPCAddr, boot.Secret)
	if _, err := admin.m.ListTokens(ctx, &wire.ListTokensRequest{}); err != nil {
		t.Fatalf("the follower with a leader: %v", err)
	}
	for i := range c.Members {
		if i != survivor {
			c.Kill(i)
		}
	}
	testcluster.WaitFor(t, 10*time.Second, "the leaderless follower refuses the admin token", func() bool {
		_, err := admin.m.ListTokens(ctx, &wire.ListTokensRequest{})
		return status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "may have missed a token's")
	})
	// ClusterStatus shows no tenant's data: it still answers there, so an
	// operator can see the partition from the cut-off head.
	if _, err := admin.m.ClusterStatus(ctx, &wire.ClusterStatusRequest{}); err != nil {
		t.Fatalf("ClusterStatus on the leaderless follower: %v; want an answer", err)
	}
	// A token it does not know is Unavailable there too, not
	// Unauthenticated: it cannot tell one made since from a wrong one (a
	// head just restarted answered a valid token "not one this cluster
	// knows").
	unknown := dialStubs(t, c.Members[survivor].GRPCAddr, "mft_"+strings.Repeat("0", 64))
	if _, err := unknown.m.GetLimits(ctx, &wire.GetLimitsRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("an unknown token on the leaderless follower: %v; want Unavailable", err)
	}
	if _, err := s.m.BootstrapACL(ctx, &wire.BootstrapACLRequest{}); status.Code(err) == codes.Unauthenticated {
		t.Fatalf("a call that needs no token: %v", err)
	}
}

// What a client may write in its metadata is not trusted: a forged
// forwarding mark (megaflow-forwarded) skips neither the tenant's rate
// limit nor the audit with ACLs on and no TLS, and a malformed
// authorization header is answered as malformed, not as an unknown token.
func TestACLClientMetadataIsNotTrusted(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.ACL = true
		cfg.RateLimit, cfg.RateBurst = 0.2, 3
	}})
	leader := c.WaitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	boot, err := dialStubs(t, c.Members[leader].GRPCAddr, "").m.BootstrapACL(ctx, &wire.BootstrapACLRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(boot.GetIndex(), 10*time.Second)
	admin := dialStubs(t, c.Members[leader].GRPCAddr, boot.Secret)
	tb, err := admin.m.CreateToken(ctx, &wire.CreateTokenRequest{Tenant: "b", Role: wire.TokenRole_TOKEN_ROLE_READ})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(tb.GetIndex(), 10*time.Second)
	b := dialStubs(t, c.Members[leader].GRPCAddr, tb.GetSecret())
	forged := metadata.AppendToOutgoingContext(ctx, "megaflow-forwarded", "h-fake")
	limited := 0
	for range 10 {
		if _, err := b.m.ListGraphs(forged, &wire.ListGraphsRequest{}); status.Code(err) == codes.ResourceExhausted {
			limited++
		}
	}
	if limited == 0 {
		t.Fatalf("10 calls with a forged forwarding mark at 0.2/s with a burst of 3: none refused; the mark skipped the rate limit")
	}

	noBearer := metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+tb.GetSecret())
	_, err = dialStubs(t, c.Members[leader].GRPCAddr, "").m.ListGraphs(noBearer, &wire.ListGraphsRequest{})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "Bearer <token>") {
		t.Fatalf("a Basic authorization header: %v; want Unauthenticated saying it is not \"Bearer <token>\"", err)
	}
}
