// Package fake is an in-memory contract.Runtime (with the Execer and
// Logger extras) for the tests of the layers above the runtimes: the
// worker's attempt life cycle, the persistent pool, reconciliation, and
// the in-process test cluster. Nothing runs: a "container" is a record and
// a goroutine that ends it after its Behavior's Duration, measured on a
// clock.Clock the test may drive by hand (a clock.Fake).
//
// What a container does is chosen per Spec by the first matching rule
// (On, OnCommand), else the default (Default; at first: exit 0 at once).
// A Behavior can take a while, exit non-zero, end OOM-killed, hang until
// stopped, ignore SIGTERM (so Stop waits its grace), write output to the
// log file, or make Start fail. Fail and SetDown inject backend errors;
// Calls records every call for assertions.
//
// Like the real runtimes: names are unique until Remove (ErrConflict),
// unknown ids are ErrNotFound, Stop answers 143 (or 137 after the grace
// when SIGTERM is ignored), List matches labels, Remove of a running
// container kills it. Tests import this package, and so does the benchmark
// harness (cmd/megaflow-bench), whose simulated instances are fake
// containers with a modelled start-up time (StartDelay) and duration
// (OnFunc).
package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/runtime/contract"
)

var (
	_ contract.Runtime = (*Runtime)(nil)
	_ contract.Execer  = (*Runtime)(nil)
	_ contract.Logger  = (*Runtime)(nil)
)

// Behavior is what a fake container (or exec) does.
type Behavior struct {
	// Duration is how long it runs before exiting, on the Runtime's Clock.
	Duration time.Duration
	// ExitCode is its exit status when it ends by itself.
	ExitCode int
	// OOM makes it end OOM-killed (code 137) after Duration.
	OOM bool
	// Hang makes it run until stopped, removed or (an exec) cancelled.
	Hang bool
	// IgnoreTerm makes Stop wait the whole grace, then kill (137).
	IgnoreTerm bool
	// Output is appended to Spec.LogPath at start (created then, with
	// its missing directories; no Output: no file) and returned by Logs.
	Output string
	// StartErr makes Start (or Exec) fail with it and create nothing; use
	// contract.ErrImageNotFound and friends to fake the real classes.
	StartErr error
	// Lost makes it end after Duration as one the runtime lost
	// (contract.Exit.Lost, code -1).
	Lost bool
	// StartDelay is how long Start (or Exec) takes, on the Clock, before
	// the container (or exec) runs: an image pull and container creation,
	// or an exec's set-up. Duration counts from the end of it. When ctx
	// ends first, Start fails with ctx's error and creates nothing.
	StartDelay time.Duration
}

// Call is one recorded call to the Runtime.
type Call struct {
	// Op is the method: "Start", "Wait", "Stop", "Remove", "List",
	// "Exec" or "Logs".
	Op string
	// ID is the container the call named (Start: the id it returned).
	ID string
	// Spec is Start's or Exec's spec.
	Spec contract.Spec
	// Grace is Stop's grace.
	Grace time.Duration
	// Match is List's label filter.
	Match map[string]string
	// At is the Clock's time when the call began.
	At time.Time
	// Err is what the call returned.
	Err error
}

type rule struct {
	match func(contract.Spec) bool
	b     Behavior
	fn    func(contract.Spec) (Behavior, bool) // when set, replaces match and b
}

// Runtime is the fake. Create it with New; safe for concurrent use.
type Runtime struct {
	clock clock.Clock

	mu       sync.Mutex
	rules    []rule
	def      Behavior
	down     bool
	failures map[string][]error
	calls    []Call
	seq      int
	ctrs     map[string]*ctr // by id, until Remove
	images   []string        // what Images returns, sorted
}

// ctr is one fake container.
type ctr struct {
	id     string
	name   string
	labels map[string]string
	b      Behavior
	output string

	started time.Time
	kill    chan int      // receives the code of a stop or a kill
	done    chan struct{} // closed once exit is set
	exit    contract.Exit
	files   map[string]fakeFile // WriteFile's, guarded by Runtime.mu
	paused  bool                // Pause's, guarded by Runtime.mu
	created bool                // LeaveCreated's: never started
}

// New returns an empty fake on clk; nil means the wall clock (use small
// Durations then). With a clock.Fake, every container that does not hang,
// every timed Exec, every StartDelay and every Stop waiting out a grace
// holds one of its Waiters until the fake passes its deadline (a container
// stopped early included): a test waits for them before it advances.
func New(clk clock.Clock) *Runtime {
	if clk == nil {
		clk = clock.Real()
	}
	return &Runtime{clock: clk, failures: map[string][]error{}, ctrs: map[string]*ctr{}}
}

