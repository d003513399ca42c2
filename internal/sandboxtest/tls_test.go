package sandboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/tlsconfig/tlstest"
	"github.com/megaflow/megaflow/worker"
)

// With TLS on, a sandbox works end to end: the client reaches a head with
// its client certificate, and the head relays exec and files to the
// worker's sandbox server over mutual TLS (head certificate in, worker
// certificate verified). Needs Docker.
func TestSandboxOverTLS(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	set := tlstest.New(t, t.TempDir())
	headTLS := map[string]*tlsconfig.Store{}
	for _, id := range []string{"h1", "h2", "h3"} {
		headTLS[id] = set.Store(t, tlsconfig.RoleHead, id)
	}
	workerTLS := set.Store(t, tlsconfig.RoleWorker, "w1")
	f := set.Issue(t, tlsconfig.RoleClient, "c")
	cfg, err := client.TLSConfig(f.CA, f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOpts(t, 1, func(c *head.Config) { c.TLS = headTLS[c.NodeID] }, func(c *worker.Config) { c.TLS = workerTLS },
		[]client.Option{client.WithTLS(cfg), client.WithBackoff(20*time.Millisecond, 500*time.Millisecond)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{})
	res, err := s.Exec(ctx, sh(`echo over tls`), client.ExecOptions{})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "over tls\n" {
		t.Fatalf("exec over TLS: %+v, %v", res, err)
	}
	if err := s.WriteFile(ctx, "/tmp/f", []byte("x"), 0o644); err != nil {
		t.Fatalf("WriteFile over TLS: %v", err)
	}
	if got, err := s.ReadFile(ctx, "/tmp/f"); err != nil || string(got) != "x" {
		t.Fatalf("ReadFile over TLS: %q, %v", got, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
