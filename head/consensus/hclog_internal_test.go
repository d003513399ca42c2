package consensus

import (
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft's complaints about one peer are WARN; a read cut by our own
// shutdown is DEBUG; other errors stay errors.
func TestDemote(t *testing.T) {
	closed := errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: use of closed network connection")
	for _, tc := range []struct {
		level hclog.Level
		msg   string
		args  []any
		want  hclog.Level
	}{
		{hclog.Error, "failed to appendEntries to", []any{"peer", "h2", "error", errors.New("EOF")}, hclog.Warn},
		{hclog.Error, "failed to heartbeat to", nil, hclog.Warn},
		{hclog.Error, "peer has newer term, stopping replication", nil, hclog.Warn},
		{hclog.Error, "failed to decode incoming command", []any{"error", closed}, hclog.Debug},
		{hclog.Error, "failed to decode incoming command", []any{"error", errors.New("unexpected EOF")}, hclog.Error},
		{hclog.Error, "failed to accept connection", []any{"error", errors.New("accept tcp 127.0.0.1:7000: use of closed network connection")}, hclog.Debug},
		{hclog.Error, "failed to accept connection", []any{"error", errStreamClosed}, hclog.Debug},
		{hclog.Error, "failed to accept connection", []any{"error", errors.New("accept tcp: too many open files")}, hclog.Error},
		{hclog.Error, "failed to take snapshot", nil, hclog.Error},
		{hclog.Info, "failed to appendEntries to", nil, hclog.Info},
		// A node's first election after its start: no leader known yet.
		{hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID("")}, hclog.Info},
		// A lost leader stays a warning.
		{hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress("127.0.0.1:7001"), "last-leader-id", raft.ServerID("h2")}, hclog.Warn},
		{hclog.Warn, "heartbeat timeout reached, starting election", nil, hclog.Warn},
	} {
		if got := demote(tc.level, tc.msg, tc.args); got != tc.want {
			t.Errorf("demote(%v, %q) = %v, want %v", tc.level, tc.msg, got, tc.want)
		}
	}
}

// hclog.Fmt values are formatted, as hclog's own loggers do; raft logs its
// configuration with one, which printed as "[%+v [...]]" before.
func TestFormatArgs(t *testing.T) {
	args := []any{"index", 0, "servers", hclog.Fmt("%+v", []string{"h1", "h2"}), "odd", hclog.Format{42}}
	got := formatArgs(args)
	if got[3] != "[h1 h2]" || got[5] != "42" || got[1] != 0 {
		t.Errorf("formatArgs = %#v", got)
	}
	if _, ok := args[3].(hclog.Format); !ok {
		t.Error("formatArgs changed its argument")
	}
	plain := []any{"a", 1}
	if out := formatArgs(plain); &out[0] != &plain[0] {
		t.Error("formatArgs copied args without a Format in them")
	}
}