// Default sets the behavior of specs no rule matches.
func (r *Runtime) Default(b Behavior) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.def = b
}

// On adds a rule: specs for which match is true get b. Rules are tried in
// the order they were added.
func (r *Runtime) On(match func(contract.Spec) bool, b Behavior) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rules = append(r.rules, rule{match: match, b: b})
}

// OnFunc adds a rule whose Behavior is computed per spec: specs for which
// fn returns true get the Behavior it returns. fn is called once per Start
// and per Exec, with the Runtime's lock held: it must not call the Runtime.
// Simulations (bench's instance model) use it to give each container a
// duration and start-up time that depend on what else runs.
func (r *Runtime) OnFunc(fn func(contract.Spec) (Behavior, bool)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rules = append(r.rules, rule{fn: fn})
}

// OnCommand adds a rule for specs whose Command[0] is program.
func (r *Runtime) OnCommand(program string, b Behavior) {
	r.On(func(s contract.Spec) bool { return len(s.Command) > 0 && s.Command[0] == program }, b)
}

// Fail makes the next call of op ("Start", "Wait", ...) return err
// instead of doing anything; several Fails of one op queue up.
func (r *Runtime) Fail(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures[op] = append(r.failures[op], err)
}

// SetDown makes every call fail with contract.ErrUnavailable (down) or
// work again; containers keep running meanwhile, as they would under a
// restarting Docker daemon.
func (r *Runtime) SetDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
}

// Calls returns a copy of the calls made so far, in order.
func (r *Runtime) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// CallCount returns how many calls of op were made.
func (r *Runtime) CallCount(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.Op == op {
			n++
		}
	}
	return n
}

// Running returns how many containers run now.
func (r *Runtime) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.ctrs {
		select {
		case <-c.done:
		default:
			n++
		}
	}
	return n
}

var _ contract.ImageLister = (*Runtime)(nil)

// SetImages sets the images the fake holds (what Images returns); tests
// call it to fake an engine that pulled or removed images.
func (r *Runtime) SetImages(images ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.images = slices.Compact(slices.Sorted(slices.Values(images)))
}

// Images returns the images SetImages set, sorted. It is not recorded in
// Calls (the worker polls it). Errors: contract.ErrUnavailable while down.
func (r *Runtime) Images(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return nil, fmt.Errorf("fake images: %w", contract.ErrUnavailable)
	}
	return slices.Clone(r.images), nil
}

// Name returns "fake".
func (r *Runtime) Name() string { return "fake" }

// begin records a call and returns the injected error for it, if any.
// Callers hold no lock.
func (r *Runtime) begin(c Call) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.At = r.clock.Now()
	r.calls = append(r.calls, c)
	i := len(r.calls) - 1
	if r.down {
		return i, fmt.Errorf("fake %s: %w: the fake is down", c.Op, contract.ErrUnavailable)
	}
	if q := r.failures[c.Op]; len(q) > 0 {
		r.failures[c.Op] = q[1:]
		return i, q[0]
	}
	return i, nil
}

// end stores what call i returned.
func (r *Runtime) end(i int, id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[i].Err = err
	if id != "" {
		r.calls[i].ID = id
	}
}

func (r *Runtime) behavior(s contract.Spec) Behavior {
	for _, ru := range r.rules {
		if ru.fn != nil {
			if b, ok := ru.fn(s); ok {
				return b
			}
			continue
		}
		if ru.match(s) {
			return ru.b
		}
	}
	return r.def
}

