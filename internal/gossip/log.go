package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
)

// newStdLogger returns a *log.Logger for memberlist whose lines go to l at
// debug level. memberlist prefixes its lines with "[LEVEL] memberlist: "; the
// level is kept as the attribute ml_level and the prefix removed, so
// memberlist's routine "[ERR] Failed fallback ping" chatter about a member
// that just died does not reach an operator's warning log. The head and
// worker report membership changes themselves, at info level.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

// Write is called by log.Logger with exactly one line per call.
func (w slogWriter) Write(p []byte) (int, error) {
	if !w.l.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	line := string(bytes.TrimRight(p, "\n"))
	level := ""
	if strings.HasPrefix(line, "[") {
		if i := strings.IndexByte(line, ']'); i > 0 {
			level, line = line[1:i], strings.TrimSpace(line[i+1:])
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	w.l.Debug(line, "ml_level", level)
	return len(p), nil
}
