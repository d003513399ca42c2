// Package netns owns the chaos harness's network: one Linux network
// namespace per host (head or worker), each with a veth pair to a bridge
// that lives in a namespace of its own (the switch), and one veth pair
// from the switch to the harness's namespace, so the harness reaches every
// host while faults between hosts stay inside their namespaces. Faults are
// iptables rules and tc qdiscs inside a host's namespace, so the host
// machine's own firewall is never touched.
//
// Every name starts with a run prefix ("mfchaos" and 4 hex digits); a file
// under StateDir records the pid that owns a prefix, so Sweep removes what
// a crashed run left without touching a run still alive. It needs root and
// iproute2 (ip netns, ip link), iptables and tc.
//
// Imported by internal/chaos/harness only.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BasePrefix starts every namespace and link name the harness creates.
const BasePrefix = "mfchaos"

// StateDir holds one file per live run: its prefix, holding the owner's pid.
const StateDir = "/run/megaflow-chaos"

var prefixRE = regexp.MustCompile(`^` + BasePrefix + `[0-9a-f]{4}$`)

// Runner runs a command and returns its combined output. The real one is
// Exec; tests give a fake.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Exec runs name with args and returns stdout and stderr together; an
// error carries the output.
func Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Available reports why the harness cannot build its network here ("" when
// it can): not root, or no working `ip netns`.
func Available(ctx context.Context) string {
	if os.Geteuid() != 0 {
		return "the chaos harness needs root (network namespaces, iptables)"
	}
	for _, bin := range []string{"ip", "iptables", "tc"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Sprintf("%s is not installed (iproute2, iptables)", bin)
		}
	}
	name := fmt.Sprintf("%sprobe%d", BasePrefix, os.Getpid())
	if _, err := Exec(ctx, "ip", "netns", "add", name); err != nil {
		return fmt.Sprintf("ip netns does not work here: %v", err)
	}
	_, _ = Exec(ctx, "ip", "netns", "del", name)
	return ""
}

// Host is one machine of the cluster: a namespace and its address.
type Host struct {
	// Name is the host's short name ("h1", "w2").
	Name string
	// NS is its namespace's name.
	NS string
	// IP is its IPv4 address on the cluster's /24.
	IP string
}

// Net is a built network. Its methods are safe for one goroutine at a time
// per host (the harness injects one fault at a time).
type Net struct {
	// Prefix starts every name of this run.
	Prefix string
	// Subnet is the /24's first three octets ("10.213.7").
	Subnet string
	// HarnessIP is the harness's own address on the /24.
	HarnessIP string
	// Hosts in the order given to Build.
	Hosts []Host
	// NetemOK: the kernel has sch_netem (else Slow uses tbf).
	NetemOK bool

	sw  string // the switch namespace
	run Runner
}