// Start creates a fake container for spec and starts its clock. Errors: an
// injected one, the Behavior's StartErr, contract.ErrConflict.
func (r *Runtime) Start(ctx context.Context, spec contract.Spec) (id string, err error) {
	i, err := r.begin(Call{Op: "Start", Spec: spec})
	defer func() { r.end(i, id, err) }()
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("fake start %s: %w", spec.Name, err)
	}
	r.mu.Lock()
	b := r.behavior(spec)
	if b.StartErr != nil {
		r.mu.Unlock()
		return "", fmt.Errorf("fake start %s: %w", spec.Name, b.StartErr)
	}
	if b.StartDelay > 0 {
		r.mu.Unlock()
		if err := r.delay(ctx, b.StartDelay); err != nil {
			return "", fmt.Errorf("fake start %s: %w", spec.Name, err)
		}
		r.mu.Lock()
	}
	if spec.Name != "" {
		for _, c := range r.ctrs {
			if c.name == spec.Name {
				r.mu.Unlock()
				return "", fmt.Errorf("fake start %s: %w", spec.Name, contract.ErrConflict)
			}
		}
	}
	r.seq++
	c := &ctr{
		id: fmt.Sprintf("fake-%06d", r.seq), name: spec.Name, labels: maps.Clone(spec.Labels), b: b,
		output: b.Output, started: r.clock.Now(), kill: make(chan int, 1), done: make(chan struct{}),
	}
	r.ctrs[c.id] = c
	var timer <-chan time.Time
	if !b.Hang {
		timer = r.clock.After(b.Duration) // before Start returns, so a clock.Fake counts it
	}
	r.mu.Unlock()

	if err := appendLog(spec.LogPath, b.Output); err != nil {
		return "", fmt.Errorf("fake start %s: log file: %w", spec.Name, err)
	}
	go r.run(c, timer)
	return c.id, nil
}

// LeaveCreated adds a container that was created but never started, as a
// worker killed between Docker's create and start leaves one: List reports
// it NeverStarted, and Wait and Inspect answer what the engine answers for
// it, exit code 0 (with no start time). It returns its id.
func (r *Runtime) LeaveCreated(spec contract.Spec) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	c := &ctr{id: fmt.Sprintf("fake-%06d", r.seq), name: spec.Name, labels: maps.Clone(spec.Labels),
		kill: make(chan int, 1), done: make(chan struct{}), created: true}
	close(c.done)
	r.ctrs[c.id] = c
	return c.id
}

// delay waits d on the Clock, or until ctx ends (its error).
func (r *Runtime) delay(ctx context.Context, d time.Duration) error {
	select {
	case <-r.clock.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run ends c when its time is up or it is killed.
func (r *Runtime) run(c *ctr, timer <-chan time.Time) {
	exit := contract.Exit{StartedAt: c.started}
	select {
	case <-timer:
		exit.Code = c.b.ExitCode
		if c.b.OOM {
			exit.Code, exit.OOMKilled, exit.Reason = 137, true, "OOM killed"
		}
		if c.b.Lost {
			exit.Code, exit.Lost, exit.Reason = -1, true, "lost by the runtime (fake)"
		}
		// Its own end, not a Stop's or a kill's (which come through kill).
		exit.ExitedFirst = !c.b.Lost
	case code := <-c.kill:
		exit.Code = code
	}
	exit.FinishedAt = r.clock.Now()
	c.exit = exit
	close(c.done)
}

// signal asks c to end with code; the first signal wins.
func (c *ctr) signal(code int) {
	select {
	case c.kill <- code:
	default:
	}
}

func (r *Runtime) get(op, id string) (*ctr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.ctrs[id]
	if c == nil {
		return nil, fmt.Errorf("fake %s %s: %w", op, id, contract.ErrNotFound)
	}
	return c, nil
}

// Wait blocks until container id ends. Errors: an injected one,
// contract.ErrNotFound, ctx's error.
func (r *Runtime) Wait(ctx context.Context, id string) (exit contract.Exit, err error) {
	i, err := r.begin(Call{Op: "Wait", ID: id})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return contract.Exit{Code: -1}, err
	}
	c, err := r.get("wait", id)
	if err != nil {
		return contract.Exit{Code: -1}, err
	}
	select {
	case <-c.done:
		return c.exit, nil
	case <-ctx.Done():
		return contract.Exit{Code: -1}, fmt.Errorf("fake wait %s: %w", id, ctx.Err())
	}
}

// Stop ends container id: at once with 143, or, when its Behavior ignores
// SIGTERM, with 137 after grace on the Clock. Errors: an injected one,
// contract.ErrNotFound, ctx's error.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) (err error) {
	i, err := r.begin(Call{Op: "Stop", ID: id, Grace: grace})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return err
	}
	c, err := r.get("stop", id)
	if err != nil {
		return err
	}
	select {
	case <-c.done:
		return nil
	default:
	}
	if !c.b.IgnoreTerm {
		c.signal(143)
	} else {
		select {
		case <-c.done:
			return nil
		case <-r.clock.After(grace):
			c.signal(137)
		case <-ctx.Done():
			c.signal(137)
		}
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fake stop %s: %w", id, ctx.Err())
	}
}

