package testcluster_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/tlsconfig/tlstest"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// A 3-head cluster with TLS on every link (Raft over TCP with TLS, gossip
// with a key) and a worker runs a graph submitted through a follower (so
// that the follower forwards with its head certificate), and refuses
// every peer that is not what it claims: a plaintext client, a client of
// another cluster's CA, a worker certificate on the client API, a client
// certificate on the worker stream, another worker's certificate (or one
// that names no worker) on worker w1's stream, anything but a head on the
// worker's sandbox server, and that server to a head expecting another
// worker. Reloading a head's certificate keeps the cluster working.
func TestTLSCluster(t *testing.T) {
	set := tlstest.New(t, t.TempDir())
	other := tlstest.New(t, t.TempDir())
	headTLS := map[string]*tlsconfig.Store{}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("h%d", i)
		headTLS[id] = set.Store(t, tlsconfig.RoleHead, id)
	}
	workerTLS := set.Store(t, tlsconfig.RoleWorker, "w1")
	key := make([]byte, 32)
	_, _ = rand.Read(key)

	c := testcluster.New(t, testcluster.Options{RaftOnDisk: true, Configure: func(cfg *head.Config) {
		cfg.TLS = headTLS[cfg.NodeID]
		cfg.GossipKey = key
	}})
	w := c.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil), Configure: func(cfg *worker.Config) {
		cfg.TLS = workerTLS
		cfg.GossipKey = key
	}})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cliTLS, err := client.TLSConfig(set.Issue(t, tlsconfig.RoleClient, "c1").CA, set.Files("c1").Cert, set.Files("c1").Key)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.WaitLeader(30 * time.Second)
	addrs := c.GRPCAddrs()
	follower := (leader + 1) % len(addrs)
	cl, err := client.Dial(ctx, []string{addrs[follower]}, client.WithTLS(cliTLS), client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	testcluster.WaitFor(t, 30*time.Second, "the worker's TLS stream to the leader", func() bool {
		for _, h := range c.Running() {
			if h.WorkerConnected(w.ID) {
				return true
			}
		}
		return false
	})
	if _, err := cl.Submit(ctx, tlsGraph("tls", 5)); err != nil {
		t.Fatalf("submit through follower %s over TLS: %v", addrs[follower], err)
	}
	if g, err := cl.Wait(ctx, "tls"); err != nil || g.State != client.GraphSucceeded {
		t.Fatalf("graph over TLS: %v, %v", g, err)
	}

	// A plaintext client: refused at once, saying why.
	plain, err := client.Dial(ctx, addrs, client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.ClusterStatus(ctx); !errors.Is(err, errs.ErrFailedPrecondition) || ctx.Err() != nil {
		t.Fatalf("plaintext client: %v; want FailedPrecondition saying the head requires TLS", err)
	} else {
		t.Logf("plaintext client: %v", err)
	}
	// A client of another cluster's CA: refused, saying why.
	foreign := other.Issue(t, tlsconfig.RoleClient, "c9")
	ftls, err := client.TLSConfig(foreign.CA, foreign.Cert, foreign.Key)
	if err != nil {
		t.Fatal(err)
	}
	fcl, err := client.Dial(ctx, addrs, client.WithTLS(ftls), client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer fcl.Close()
	if _, err := fcl.ClusterStatus(ctx); !errors.Is(err, errs.ErrFailedPrecondition) || ctx.Err() != nil {
		t.Fatalf("client of another CA: %v; want FailedPrecondition", err)
	} else {
		t.Logf("client of another CA: %v", err)
	}

	// Certificates of the cluster's CA, of the wrong role.
	dial := func(creds grpc.DialOption, addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, creds)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	asWorker := grpc.WithTransportCredentials(workerTLS.ClientCredentials(tlsconfig.RoleHead))
	workerAPI := wire.NewMegaflowServiceClient(dial(asWorker, addrs[leader]))
	_, err = workerAPI.ListGraphs(ctx, &wire.ListGraphsRequest{})
	if !errors.Is(errs.FromStatus(err), errs.ErrPermissionDenied) {
		t.Fatalf("worker certificate on the client API: %v; want PermissionDenied", err)
	}
	// ClusterStatus alone is open to workers: one whose leader went
	// silent asks the other heads who leads.
	if st, err := workerAPI.ClusterStatus(ctx, &wire.ClusterStatusRequest{}); err != nil || st.GetHeadId() == "" {
		t.Fatalf("ClusterStatus with a worker certificate: %v, %v; want the head's status", st, err)
	}
	cliStore, err := tlsconfig.Load(set.Files("c1"))
	if err != nil {
		t.Fatal(err)
	}
	asClient := grpc.WithTransportCredentials(cliStore.ClientCredentials(tlsconfig.RoleHead))
	stream, err := wire.NewWorkerServiceClient(dial(asClient, addrs[leader])).Connect(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if !errors.Is(errs.FromStatus(err), errs.ErrPermissionDenied) {
		t.Fatalf("client certificate on the worker stream: %v; want PermissionDenied", err)
	}

	// Another worker's certificate, or one made before certificates named
	// their worker, cannot open a stream as w1 (the hello as a worker of
	// this build would send it: the right protocol, no instance, so that
	// nothing but the certificate stops it); w1's own stream stays.
	asOther := grpc.WithTransportCredentials(set.Store(t, tlsconfig.RoleWorker, "w2").ClientCredentials(tlsconfig.RoleHead))
	oldWorker := grpc.WithTransportCredentials(mustLoad(t, set.IssueWithoutNode(t, tlsconfig.RoleWorker, "old")).ClientCredentials(tlsconfig.RoleHead))
	for name, tc := range map[string]struct {
		creds grpc.DialOption
		want  string
	}{
		"w2's certificate": {asOther, `the hello says worker w1, but certificate "w2" is worker w2's (w2.worker.megaflow), not worker w1's`},
		"no worker id":     {oldWorker, "names no worker id (no DNS name w1.worker.megaflow): it was made before certificates named their node; reissue it with megaflow tls cert create --worker --node-id w1"},
	} {
		stream, err := wire.NewWorkerServiceClient(dial(tc.creds, addrs[leader])).Connect(ctx)
		if err == nil {
			err = stream.Send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_Hello{Hello: &wire.WorkerHello{WireVersion: version.WireCurrent,
				Info: &wire.WorkerInfo{Id: w.ID, Runtime: "fake", Capacity: &wire.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30}}}}})
		}
		if err == nil {
			_, err = stream.Recv()
		}
		if err := errs.FromStatus(err); !errors.Is(err, errs.ErrPermissionDenied) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("hello as %s with %s: %v; want PermissionDenied %q", w.ID, name, err, tc.want)
		}
	}
	if !c.Members[leader].Head().WorkerConnected(w.ID) {
		t.Fatalf("worker %s lost its stream to the leader to refused hellos in its name", w.ID)
	}

	// The worker's sandbox server: heads only, and only to a head that
	// expects this worker.
	sbx := w.Worker().SandboxAddr()
	readFile := func(creds grpc.DialOption) error {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, err := wire.NewSandboxWorkerServiceClient(dial(creds, sbx)).WriteFile(cctx, &wire.SandboxWriteFileRequest{SandboxId: "none"})
		return errs.FromStatus(err)
	}
	for name, creds := range map[string]grpc.DialOption{
		"plaintext":           grpc.WithTransportCredentials(insecure.NewCredentials()),
		"a client":            asClient,
		"a worker":            grpc.WithTransportCredentials(workerTLS.ClientCredentials(tlsconfig.RoleWorker)),
		"another CA":          grpc.WithTransportCredentials(mustLoad(t, foreign).ClientCredentials(tlsconfig.RoleWorker)),
		"a head expecting w2": grpc.WithTransportCredentials(headTLS["h1"].ClientCredentialsFor(tlsconfig.RoleWorker, "w2")),
		"a head (ok)":         grpc.WithTransportCredentials(headTLS["h1"].ClientCredentialsFor(tlsconfig.RoleWorker, w.ID)),
	} {
		err := readFile(creds)
		reached := err != nil && !errors.Is(err, errs.ErrUnavailable) && !errors.Is(err, errs.ErrPermissionDenied) && !errors.Is(err, context.DeadlineExceeded)
		if want := name == "a head (ok)"; reached != want {
			t.Errorf("sandbox server, %s: %v (reached the service: %v, want %v)", name, err, reached, want)
		}
	}

	// SIGHUP's reload on every head: new certificates, same cluster.
	for id, s := range headTLS {
		set.Issue(t, tlsconfig.RoleHead, id)
		if err := s.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	c.Kill(leader) // new Raft connections, forwarded calls and a new worker stream, all with the new certificates
	c.WaitLeader(30 * time.Second)
	if _, err := cl.Submit(ctx, tlsGraph("tls-2", 3)); err != nil {
		t.Fatalf("submit after reload: %v", err)
	}
	if g, err := cl.Wait(ctx, "tls-2"); err != nil || g.State != client.GraphSucceeded {
		t.Fatalf("graph after reload: %v, %v", g, err)
	}
	c.Restart(leader)
}

func mustLoad(t *testing.T, f tlsconfig.Files) *tlsconfig.Store {
	t.Helper()
	s, err := tlsconfig.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tlsGraph is n independent tasks on the fake runtime.
func tlsGraph(id string, n int) *client.GraphSpec {
	g := &client.GraphSpec{Id: id}
	for i := range n {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", i), Image: "busybox",
			Command: []string{"/bin/work"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}})
	}
	return g
}
