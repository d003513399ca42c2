package harness

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/megaflow/megaflow/internal/chaos/netns"
)

// proc is a head or worker process the harness owns, run inside its
// host's namespace. Its methods are called from the harness's goroutines
// one at a time (the injector, then the finish); mu guards cmd and done.
type proc struct {
	name, log string
	host      netns.Host
	net       *netns.Net
	bin       string
	args      []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	frozen bool
}

// start starts the process (again), appending to its log.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("start %s: already running", p.name)
		}
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== chaos: start %s at %s\n", p.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := p.net.Command(p.host, p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.frozen = cmd, done, false
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	return nil
}

// running reports whether the process runs (frozen counts).
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) signal(s syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(s)
	}
}

func (p *proc) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// kill9 sends SIGKILL and waits (10 s at most) for the process to end.
func (p *proc) kill9() {
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// freeze sends SIGSTOP; thaw sends SIGCONT.
func (p *proc) freeze() {
	p.signal(syscall.SIGSTOP)
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *proc) thaw() {
	p.signal(syscall.SIGCONT)
	p.mu.Lock()
	p.frozen = false
	p.mu.Unlock()
}

// stop thaws the process, sends SIGTERM and waits up to grace; then it
// sends SIGQUIT (a Go program writes every goroutine's stack to its log:
// why it hung) and, 3 s later, SIGKILL. It reports whether the process
// ended by itself after SIGTERM.
func (p *proc) stop(grace time.Duration) bool {
	if !p.running() {
		return true
	}
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	if p.wait(grace) {
		return true
	}
	p.signal(syscall.SIGQUIT)
	p.wait(3 * time.Second)
	p.kill9()
	return false
}
