package sandboxtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
)

// The head's API without any worker (no Docker needed): a created sandbox
// is PENDING, an exec is refused as not ready, fields out of bounds are
// refused naming them, a second create of the same id is the same
// sandbox, listing filters by tenant and liveness, close is idempotent.
func TestSandboxAPIWithoutWorkers(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := cl.CreateSandbox(ctx, client.SandboxSpec{ID: "sbx-api1", Tenant: "team-a", Image: "busybox", WaitReady: 200 * time.Millisecond,
		IdleTimeout: time.Minute, Labels: map[string]string{"agent": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	info := s.Info()
	if info.GetState() != client.SandboxPending || info.GetTenant() != "team-a" || info.GetImage() != "busybox" ||
		info.GetIdleTimeoutSeconds() != 60 || info.GetLifetimeSeconds() != spec.SandboxDefaultLifetimeSeconds || info.GetLabels()["agent"] != "x" || info.GetCreateUnixNanos() == 0 {
		t.Fatalf("created without workers: %v; want PENDING with the spec's fields", info)
	}
	again, err := cl.CreateSandbox(ctx, client.SandboxSpec{ID: "sbx-api1", Tenant: "team-a", Image: "busybox",
		IdleTimeout: time.Minute, Labels: map[string]string{"agent": "x"}})
	if err != nil || again.Info().GetCreateUnixNanos() != info.GetCreateUnixNanos() {
		t.Fatalf("a second create of the same id: %v, %v; want the same sandbox", again.Info(), err)
	}
	if _, err := cl.CreateSandbox(ctx, client.SandboxSpec{ID: "sbx-api1", Image: "other"}); !errors.Is(err, errs.ErrAlreadyExists) {
		t.Fatalf("the same id with another spec: %v; want AlreadyExists", err)
	}

	_, err = s.Exec(ctx, []string{"true"}, client.ExecOptions{})
	if !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSandboxNotReady || !strings.Contains(err.Error(), "PENDING") {
		t.Fatalf("exec in a PENDING sandbox: %v (reason %q); want FailedPrecondition, %s", err, errs.ReasonOf(err), client.ReasonSandboxNotReady)
	}
	if err := s.WriteFile(ctx, "/x", nil, 0); errs.ReasonOf(err) != client.ReasonSandboxNotReady {
		t.Fatalf("WriteFile in a PENDING sandbox: %v; want %s", err, client.ReasonSandboxNotReady)
	}

	// Bounds, checked by the client and again by the head.
	for field, sp := range map[string]client.SandboxSpec{
		"image":                {},
		"lifetime_seconds":     {Image: "x", Lifetime: 8 * 24 * time.Hour},
		"idle_timeout_seconds": {Image: "x", IdleTimeout: -time.Second},
		"sandbox id":           {Image: "x", ID: "sbx-UPPER"},
	} {
		_, err := cl.CreateSandbox(ctx, sp)
		if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), field) {
			t.Errorf("create with a bad %s: %v; want InvalidArgument naming it", field, err)
		}
	}
	conn := dialConn(t, c)
	// The heads' gRPC reflection lists the service (grpcurl finds it).
	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	ans, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range ans.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	if !slices.Contains(names, wire.SandboxService_ServiceDesc.ServiceName) {
		t.Fatalf("reflection lists %v; want %s among them", names, wire.SandboxService_ServiceDesc.ServiceName)
	}
	_ = rs.CloseSend()
	raw := wire.NewSandboxServiceClient(conn)
	_, err = raw.CreateSandbox(ctx, &wire.CreateSandboxRequest{Spec: &wire.SandboxCreateSpec{Image: "x", LifetimeSeconds: -5}})
	if err = errs.FromStatus(err); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "lifetime_seconds") {
		t.Fatalf("the head took a negative lifetime: %v", err)
	}
	_, err = raw.Exec(ctx, &wire.SandboxExecRequest{SandboxId: "sbx-api1"})
	if err = errs.FromStatus(err); err == nil {
		// A stream's error comes with its first receive.
		st, _ := raw.Exec(ctx, &wire.SandboxExecRequest{SandboxId: "sbx-api1"})
		_, err = st.Recv()
		err = errs.FromStatus(err)
	}
	if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "argv") {
		t.Fatalf("the head took an exec without argv: %v", err)
	}

	other, err := cl.CreateSandbox(ctx, client.SandboxSpec{Tenant: "team-b", Image: "busybox"})
	if err != nil || !strings.HasPrefix(other.ID(), spec.SandboxIDPrefix) {
		t.Fatalf("create with no id: %v, %v", other, err)
	}
	if l, err := cl.ListSandboxes(ctx, "team-a", false); err != nil || len(l) != 1 || l[0].GetId() != "sbx-api1" {
		t.Fatalf("team-a's sandboxes: %v, %v", l, err)
	}
	if l, _ := cl.ListSandboxes(ctx, "", false); len(l) != 2 {
		t.Fatalf("every tenant's sandboxes: %v; want 2", l)
	}

	if err := s.Close(ctx); err != nil || s.Info().GetState() != client.SandboxClosed || s.Info().GetReasonCode() != wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER {
		t.Fatalf("Close: %v, %v; want CLOSED, CANCELLED_BY_USER", s.Info(), err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if l, _ := cl.ListSandboxes(ctx, "team-a", false); len(l) != 0 {
		t.Fatalf("live team-a sandboxes after close: %v", l)
	}
	if l, _ := cl.ListSandboxes(ctx, "team-a", true); len(l) != 1 || l[0].GetState() != client.SandboxClosed {
		t.Fatalf("all team-a sandboxes after close: %v", l)
	}
	_, err = s.Exec(ctx, []string{"true"}, client.ExecOptions{})
	if errs.ReasonOf(err) != client.ReasonSandboxClosed {
		t.Fatalf("exec after close: %v; want %s", err, client.ReasonSandboxClosed)
	}
	if _, err := cl.GetSandbox(ctx, "sbx-none"); errs.ReasonOf(err) != client.ReasonSandboxNotFound {
		t.Fatalf("GetSandbox of an unknown id: %v", err)
	}
	// A plain graph is not a sandbox, even under a sandbox-shaped id.
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "sbx-plain", Tasks: []*client.TaskSpec{{Name: "box", Image: "x", Command: []string{"true"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.GetSandbox(ctx, "sbx-plain"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("GetSandbox of a plain graph: %v; want NotFound", err)
	}
}

// dialConn returns a raw gRPC connection to the leader, closed with the
// test.
func dialConn(t *testing.T, c *testcluster.Cluster) *grpc.ClientConn {
	t.Helper()
	i := c.WaitLeader(30 * time.Second)
	conn, err := grpc.NewClient(c.GRPCAddrs()[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
