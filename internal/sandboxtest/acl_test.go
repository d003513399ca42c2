package sandboxtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker"
)

// With ACLs on and no TLS the worker's sandbox port admits only the
// heads, which hold the cluster's relay key (docs/security.md): an exec
// through the API works, while an exec sent straight to the worker's
// sandbox address (the address the dashboard shows) without the key, or
// with a wrong one, is refused Unauthenticated and reads nothing. The key
// is in no token list, no dashboard answer and no metric. A worker
// restarted after the bootstrap gets the key again at its Welcome. Needs
// Docker.
func TestSandboxRelayKeyWithACL(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	e := newEnvOpts(t, 0, func(c *head.Config) { c.ACL, c.HTTPAddr = true, "127.0.0.1:0" }, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, adminSecret, err := e.c.Client().BootstrapACL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.Dial(ctx, e.c.GRPCAddrs(), client.WithToken(adminSecret), client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	e.cl = admin
	_, workerSecret, err := admin.CreateToken(ctx, "", client.RoleWorker, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := e.addWorker(func(cfg *worker.Config) { cfg.Token, cfg.HTTPAddr = workerSecret, "127.0.0.1:0" })

	s := e.create(ctx, client.SandboxSpec{})
	if err := s.WriteFile(ctx, "/tmp/secret", []byte("tenant secret\n"), 0o600); err != nil {
		t.Fatalf("WriteFile through a head: %v", err)
	}
	if res, err := s.Exec(ctx, []string{"cat", "/tmp/secret"}, client.ExecOptions{}); err != nil || string(res.Stdout) != "tenant secret\n" {
		t.Fatalf("exec through a head: %+v, %v; want the file", res, err)
	}

	var key []byte
	for _, h := range e.c.Running() {
		testcluster.WaitFor(t, 10*time.Second, "head "+h.ID()+" to apply the bootstrap", func() bool { return h.FSM().View().RelayKey() != nil })
		if k := h.FSM().View().RelayKey(); key != nil && !bytes.Equal(k, key) || len(k) != acl.RelayKeyBytes {
			t.Fatalf("head %s has relay key of %d bytes, equal to the others' %v; want one key of %d bytes", h.ID(), len(k), bytes.Equal(k, key), acl.RelayKeyBytes)
		}
		key = h.FSM().View().RelayKey()
	}

	// Straight to the worker, as the tester did.
	wcli := wire.NewSandboxWorkerServiceClient(dialHead(t, w.SandboxAddr))
	execOnWorker := func(ctx context.Context) (string, error) {
		st, err := wcli.Exec(ctx, &wire.SandboxExecRequest{SandboxId: s.ID(), Attempt: 1, Argv: []string{"cat", "/tmp/secret"}})
		if err != nil {
			return "", errs.FromStatus(err)
		}
		var out []byte
		for {
			m, err := st.Recv()
			if err != nil {
				return string(out), errs.FromStatus(err)
			}
			out = append(out, m.GetStdout()...)
			if m.GetExit() != nil {
				return string(out), nil
			}
		}
	}
	wrong := bytes.Repeat([]byte{0x5a}, acl.RelayKeyBytes)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		says string
	}{
		{"no key", ctx, "carries no relay key"},
		{"a wrong key", metadata.AppendToOutgoingContext(ctx, acl.RelayKeyMetadata, hex.EncodeToString(wrong)), "not this cluster's"},
		{"a malformed key", metadata.AppendToOutgoingContext(ctx, acl.RelayKeyMetadata, "secret"), "64 hex digits"},
	} {
		out, err := execOnWorker(tc.ctx)
		if errs.ClassOf(err) != errs.Unauthenticated || !strings.Contains(err.Error(), tc.says) || out != "" {
			t.Fatalf("exec straight on the worker with %s: output %q, %v; want Unauthenticated saying %q, no output", tc.name, out, err, tc.says)
		}
	}
	// The right key is what the heads send: the worker serves it.
	if out, err := execOnWorker(metadata.AppendToOutgoingContext(ctx, acl.RelayKeyMetadata, hex.EncodeToString(key))); err != nil || out != "tenant secret\n" {
		t.Fatalf("exec on the worker with the relay key: %q, %v", out, err)
	}

	// The key is nowhere a caller can read.
	forms := []string{hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key), base64.RawURLEncoding.EncodeToString(key)}
	noKey := func(what string, text string) {
		t.Helper()
		for _, f := range forms {
			if strings.Contains(text, f) {
				t.Fatalf("%s shows the relay key", what)
			}
		}
	}
	raw, err := wire.NewMegaflowServiceClient(dialHead(t, e.c.GRPCAddrs()[0])).ListTokens(
		metadata.AppendToOutgoingContext(ctx, acl.MetadataKey, "Bearer "+adminSecret), &wire.ListTokensRequest{})
	if err != nil || len(raw.GetTokens()) != 2 {
		t.Fatalf("ListTokens: %d tokens, %v; want 2 (the admin's and the worker's)", len(raw.GetTokens()), err)
	}
	pb, _ := proto.Marshal(raw)
	noKey("ListTokens", protojson.Format(raw))
	if bytes.Contains(pb, key) {
		t.Fatal("ListTokens' answer holds the relay key")
	}
	urls := []string{"http://" + w.Worker().HTTPAddr() + "/metrics"}
	for _, h := range e.c.Running() {
		for _, path := range []string{"/api/workers", "/api/sandboxes", "/api/cluster", "/metrics"} {
			urls = append(urls, "http://"+h.HTTPAddr()+path)
		}
	}
	for _, u := range urls {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+adminSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.HasSuffix(u, "/api/workers") && (resp.StatusCode != http.StatusOK || !strings.Contains(string(body), w.ID)) {
			t.Fatalf("%s: HTTP %d %s; want the worker", u, resp.StatusCode, body)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s", u, resp.StatusCode, body)
		}
		noKey(u, string(body))
	}

	// A worker restarted after the bootstrap gets the key again.
	e.c.KillWorker(0)
	e.c.RestartWorker(0)
	testcluster.WaitFor(t, time.Minute, "the restarted worker to connect", func() bool {
		for _, h := range e.c.Running() {
			if h.WorkerConnected(w.ID) {
				return true
			}
		}
		return false
	})
	s2 := e.create(ctx, client.SandboxSpec{})
	if res, err := s2.Exec(ctx, []string{"echo", "again"}, client.ExecOptions{}); err != nil || string(res.Stdout) != "again\n" {
		t.Fatalf("exec through a head on the restarted worker: %+v, %v", res, err)
	}
	if _, err := execOnWorker(ctx); errs.ClassOf(err) != errs.Unauthenticated {
		t.Fatalf("exec straight on the restarted worker without a key: %v; want Unauthenticated", err)
	}
}
