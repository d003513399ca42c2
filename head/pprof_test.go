package head_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// httpGet answers GET url with the Authorization header auth ("": none):
// the status and the body.
func httpGet(ctx context.Context, t *testing.T, url, auth string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// isProfile reports whether b is a gzipped pprof profile.
func isProfile(b []byte) bool { return bytes.HasPrefix(b, []byte{0x1f, 0x8b}) }

// A head's /metrics has the Go runtime's and the process's series (heap in
// use, the runtime's memory classes, GC, goroutines, resident memory);
// /debug/pprof is served only with Config.Pprof: a head without it answers
// 404, one with it serves the index and a heap profile.
func TestHeadMetricsHaveRuntimeSeriesAndPprofIsOptIn(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { withHTTP(cfg); cfg.Pprof = cfg.NodeID == "h1" }})
	c.WaitLeader(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	on, off := c.Members[0].Head(), c.Members[1].Head()
	if on.ID() != "h1" {
		t.Fatalf("member 0 is %s, want h1 (the one with Pprof)", on.ID())
	}
	f := scrape(t, off)
	for _, name := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memory_classes_heap_free_bytes",
		"go_memory_classes_heap_released_bytes", "go_gc_duration_seconds", "go_goroutines", "process_resident_memory_bytes", "process_cpu_seconds_total"} {
		if _, ok := f[name]; !ok {
			t.Errorf("%s's /metrics has no %s", off.ID(), name)
		}
	}
	if code, _ := httpGet(ctx, t, "http://"+off.HTTPAddr()+"/debug/pprof/heap", ""); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/heap on a head without Pprof: %d, want 404", code)
	}

	base := "http://" + on.HTTPAddr()
	if code, b := httpGet(ctx, t, base+"/debug/pprof/", ""); code != http.StatusOK || !strings.Contains(string(b), "heap") {
		t.Errorf("GET /debug/pprof/ with Pprof: %d %.200q, want 200 listing the profiles", code, b)
	}
	if code, b := httpGet(ctx, t, base+"/debug/pprof/heap?gc=1", ""); code != http.StatusOK || !isProfile(b) {
		t.Errorf("GET /debug/pprof/heap with Pprof: %d, %d bytes; want 200 and a gzipped profile", code, len(b))
	}
}

// adminAndReadTokens bootstraps c's ACLs and returns the admin token's
// secret and that of a read token of tenant "a".
func adminAndReadTokens(ctx context.Context, t *testing.T, c *testcluster.Cluster) (adminSecret, readSecret string) {
	t.Helper()
	_, adminSecret, err := c.Client().BootstrapACL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.Dial(ctx, c.GRPCAddrs(), client.WithToken(adminSecret))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	_, readSecret, err = admin.CreateToken(ctx, "a", client.RoleRead, 0)
	if err != nil {
		t.Fatal(err)
	}
	return adminSecret, readSecret
}

// With ACLs on, /debug/pprof needs an admin token, as the dashboard's API:
// no token and a read token are refused 401 and counted; an admin token
// gets a heap profile.
func TestPprofNeedsAnAdminTokenWithACLs(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { withHTTP(cfg); cfg.ACL = true; cfg.Pprof = true }})
	lh := c.Members[c.WaitLeader(30*time.Second)].Head()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adminSecret, readSecret := adminAndReadTokens(ctx, t, c)
	url := "http://" + lh.HTTPAddr() + "/debug/pprof/heap"
	for _, tc := range []struct{ auth, want string }{
		{"", "/debug/pprof shows the head's memory"},
		{"Bearer " + readSecret, "needs role admin"},
	} {
		if code, b := httpGet(ctx, t, url, tc.auth); code != http.StatusUnauthorized || !strings.Contains(string(b), tc.want) {
			t.Errorf("GET /debug/pprof/heap with %q: %d %.200q; want 401 saying %q", tc.auth, code, b, tc.want)
		}
	}
	if got := value(scrape(t, lh), "megaflow_acl_refusals_total", "method", "pprof"); got < 2 {
		t.Errorf("megaflow_acl_refusals_total{method=pprof} = %v, want at least 2", got)
	}
	testcluster.WaitFor(t, 10*time.Second, "a heap profile with the admin token", func() bool {
		code, b := httpGet(ctx, t, url, "Bearer "+adminSecret)
		return code == http.StatusOK && isProfile(b)
	})
}