// Build creates a network for hosts named names under a fresh prefix, on a
// /24 of 10.213.0.0/16 that no interface of this machine uses. On error it
// removes what it made.
func Build(ctx context.Context, names []string, run Runner) (n *Net, err error) {
	if run == nil {
		run = Exec
	}
	if len(names) == 0 || len(names) > 200 {
		return nil, fmt.Errorf("netns: %d hosts; give 1 to 200", len(names))
	}
	prefix, subnet, err := claim(ctx, run)
	if err != nil {
		return nil, err
	}
	n = &Net{Prefix: prefix, Subnet: subnet, HarnessIP: subnet + ".254", sw: prefix + "-sw", run: run}
	defer func() {
		if err != nil {
			_ = n.Remove(context.Background())
		}
	}()
	steps := [][]string{
		{"ip", "netns", "add", n.sw},
		{"ip", "-n", n.sw, "link", "set", "lo", "up"},
		{"ip", "-n", n.sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", n.sw, "link", "set", "br0", "up"},
		// The harness's leg: prefix+"r" in this namespace, "r" in the switch.
		{"ip", "link", "add", prefix + "r", "type", "veth", "peer", "name", "r", "netns", n.sw},
		{"ip", "-n", n.sw, "link", "set", "r", "master", "br0", "up"},
		{"ip", "addr", "add", n.HarnessIP + "/24", "dev", prefix + "r"},
		{"ip", "link", "set", prefix + "r", "up"},
	}
	for i, name := range names {
		if len(name) == 0 || len(name) > 12 || strings.ContainsAny(name, " /-") {
			return n, fmt.Errorf("netns: host name %q: give 1 to 12 characters without spaces, '/' or '-'", name)
		}
		h := Host{Name: name, NS: prefix + "-" + name, IP: fmt.Sprintf("%s.%d", subnet, i+1)}
		n.Hosts = append(n.Hosts, h)
		steps = append(steps,
			[]string{"ip", "netns", "add", h.NS},
			[]string{"ip", "-n", h.NS, "link", "set", "lo", "up"},
			[]string{"ip", "-n", n.sw, "link", "add", "v-" + name, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
			[]string{"ip", "-n", n.sw, "link", "set", "v-" + name, "master", "br0", "up"},
			[]string{"ip", "-n", h.NS, "addr", "add", h.IP + "/24", "dev", "eth0"},
			[]string{"ip", "-n", h.NS, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if _, err := run(ctx, s[0], s[1:]...); err != nil {
			return n, fmt.Errorf("netns: build %s: %w", prefix, err)
		}
	}
	if _, err := run(ctx, "ip", "netns", "exec", n.Hosts[0].NS, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"); err == nil {
		n.NetemOK = true
		_, _ = run(ctx, "ip", "netns", "exec", n.Hosts[0].NS, "tc", "qdisc", "del", "dev", "lo", "root")
	}
	return n, nil
}

// claim picks an unused prefix and /24 and records this process as the
// owner of the prefix.
func claim(ctx context.Context, run Runner) (prefix, subnet string, err error) {
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return "", "", fmt.Errorf("netns: %w", err)
	}
	addrs, err := run(ctx, "ip", "-4", "-o", "addr", "show")
	if err != nil {
		return "", "", fmt.Errorf("netns: list addresses: %w", err)
	}
	seed := uint32(time.Now().UnixNano()) ^ uint32(os.Getpid())<<8
	for try := range 4096 {
		v := (seed + uint32(try)*2654435761) & 0xffff
		prefix = fmt.Sprintf("%s%04x", BasePrefix, v)
		subnet = fmt.Sprintf("10.213.%d", v&0xff)
		if bytes.Contains(addrs, []byte(" "+subnet+".")) {
			continue
		}
		f, err := os.OpenFile(filepath.Join(StateDir, prefix), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			continue
		}
		fmt.Fprintf(f, "%d\n", os.Getpid())
		f.Close()
		return prefix, subnet, nil
	}
	return "", "", errors.New("netns: no free prefix and subnet in 10.213.0.0/16")
}

// Command returns a command that runs bin with args inside host's
// namespace (through `ip netns exec`, which execs bin: the command's pid
// is bin's).
func (n *Net) Command(h Host, bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, bin}, args...)...)
}

func (n *Net) in(ctx context.Context, h Host, args ...string) error {
	_, err := n.run(ctx, "ip", append([]string{"netns", "exec", h.NS}, args...)...)
	return err
}

// Cut drops every packet between a and b, both ways (rules in a's
// namespace).
func (n *Net) Cut(ctx context.Context, a, b Host) error {
	return errors.Join(
		n.in(ctx, a, "iptables", "-w", "-I", "INPUT", "-s", b.IP, "-j", "DROP"),
		n.in(ctx, a, "iptables", "-w", "-I", "OUTPUT", "-d", b.IP, "-j", "DROP"))
}

// Deaf makes a drop every packet it receives from b; b still receives a's.
func (n *Net) Deaf(ctx context.Context, a, b Host) error {
	return n.in(ctx, a, "iptables", "-w", "-I", "INPUT", "-s", b.IP, "-j", "DROP")
}

