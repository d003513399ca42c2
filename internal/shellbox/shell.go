package shellbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// signals maps the names trap accepts (with or without SIG, or the
// number) to signal numbers.
var signals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "USR1": 10, "USR2": 12, "TERM": 15,
}

// traps are the actions set by `trap ACTION SIG` for signals; EXIT and
// ERR stay with the interpreter. Written from the runner's goroutine,
// read from runShell's.
type traps struct {
	mu     sync.Mutex
	action map[int]string // signal number -> action; "" ignores the signal
}

func (t *traps) get(n int) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.action[n]
	return a, ok
}

// callHandler takes the signals out of a trap call and records them; the
// interpreter's trap sees only EXIT and ERR.
func (t *traps) callHandler(_ context.Context, args []string) ([]string, error) {
	if args[0] != "trap" || len(args) < 3 || strings.HasPrefix(args[1], "-") && args[1] != "-" {
		return args, nil
	}
	action, rest := args[1], []string{"trap", args[1]}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range args[2:] {
		n, ok := signalOf(s)
		if !ok {
			rest = append(rest, s)
			continue
		}
		if action == "-" {
			delete(t.action, n)
		} else {
			t.action[n] = action
		}
	}
	if len(rest) == 2 {
		return []string{"true"}, nil
	}
	return rest, nil
}

// signalOf returns the number of a signal named as trap names it: TERM,
// SIGTERM or 15.
func signalOf(s string) (int, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		for _, v := range signals {
			if v == n {
				return n, true
			}
		}
		return 0, false
	}
	n, ok := signals[strings.TrimPrefix(strings.ToUpper(s), "SIG")]
	return n, ok
}

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 15
}

// runShell is sh: sh [-eux] [-c SCRIPT [NAME [ARG...]] | FILE [ARG...]];
// without -c or FILE it reads the script from stdin.
func runShell(ctx context.Context, args []string, dir string, stdio IO, sig <-chan os.Signal) int {
	var opts []string
	var script io.Reader
	name := "sh"
	for len(args) > 0 && len(args[0]) > 1 && (args[0][0] == '-' || args[0][0] == '+') {
		a := args[0]
		args = args[1:]
		if a == "--" {
			break
		}
		if a == "-c" {
			if len(args) == 0 {
				fmt.Fprintln(stdio.Stderr, "sh: -c: option requires an argument")
				return 2
			}
			script, args = strings.NewReader(args[0]), args[1:]
			if len(args) > 0 { // $0, which this shell does not keep
				args = args[1:]
			}
			break
		}
		for _, c := range a[1:] {
			if !strings.ContainsRune("eufxn", c) {
				fmt.Fprintf(stdio.Stderr, "sh: %s: invalid option (this sh knows -c -e -u -f -x -n)\n", a)
				return 2
			}
			opts = append(opts, string(a[0])+string(c))
		}
	}
	if script == nil {
		if len(args) == 0 {
			script = stdio.Stdin
		} else {
			f, err := os.Open(abs(dir, args[0]))
			if err != nil {
				fmt.Fprintf(stdio.Stderr, "sh: %v\n", err)
				return 127
			}
			defer f.Close()
			script, name, args = f, args[0], args[1:]
		}
	}
	prog, err := syntax.NewParser().Parse(script, name)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "sh: %v\n", err)
		return 2
	}
	tr := &traps{action: map[int]string{}}
	r, err := interp.New(
		interp.StdIO(stdio.Stdin, stdio.Stdout, stdio.Stderr),
		interp.Dir(dir),
		interp.Params(append(opts, append([]string{"--"}, args...)...)...),
		interp.CallHandler(tr.callHandler),
		interp.ExecHandlers(toolHandler),
	)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "sh: %v\n", err)
		return 2
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx, prog) }() // owned: runShell waits for done on every path
	for {
		select {
		case err := <-done:
			return status(stdio.Stderr, err)
		case s := <-sig:
			n := signalNumber(s)
			action, trapped := tr.get(n)
			if trapped && action == "" {
				continue // trap "" SIG: ignored
			}
			cancel()
			<-done
			if !trapped {
				return 128 + n
			}
			p, err := syntax.NewParser().Parse(strings.NewReader(action), "trap")
			if err != nil {
				fmt.Fprintf(stdio.Stderr, "sh: trap: %v\n", err)
				return 2
			}
			return status(stdio.Stderr, r.Run(context.WithoutCancel(ctx), p))
		}
	}
}

// status turns the interpreter's result into an exit status.
func status(stderr io.Writer, err error) int {
	var es interp.ExitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &es):
		return int(es)
	case errors.Is(err, context.Canceled):
		return 130
	}
	fmt.Fprintf(stderr, "sh: %v\n", err)
	return 1
}

// toolHandler runs the tools in-process and hands every other program to
// the interpreter's default (a fork and exec along PATH).
func toolHandler(next interp.ExecHandlerFunc) interp.ExecHandlerFunc {
	return func(ctx context.Context, args []string) error {
		tool, ok := tools[args[0]]
		if !ok {
			return next(ctx, args)
		}
		hc := interp.HandlerCtx(ctx)
		code := tool(&env{ctx: ctx, dir: hc.Dir, stdin: hc.Stdin, stdout: hc.Stdout, stderr: hc.Stderr}, args[1:])
		if code != 0 {
			return interp.ExitStatus(code)
		}
		return nil
	}
}
