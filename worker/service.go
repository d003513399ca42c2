package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker/attempt"
)

// Service tasks on the worker.
//
// An attempt of a task of kind service gets a host port from the worker's
// range (Config.ServicePortMin..ServicePortMax), or its service.port
// itself where ports are not published (the process runtime's processes,
// and Docker containers on network "host", listen on the host). The task finds the port it must
// listen on in PORT and MEGAFLOW_SERVICE_PORT (inside its container: its
// service.port if set, else the host port, published on the host by the
// Docker runtime), and its public endpoint in MEGAFLOW_SERVICE_ENDPOINT.
// A Docker service task without a network gets "bridge" (network "none"
// could not be published), and so does a task that names services in
// uses_services (it must reach their endpoints).
//
// Once the container runs, the driver probes readiness on the host port:
// an HTTP GET of service.readiness_http_path answered 2xx, a TCP connect
// (service.tcp_probe), or nothing (ready at start), every
// ServiceProbeInterval until ServiceReadyTimeout. Ready: SERVICE_READY goes
// to the head with the endpoint "http://<AdvertiseHost>:<host port>", which
// the head publishes under the service name. Not ready in time: the
// attempt is stopped and reported FAILED ("service not ready: ..."), and
// the head applies the restart policy. The port is held until the attempt
// is forgotten (its container removed), and is recorded in a container
// label so a restarted worker that adopts the container keeps it and
// probes it again.

// Labels of service containers.
const (
	// LabelServicePort is a service attempt's host port, decimal.
	LabelServicePort = "megaflow.service.port"
	// LabelServiceProbe is its readiness probe: "http:<path>", "tcp" or
	// "none".
	LabelServiceProbe = "megaflow.service.probe"
)

// serviceRun is what the driver knows of a service attempt.
type serviceRun struct {
	// hostPort is the port on the worker's host; 0 until the start took one.
	hostPort int
	// wantPort is the task's service.port (0: any).
	wantPort int
	// httpPath is the readiness path; tcp probes by connect instead; both
	// empty: ready at start.
	httpPath string
	tcp      bool
}

// serviceOf returns the service run of assignment a, or nil for a batch
// task.
func serviceOf(a *wire.Assignment) *serviceRun {
	s := a.GetSpec()
	if s.GetKind() != wire.TaskKind_TASK_KIND_SERVICE {
		return nil
	}
	svc := s.GetService()
	return &serviceRun{wantPort: int(svc.GetPort()), httpPath: svc.GetReadinessHttpPath(), tcp: svc.GetTcpProbe()}
}

// probeLabel encodes the probe for LabelServiceProbe.
func (s *serviceRun) probeLabel() string {
	switch {
	case s.tcp:
		return "tcp"
	case s.httpPath != "":
		return "http:" + s.httpPath
	}
	return "none"
}

// serviceFromLabels reads the service run of an adopted container, or nil
// if it is not a service's.
func serviceFromLabels(l map[string]string) *serviceRun {
	port, err := strconv.Atoi(l[LabelServicePort])
	if err != nil || port <= 0 || port > 65535 {
		return nil
	}
	s := &serviceRun{hostPort: port}
	switch p := l[LabelServiceProbe]; {
	case p == "tcp":
		s.tcp = true
	case strings.HasPrefix(p, "http:"):
		s.httpPath = strings.TrimPrefix(p, "http:")
	}
	return s
}

// publishesPorts reports whether the worker's runtime maps container ports
// to host ports for a task on network (Docker, unless the task shares the
// host's network); otherwise the task listens on the host port directly.
func (w *Worker) publishesPorts(network string) bool {
	return w.rt.Name() == "docker" && network != "host"
}

// endpoint returns the public endpoint of a service on host port port.
func (w *Worker) endpoint(port int) string {
	return "http://" + net.JoinHostPort(w.advertiseHost, strconv.Itoa(port))
}

// AdvertiseHost returns the host in the endpoints of this worker's
// services (Config.AdvertiseHost, or the one derived from GossipAddr).
func (w *Worker) AdvertiseHost() string { return w.advertiseHost }

// deriveAdvertiseHost picks the host other workers and their containers
// reach this one at: cfg.AdvertiseHost if set; else GossipAddr's host
// unless it is unspecified (0.0.0.0, ::), so that a cluster on loopback
// advertises 127.0.0.1 and any other its gossip address; else the first
// non-loopback IPv4 address of the machine's interfaces; else 127.0.0.1.
func deriveAdvertiseHost(cfg Config) string {
	if cfg.AdvertiseHost != "" {
		return cfg.AdvertiseHost
	}
	host, _, _ := net.SplitHostPort(cfg.GossipAddr)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return host
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return "127.0.0.1"
}

// portPool hands out the host ports of service attempts. Safe for
// concurrent use.
type portPool struct {
	min, max int

	mu   sync.Mutex
	next int
	used map[int]bool
}

func newPortPool(min, max int) *portPool {
	return &portPool{min: min, max: max, next: min, used: map[int]bool{}}
}