// Remove kills container id if it runs and forgets it; unknown ids are no
// error. Errors: an injected one.
func (r *Runtime) Remove(ctx context.Context, id string) (err error) {
	i, err := r.begin(Call{Op: "Remove", ID: id})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return err
	}
	r.mu.Lock()
	c := r.ctrs[id]
	delete(r.ctrs, id)
	r.mu.Unlock()
	if c != nil {
		c.signal(137)
		<-c.done // prompt: run is waiting on kill
	}
	return nil
}

// List returns the containers not removed whose labels include match,
// sorted by id. Errors: an injected one.
func (r *Runtime) List(ctx context.Context, match map[string]string) (out []contract.Container, err error) {
	i, err := r.begin(Call{Op: "List", Match: maps.Clone(match)})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.ctrs {
		if !contract.MatchLabels(c.labels, match) {
			continue
		}
		k := contract.Container{ID: c.id, Name: c.name, Labels: maps.Clone(c.labels), Running: true, Paused: c.paused}
		if c.created {
			k.Running, k.NeverStarted = false, true
			out = append(out, k)
			continue
		}
		select {
		case <-c.done:
			exit := c.exit
			k.Running, k.Exit = false, &exit
		default:
		}
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Exec runs a fake command in running container id: it appends its
// Behavior's Output to spec.LogPath and ends after Duration with its
// ExitCode, or with 137 and ctx's error when ctx ends first (Hang: only
// then), or with 137 when the container ends. Errors: an injected one,
// the Behavior's StartErr, contract.ErrNotFound, a stopped container.
func (r *Runtime) Exec(ctx context.Context, id string, spec contract.Spec) (exit contract.Exit, err error) {
	i, err := r.begin(Call{Op: "Exec", ID: id, Spec: spec})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return contract.Exit{Code: -1}, err
	}
	c, err := r.get("exec in", id)
	if err != nil {
		return contract.Exit{Code: -1}, err
	}
	select {
	case <-c.done:
		return contract.Exit{Code: -1}, fmt.Errorf("fake exec in %s: the container is not running", id)
	default:
	}
	r.mu.Lock()
	b := r.behavior(spec)
	r.mu.Unlock()
	if b.StartErr != nil {
		return contract.Exit{Code: -1}, fmt.Errorf("fake exec in %s: %w", id, b.StartErr)
	}
	if b.StartDelay > 0 {
		if err := r.delay(ctx, b.StartDelay); err != nil {
			return contract.Exit{Code: -1}, fmt.Errorf("fake exec in %s: %w", id, err)
		}
	}
	var timer <-chan time.Time
	if !b.Hang {
		timer = r.clock.After(b.Duration)
	}
	if err := appendLog(spec.LogPath, b.Output); err != nil {
		return contract.Exit{Code: -1}, fmt.Errorf("fake exec in %s: log file: %w", id, err)
	}
	exit = contract.Exit{StartedAt: r.clock.Now()}
	select {
	case <-timer:
		exit.Code = b.ExitCode
		if b.OOM {
			exit.Code, exit.OOMKilled = 137, true
		}
	case <-c.done:
		exit.Code, exit.Reason = 137, "the container ended"
	case <-ctx.Done():
		exit.Code, exit.Reason = 137, "killed: "+ctx.Err().Error()
		err = fmt.Errorf("fake exec in %s: %w", id, ctx.Err())
	}
	exit.FinishedAt = r.clock.Now()
	return exit, err
}

// Logs returns container id's Output; with follow the reader ends only
// when the container ends (or ctx does). Errors: an injected one,
// contract.ErrNotFound.
func (r *Runtime) Logs(ctx context.Context, id string, follow bool) (rc io.ReadCloser, err error) {
	i, err := r.begin(Call{Op: "Logs", ID: id})
	defer func() { r.end(i, "", err) }()
	if err != nil {
		return nil, err
	}
	c, err := r.get("logs", id)
	if err != nil {
		return nil, err
	}
	if !follow {
		return io.NopCloser(strings.NewReader(c.output)), nil
	}
	pr, pw := io.Pipe()
	go func() {
		if _, err := io.WriteString(pw, c.output); err != nil {
			return
		}
		select {
		case <-c.done:
			pw.Close()
		case <-ctx.Done():
			pw.CloseWithError(ctx.Err())
		}
	}()
	return pr, nil
}

func appendLog(path, s string) error {
	if path == "" || s == "" {
		return nil // no output: no file (contract.Spec.LogPath)
	}
	f, err := contract.OpenLog(path)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(s)
	return errors.Join(werr, f.Close())
}
