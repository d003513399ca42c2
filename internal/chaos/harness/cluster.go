package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/chaos/fault"
	"github.com/megaflow/megaflow/internal/chaos/history"
	"github.com/megaflow/megaflow/internal/chaos/netns"
)

// Ports every host uses on its own address.
const (
	raftPort   = 7000
	grpcPort   = 7070
	gossipPort = 7946
)

// cluster is the run's hosts and processes. heads[i] runs on
// net.Hosts[i]; workers[j] on net.Hosts[3+j].
type cluster struct {
	cfg     *Config
	net     *netns.Net
	heads   []*proc
	workers []*proc
	grpc    []string
	admin   *client.Client
}

func newCluster(ctx context.Context, cfg *Config) (*cluster, error) {
	names := []string{"h1", "h2", "h3"}
	for i := range cfg.Workers {
		names = append(names, fmt.Sprintf("w%d", i+1))
	}
	n, err := netns.Build(ctx, names, nil)
	if err != nil {
		return nil, err
	}
	c := &cluster{cfg: cfg, net: n}
	var gossip []string
	for _, h := range n.Hosts[:3] {
		gossip = append(gossip, fmt.Sprintf("%s:%d", h.IP, gossipPort))
		c.grpc = append(c.grpc, fmt.Sprintf("%s:%d", h.IP, grpcPort))
	}
	for i, h := range n.Hosts[:3] {
		var join []string
		for j, g := range gossip {
			if j != i {
				join = append(join, g)
			}
		}
		c.heads = append(c.heads, &proc{name: h.Name, host: h, net: n, bin: cfg.HeadBin, log: filepath.Join(cfg.Dir, "logs", h.Name+".log"), args: []string{
			"--node-id", h.Name, "--data-dir", filepath.Join(cfg.Dir, "data", h.Name),
			"--raft-addr", fmt.Sprintf("%s:%d", h.IP, raftPort), "--grpc-addr", c.grpc[i], "--gossip-addr", gossip[i], "--http-addr=",
			"--bootstrap-expect", "3", "--join", strings.Join(join, ","), "--worker-lease", cfg.Lease.String(), "--worker-lease-margin", cfg.LeaseMargin.String()}})
	}
	for _, h := range n.Hosts[3:] {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, "hosts", h.Name, "exec"), 0o755); err != nil {
			_ = n.Remove(context.Background())
			return nil, err
		}
		c.workers = append(c.workers, &proc{name: h.Name, host: h, net: n, bin: cfg.WorkerBin, log: filepath.Join(cfg.Dir, "logs", h.Name+".log"), args: []string{
			"--node-id", h.Name, "--data-dir", filepath.Join(cfg.Dir, "data", h.Name),
			"--gossip-addr", fmt.Sprintf("%s:%d", h.IP, gossipPort), "--http-addr=", "--join", strings.Join(gossip, ","),
			"--runtime", "process", "--cpu-millis", "4000", "--memory-bytes", strconv.Itoa(4 << 30), "--nvml=false",
			"--init-path", cfg.InitBin, "--heartbeat-interval", cfg.HeartbeatInterval().String()}})
	}
	c.admin, err = client.Dial(ctx, c.grpc, client.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		_ = n.Remove(context.Background())
		return nil, err
	}
	return c, nil
}

// startAll starts the heads, waits for a leader, starts the workers and
// waits until the table shows them alive.
func (c *cluster) startAll(ctx context.Context) error {
	for _, p := range c.heads {
		if err := p.start(); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, 60*time.Second, "a leader among the heads", func() bool { return c.leader(ctx) >= 0 }); err != nil {
		return err
	}
	for _, p := range c.workers {
		if err := p.start(); err != nil {
			return err
		}
	}
	return waitFor(ctx, 60*time.Second, fmt.Sprintf("%d alive workers", len(c.workers)), func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ws, err := c.admin.ListWorkers(cctx, client.ReadOptions{RequireLeader: true})
		alive := 0
		for _, w := range ws {
			if w.GetStatus().String() == "WORKER_STATUS_ALIVE" {
				alive++
			}
		}
		return err == nil && alive == len(c.workers)
	})
}

// leader returns the index of the head the cluster reports as leader, or -1.
func (c *cluster) leader(ctx context.Context) int {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := c.admin.ClusterStatus(cctx)
	if err != nil || st.LeaderId == "" {
		return -1
	}
	for i, p := range c.heads {
		if p.name == st.LeaderId {
			return i
		}
	}
	return -1
}

// stopAll stops every worker, then every head (SIGTERM, then SIGKILL).
func (c *cluster) stopAll() {
	for _, p := range c.workers {
		p.stop(30 * time.Second)
	}
	for _, p := range c.heads {
		p.stop(30 * time.Second)
	}
}