// Loss makes h drop a share p (0 to 1) of the packets it receives from
// other hosts (the harness's own packets are spared).
func (n *Net) Loss(ctx context.Context, h Host, p float64) error {
	return errors.Join(
		n.in(ctx, h, "iptables", "-w", "-A", "INPUT", "-s", n.HarnessIP, "-j", "ACCEPT"),
		n.in(ctx, h, "iptables", "-w", "-A", "INPUT", "-s", n.Subnet+".0/24",
			"-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(p, 'f', 3, 64), "-j", "DROP"))
}

// Slow delays what h sends: netem delay 150 ms ± 50 ms where the kernel
// has netem, else a 256 kbit/s token bucket whose queue holds up to 300 ms.
func (n *Net) Slow(ctx context.Context, h Host) error {
	if n.NetemOK {
		return n.in(ctx, h, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "150ms", "50ms")
	}
	return n.in(ctx, h, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "256kbit", "burst", "8kb", "latency", "300ms")
}

// Heal removes every rule and qdisc of h.
func (n *Net) Heal(ctx context.Context, h Host) error {
	err := errors.Join(n.in(ctx, h, "iptables", "-w", "-F", "INPUT"), n.in(ctx, h, "iptables", "-w", "-F", "OUTPUT"))
	_ = n.in(ctx, h, "tc", "qdisc", "del", "dev", "eth0", "root") // none is no error worth reporting
	return err
}

// Pids returns the processes running in h's namespace.
func (n *Net) Pids(ctx context.Context, h Host) ([]int, error) {
	return nsPids(ctx, n.run, h.NS)
}

func nsPids(ctx context.Context, run Runner, ns string) ([]int, error) {
	out, err := run(ctx, "ip", "netns", "pids", ns)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// Remove kills every process left in the run's namespaces, deletes the
// namespaces and links, and releases the prefix.
func (n *Net) Remove(ctx context.Context) error {
	return removePrefix(ctx, n.run, n.Prefix)
}

func removePrefix(ctx context.Context, run Runner, prefix string) error {
	out, _ := run(ctx, "ip", "netns", "list")
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], prefix+"-") {
			continue
		}
		pids, _ := nsPids(ctx, run, f[0])
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if _, err := run(ctx, "ip", "netns", "del", f[0]); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := run(ctx, "ip", "link", "show", prefix+"r"); err == nil {
		// The kernel removes a namespace's devices asynchronously, the
		// veth's host end with its peer: it may go between show and del.
		if _, err := run(ctx, "ip", "link", "del", prefix+"r"); err != nil {
			if _, still := run(ctx, "ip", "link", "show", prefix+"r"); still == nil {
				errs = append(errs, err)
			}
		}
	}
	_ = os.Remove(filepath.Join(StateDir, prefix))
	return errors.Join(errs...)
}

// Sweep removes the namespaces, links and records of runs whose owner
// process is gone (a run that crashed or was killed) and returns their
// prefixes. Runs still alive are left alone.
func Sweep(ctx context.Context, run Runner) ([]string, error) {
	if run == nil {
		run = Exec
	}
	out, err := run(ctx, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	prefixes := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if p, _, ok := strings.Cut(f[0], "-"); ok && prefixRE.MatchString(p) {
			prefixes[p] = true
		}
	}
	links, _ := run(ctx, "ip", "-o", "link", "show")
	for _, line := range strings.Split(string(links), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasSuffix(name, "r") && prefixRE.MatchString(strings.TrimSuffix(name, "r")) {
			prefixes[strings.TrimSuffix(name, "r")] = true
		}
	}
	ents, _ := os.ReadDir(StateDir)
	for _, e := range ents {
		if prefixRE.MatchString(e.Name()) {
			prefixes[e.Name()] = true
		}
	}
	var swept []string
	var errs []error
	for p := range prefixes {
		if ownerAlive(p) {
			continue
		}
		if err := removePrefix(ctx, run, p); err != nil {
			errs = append(errs, err)
		}
		swept = append(swept, p)
	}
	return swept, errors.Join(errs...)
}

// ownerAlive reports whether the process recorded as prefix's owner still
// runs.
func ownerAlive(prefix string) bool {
	b, err := os.ReadFile(filepath.Join(StateDir, prefix))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}