// take reserves port want, or (want 0) the next port of the range after
// the last one taken that no attempt holds and nothing listens on, so that
// a restarted service gets a new endpoint. Errors say which port was
// wanted or how full the range is.
func (p *portPool) take(want int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if want != 0 {
		if p.used[want] {
			return 0, fmt.Errorf("service port %d is held by another service attempt on this worker", want)
		}
		if err := portFree(want); err != nil {
			return 0, fmt.Errorf("service port %d is not free on this worker: %w", want, err)
		}
		p.used[want] = true
		return want, nil
	}
	n := p.max - p.min + 1
	for i := 0; i < n; i++ {
		port := p.min + (p.next-p.min+i)%n
		if p.used[port] || portFree(port) != nil {
			continue
		}
		p.used[port] = true
		p.next = port + 1
		return port, nil
	}
	return 0, fmt.Errorf("no free service port in %d-%d on this worker (%d held by service attempts); widen --service-ports",
		p.min, p.max, len(p.used))
}

// claim marks port as held by an adopted container.
func (p *portPool) claim(port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used[port] = true
}

// release gives port back once its attempt is forgotten.
func (p *portPool) release(port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, port)
}

// portFree reports whether a TCP listener can bind port on every address.
func portFree(port int) error {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	return l.Close()
}

// probe carries out ProbeReadiness in an op goroutine; it is abandoned
// (cancelled) once the attempt leaves Running (see driver.apply).
func (d *driver) probe() {
	if d.svc == nil || d.svc.hostPort == 0 {
		d.goOp(func(context.Context) attempt.Event {
			return attempt.ProbeDone{Err: errors.New("the attempt has no service port")}
		})
		return
	}
	if d.probeCancel != nil {
		d.probeCancel()
	}
	ctx, cancel := context.WithCancel(d.ctx)
	d.probeCancel = cancel
	svc := *d.svc
	endpoint := d.w.endpoint(svc.hostPort)
	d.goOp(func(context.Context) attempt.Event {
		defer cancel()
		if err := d.w.waitReady(ctx, svc); err != nil {
			return attempt.ProbeDone{Err: err}
		}
		d.log.Info("service ready", "endpoint", endpoint)
		return attempt.ProbeDone{Endpoint: endpoint}
	})
}

// watchLiveness carries out WatchLiveness in an op goroutine, abandoned
// like probe once the attempt leaves Running: it probes the ready service
// every ServiceLivenessInterval and answers LivenessLost after
// ServiceLivenessFailures failures in a row.
func (d *driver) watchLiveness() {
	if d.svc == nil || d.svc.hostPort == 0 {
		return
	}
	if d.probeCancel != nil {
		d.probeCancel()
	}
	ctx, cancel := context.WithCancel(d.ctx)
	d.probeCancel = cancel
	svc := *d.svc
	d.goOp(func(context.Context) attempt.Event {
		defer cancel()
		err := d.w.watchLive(ctx, svc)
		if err == nil {
			return nil
		}
		d.log.Warn("service stopped answering its probe", "err", err)
		return attempt.LivenessLost{Err: err}
	})
}

// watchLive probes svc every ServiceLivenessInterval until
// ServiceLivenessFailures probes in a row failed (an error naming the last
// failure) or ctx ends (nil).
func (w *Worker) watchLive(ctx context.Context, svc serviceRun) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(svc.hostPort))
	failures := 0
	for {
		tick := w.clock.NewTimer(w.cfg.ServiceLivenessInterval)
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil
		case <-tick.C():
		}
		err := w.probeOnce(ctx, addr, svc)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			failures = 0
			continue
		}
		if failures++; failures >= w.cfg.ServiceLivenessFailures {
			return fmt.Errorf("%d probes in a row failed (one every %v, each given %v); last: %w", failures, w.cfg.ServiceLivenessInterval, probeTimeout, err)
		}
	}
}

// waitReady probes svc on the loopback address of its host port every
// ServiceProbeInterval until a probe passes (nil), ServiceReadyTimeout
// passes (an error with the last probe's failure), or ctx ends.
func (w *Worker) waitReady(ctx context.Context, svc serviceRun) error {
	deadline := w.clock.NewTimer(w.cfg.ServiceReadyTimeout)
	defer deadline.Stop()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(svc.hostPort))
	var last error
	for {
		last = w.probeOnce(ctx, addr, svc)
		if last == nil {
			return nil
		}
		tick := w.clock.NewTimer(w.cfg.ServiceProbeInterval)
		select {
		case <-ctx.Done():
			tick.Stop()
			return ctx.Err()
		case <-deadline.C():
			tick.Stop()
			return fmt.Errorf("no successful probe within %v; last probe: %w", w.cfg.ServiceReadyTimeout, last)
		case <-tick.C():
		}
	}
}

// probeTimeout bounds one probe.
const probeTimeout = 2 * time.Second

// probeOnce runs one readiness probe of svc at addr (host:port).
func (w *Worker) probeOnce(ctx context.Context, addr string, svc serviceRun) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	switch {
	case svc.tcp:
		var dialer net.Dialer
		c, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("TCP connect %s: %w", addr, err)
		}
		return c.Close()
	case svc.httpPath != "":
		u := "http://" + addr + svc.httpPath
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return fmt.Errorf("GET %s: %w", u, err)
		}
		resp, err := w.probeClient.Do(req)
		if err != nil {
			return fmt.Errorf("GET %s: %w", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("GET %s: status %s, want 2xx", u, resp.Status)
		}
		return nil
	}
	return nil // no probe: ready once started
}