// remove kills what is left and deletes the network.
func (c *cluster) remove() {
	for _, p := range append(append([]*proc(nil), c.workers...), c.heads...) {
		if p.running() {
			p.thaw()
			p.kill9()
		}
	}
	c.admin.Close()
	if err := c.net.Remove(context.Background()); err != nil {
		c.cfg.say("chaos: removing network %s: %v", c.net.Prefix, err)
	}
}

// injectAll injects the schedule, one fault at a time, and returns what it
// did. Each fault is healed at the end of its hold.
func (c *cluster) injectAll(ctx context.Context, rec *history.Recorder, sched []fault.Fault) []Injected {
	var out []Injected
	for _, f := range sched {
		if !sleepUntil(ctx, rec.Start().Add(f.At)) {
			break
		}
		in := Injected{Fault: f, Start: rec.Now()}
		target, heal, err := c.inject(ctx, f)
		in.Target = target
		if err != nil {
			in.Err = err.Error()
		}
		sleepUntil(ctx, time.Now().Add(f.Hold))
		if heal != nil {
			if err := heal(); err != nil && in.Err == "" {
				in.Err = "heal: " + err.Error()
			}
		}
		in.End = rec.Now()
		c.cfg.say("chaos: %-40s %-22s %s", f.String(), target, in.Err)
		out = append(out, in)
	}
	sleepUntil(ctx, rec.Start().Add(c.cfg.Profile.Duration))
	return out
}

// inject starts fault f and returns its target and how to heal it.
func (c *cluster) inject(ctx context.Context, f fault.Fault) (string, func() error, error) {
	leader := c.leader(ctx)
	nh, nw := len(c.heads), len(c.workers)
	hosts := c.net.Hosts
	lname := func(i int) string {
		if i == leader {
			return c.heads[i].name + " (leader)"
		}
		return c.heads[i].name
	}
	healHost := func(h netns.Host) func() error { return func() error { return c.net.Heal(context.Background(), h) } }
	switch f.Kind {
	case fault.KillHead:
		i := fault.PickHead(f.Pick, leader, nh)
		c.heads[i].kill9()
		return lname(i), c.heads[i].start, nil
	case fault.KillWorker:
		w := c.workers[int(f.Pick%uint32(nw))]
		w.kill9()
		return w.name, w.start, nil
	case fault.FreezeHead:
		i := fault.PickHead(f.Pick, leader, nh)
		c.heads[i].freeze()
		return lname(i), func() error { c.heads[i].thaw(); return nil }, nil
	case fault.FreezeWorker:
		w := c.workers[int(f.Pick%uint32(nw))]
		w.freeze()
		return w.name, func() error { w.thaw(); return nil }, nil
	case fault.IsolateNode:
		h := hosts[int(f.Pick%uint32(len(hosts)))]
		var err error
		for _, o := range hosts {
			if o.Name != h.Name {
				err = joinErr(err, c.net.Cut(ctx, h, o))
			}
		}
		return h.Name + " from all", healHost(h), err
	case fault.IsolateLeader:
		i := fault.PickHead(0, leader, nh) // the leader when one is known
		h := hosts[i]
		var err error
		for j := range nh {
			if j != i {
				err = joinErr(err, c.net.Cut(ctx, h, hosts[j]))
			}
		}
		return lname(i) + " from heads", healHost(h), err
	case fault.WorkerFromLeader:
		i := fault.PickHead(0, leader, nh)
		w := hosts[nh+int(f.Pick%uint32(nw))]
		return w.Name + " from " + lname(i), healHost(w), c.net.Cut(ctx, w, hosts[i])
	case fault.Asymmetric:
		i := fault.PickHead(0, leader, nh)
		j := fault.PickOther(f.Pick, i, nh)
		return lname(i) + " deaf to " + c.heads[j].name, healHost(hosts[i]), c.net.Deaf(ctx, hosts[i], hosts[j])
	case fault.Slow:
		h := hosts[int(f.Pick%uint32(len(hosts)))]
		return h.Name, healHost(h), c.net.Slow(ctx, h)
	case fault.Loss:
		h := hosts[int(f.Pick%uint32(len(hosts)))]
		return h.Name, healHost(h), c.net.Loss(ctx, h, 0.3)
	}
	return "", nil, fmt.Errorf("unknown fault kind %q", f.Kind)
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return fmt.Errorf("%w; %w", a, b)
}

// healAll removes every network fault, continues every frozen process and
// restarts every process that is not running.
func (c *cluster) healAll(ctx context.Context) {
	for _, h := range c.net.Hosts {
		_ = c.net.Heal(ctx, h)
	}
	for _, p := range append(append([]*proc(nil), c.heads...), c.workers...) {
		if p.running() {
			p.signal(syscall.SIGCONT)
			continue
		}
		if err := p.start(); err != nil {
			c.cfg.say("chaos: restart %s: %v", p.name, err)
		}
	}
}

// sleepUntil waits until t or ctx ends; it reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// waitFor polls cond every 100 ms until it holds, ctx ends or timeout
// passes; the error names what it waited for.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		if !sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) {
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
	return nil
}
