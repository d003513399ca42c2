package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// needNetns skips when this machine cannot build namespaces, except in CI
// (CI=true), where the chaos harness must run.
func needNetns(t *testing.T) {
	t.Helper()
	if why := Available(context.Background()); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the chaos network cannot be built: %s", why)
		}
		t.Skipf("skipped: %s (run as root with iproute2 and iptables)", why)
	}
}

// reach reports whether from's namespace can open a TCP connection to
// to:port within 300 ms, by running this test binary's helper mode there.
func reach(t *testing.T, n *Net, from Host, addr string) bool {
	t.Helper()
	cmd := n.Command(from, os.Args[0], "-test.run=TestHelperDial", "--", addr)
	cmd.Env = append(os.Environ(), "NETNS_HELPER_DIAL="+addr)
	out, _ := cmd.CombinedOutput()
	return strings.Contains(string(out), "dial ok")
}

func TestHelperDial(t *testing.T) {
	addr := os.Getenv("NETNS_HELPER_DIAL")
	if addr == "" {
		t.Skip("helper")
	}
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		fmt.Println("dial failed:", err)
		return
	}
	c.Close()
	fmt.Println("dial ok")
}

// TestNetCutHealAndRemove builds two hosts, listens in one, and checks
// that the other and the harness reach it, that Cut and Deaf stop the
// other but not the harness, that Heal restores it, and that Remove (and
// Sweep of a dead owner's run) leaves no namespace or link.
func TestNetCutHealAndRemove(t *testing.T) {
	needNetns(t)
	ctx := context.Background()
	n, err := Build(ctx, []string{"a", "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Remove(ctx)
	a, b := n.Hosts[0], n.Hosts[1]
	lis := n.Command(b, os.Args[0], "-test.run=TestHelperListen")
	lis.Env = append(os.Environ(), "NETNS_HELPER_LISTEN="+b.IP+":7777")
	if err := lis.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Process.Kill(); _ = lis.Wait() }()
	addr := b.IP + ":7777"
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the harness cannot reach the listener in b")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !reach(t, n, a, addr) {
		t.Fatal("a cannot reach b before any fault")
	}
	if err := n.Cut(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	if reach(t, n, a, addr) {
		t.Fatal("a reaches b through a cut")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err != nil {
		t.Fatalf("the cut between a and b cut the harness too: %v", err)
	} else {
		c.Close()
	}
	if err := n.Heal(ctx, a); err != nil {
		t.Fatal(err)
	}
	if !reach(t, n, a, addr) {
		t.Fatal("a cannot reach b after healing")
	}
	if err := n.Deaf(ctx, b, a); err != nil {
		t.Fatal(err)
	}
	if reach(t, n, a, addr) {
		t.Fatal("b deaf to a still completes a's TCP handshake")
	}
	_ = n.Heal(ctx, b)
	for _, f := range []func(context.Context, Host) error{n.Slow, func(ctx context.Context, h Host) error { return n.Loss(ctx, h, 0.3) }} {
		if err := f(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := n.Heal(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	pids, err := n.Pids(ctx, b)
	if err != nil || len(pids) == 0 {
		t.Fatalf("pids in b: %v, %v", pids, err)
	}
	if err := n.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	out, _ := Exec(ctx, "ip", "netns", "list")
	if strings.Contains(string(out), n.Prefix) {
		t.Fatalf("namespaces left after Remove:\n%s", out)
	}
	if _, err := Exec(ctx, "ip", "link", "show", n.Prefix+"r"); err == nil {
		t.Fatal("the harness's link is left after Remove")
	}
}

func TestHelperListen(t *testing.T) {
	addr := os.Getenv("NETNS_HELPER_LISTEN")
	if addr == "" {
		t.Skip("helper")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// TestSweepRemovesADeadRunOnly leaves the namespaces of a run whose owner
// is gone and of one still alive, and checks that Sweep removes the first
// only.
func TestSweepRemovesADeadRunOnly(t *testing.T) {
	needNetns(t)
	ctx := context.Background()
	dead, err := Build(ctx, []string{"x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Remove(ctx)
	live, err := Build(ctx, []string{"y"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove(ctx)
	// A pid that is not running: the owner of the "crashed" run.
	if err := os.WriteFile(StateDir+"/"+dead.Prefix, []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	swept, err := Sweep(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(swept, ","), dead.Prefix) || strings.Contains(strings.Join(swept, ","), live.Prefix) {
		t.Fatalf("swept %v; want %s and not %s", swept, dead.Prefix, live.Prefix)
	}
	out, _ := Exec(ctx, "ip", "netns", "list")
	if strings.Contains(string(out), dead.Prefix) || !strings.Contains(string(out), live.Prefix) {
		t.Fatalf("after Sweep:\n%s", out)
	}
}
