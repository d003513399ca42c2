package consensus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// levelTrace is where hclog's Trace lands in slog: below Debug.
const levelTrace = slog.LevelDebug - 4

// hclogAdapter is an hclog.Logger that writes to a *slog.Logger, so that
// Raft, its transport and its snapshot store log through the head's logger.
// hclog's key/value arguments become slog attributes; its logger name
// becomes the attribute "logger".
type hclogAdapter struct {
	base    *slog.Logger // without name or implied args
	l       *slog.Logger // base with implied args and name
	name    string
	implied []any
	min     *atomic.Int32 // hclog.Level; shared by derived loggers, like hclog's
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHclog(l *slog.Logger) *hclogAdapter {
	min := new(atomic.Int32)
	min.Store(int32(hclog.Trace))
	return &hclogAdapter{base: l, l: l, min: min}
}

func toSlogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default: // Info, NoLevel
		return slog.LevelInfo
	}
}

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	if level == hclog.Off || level < hclog.Level(a.min.Load()) {
		return false
	}
	return a.l.Enabled(context.Background(), toSlogLevel(level))
}

// peerTrouble lists Raft's ERROR messages about one peer being unreachable
// (a peer restarting, crashed, or shutting down with the others) or having
// moved to a newer term (an election). A quorum
// system rides through them, so they are logged at WARN: an ERROR line
// would cry wolf on every clean stop of the whole cluster. A cluster that
// really lacks a quorum shows megaflow_raft_has_leader 0 and the NoLeader
// alert (deploy/prometheus/alerts.yml).
var peerTrouble = []string{"failed to appendEntries to", "failed to heartbeat to", "failed to make requestVote RPC",
	"failed to contact", "failed to pipeline appendEntries", "peer has newer term, stopping replication"}

// demote returns the level to log Raft's msg at: WARN for peerTrouble,
// DEBUG for a transport read or accept cut by our own shutdown (the node
// closes the listener and connections while Raft shuts down, before Raft
// closes its transport; an ERROR line on every clean stop of `megaflow
// up` confused a new user), INFO for a node's first election after it
// starts (Raft's WARN "heartbeat timeout reached, starting election" with
// no leader known yet: every start of a single-head `megaflow up` has it,
// and it alarmed a new user; with a last leader it is a lost leader and
// stays WARN), else level.
func demote(level hclog.Level, msg string, args []any) hclog.Level {
	if level == hclog.Warn && msg == "heartbeat timeout reached, starting election" {
		for i := 0; i+1 < len(args); i += 2 {
			if args[i] == "last-leader-addr" && fmt.Sprint(args[i+1]) == "" {
				return hclog.Info
			}
		}
		return level
	}
	if level != hclog.Error {
		return level
	}
	for _, p := range peerTrouble {
		if strings.HasPrefix(msg, p) {
			return hclog.Warn
		}
	}
	if msg == "failed to decode incoming command" || msg == "failed to accept connection" {
		for _, a := range args {
			if err, ok := a.(error); ok && (strings.Contains(err.Error(), "use of closed network connection") || errors.Is(err, errStreamClosed)) {
				return hclog.Debug
			}
		}
	}
	return level
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	level = demote(level, msg, args)
	if a.enabled(level) {
		a.l.Log(context.Background(), toSlogLevel(level), msg, formatArgs(args)...)
	}
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) derive(name string, implied []any) *hclogAdapter {
	l := a.base.With(implied...)
	if name != "" {
		l = l.With("logger", name)
	}
	return &hclogAdapter{base: a.base, l: l, name: name, implied: implied, min: a.min}
}

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	return a.derive(a.name, append(append([]any(nil), a.implied...), args...))
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.derive(name, a.implied)
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger { return a.derive(name, a.implied) }

func (a *hclogAdapter) SetLevel(level hclog.Level) { a.min.Store(int32(level)) }

func (a *hclogAdapter) GetLevel() hclog.Level { return hclog.Level(a.min.Load()) }

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	if opts == nil {
		opts = &hclog.StandardLoggerOptions{}
	}
	return &stdWriter{a: a, infer: opts.InferLevels, force: opts.ForceLevel}
}

// stdWriter turns log.Logger lines into adapter calls, reading "[LEVEL]"
// prefixes when asked to.
type stdWriter struct {
	a     *hclogAdapter
	infer bool
	force hclog.Level
}

func (w *stdWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	level := hclog.Info
	if w.force != hclog.NoLevel || w.infer {
		if strings.HasPrefix(line, "[") {
			if i := strings.IndexByte(line, ']'); i > 0 {
				switch line[1:i] {
				case "TRACE":
					level = hclog.Trace
				case "DEBUG":
					level = hclog.Debug
				case "WARN":
					level = hclog.Warn
				case "ERR", "ERROR":
					level = hclog.Error
				}
				line = strings.TrimSpace(line[i+1:])
			}
		}
		if w.force != hclog.NoLevel {
			level = w.force
		}
	}
	w.a.Log(level, line)
	return len(p), nil
}

// formatArgs returns args with each hclog.Format value (hclog.Fmt: a
// format and its operands, which hashicorp/raft logs its configuration
// with) formatted as hclog's own loggers do; args itself when it holds
// none.
func formatArgs(args []any) []any {
	var out []any
	for i, v := range args {
		f, ok := v.(hclog.Format)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		if len(f) > 0 {
			if format, ok := f[0].(string); ok {
				out[i] = fmt.Sprintf(format, f[1:]...)
				continue
			}
		}
		out[i] = fmt.Sprint([]any(f)...)
	}
	if out == nil {
		return args
	}
	return out
}
