package testcluster

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// failLogLines bounds the lines a failLog keeps: about four clusters'
// worth of a 30 s test's info lines, and memberlist's verdicts.
const failLogLines = 400

// failLog keeps the last failLogLines lines a test cluster's daemons log
// at info level or above, and memberlist's own INFO, WARN and ERR lines
// (which internal/gossip logs at debug, with the level as ml_level: its
// suspicions and failure verdicts), and prints them when the test has
// failed. So a failure in CI shows what the cluster did around it without
// MEGAFLOW_TEST_LOG=1, whose full debug log is far too long to print.
type failLog struct {
	mu    sync.Mutex
	lines []string // a ring once full; next is the oldest
	next  int
}

// Write keeps one formatted line (slog's TextHandler writes a record per
// call).
func (f *failLog) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.lines) < failLogLines {
		f.lines = append(f.lines, line)
	} else {
		f.lines[f.next] = line
		f.next = (f.next + 1) % failLogLines
	}
	return len(p), nil
}

// print logs the kept lines to t, oldest first, when t has failed.
func (f *failLog) print(t testing.TB) {
	if !t.Failed() {
		return
	}
	f.mu.Lock()
	lines := append(append([]string(nil), f.lines[f.next:]...), f.lines[:f.next]...)
	f.mu.Unlock()
	t.Logf("the test cluster's last %d lines at info level and above (MEGAFLOW_TEST_LOG=1 prints all of them):\n%s",
		len(lines), strings.Join(lines, "\n"))
}

// handler returns a slog.Handler that formats the records failLog keeps
// into it.
func (f *failLog) handler() slog.Handler {
	return failLogHandler{inner: slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})}
}

// failLogHandler passes on the records failLog keeps. It sees every
// level: memberlist's verdicts come at debug.
type failLogHandler struct{ inner slog.Handler }

func (h failLogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h failLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo && !memberlistVerdict(r) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h failLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return failLogHandler{inner: h.inner.WithAttrs(as)}
}

func (h failLogHandler) WithGroup(name string) slog.Handler {
	return failLogHandler{inner: h.inner.WithGroup(name)}
}

// memberlistVerdict reports whether r is one of memberlist's lines above
// its DEBUG level (internal/gossip's ml_level attribute).
func memberlistVerdict(r slog.Record) bool {
	keep := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "ml_level" {
			return true
		}
		switch a.Value.String() {
		case "INFO", "WARN", "ERR":
			keep = true
		}
		return false
	})
	return keep
}
