package consensus

import (
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"
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
		{hclog.Error, "failed to take snapshot", nil, hclog.Error},
		{hclog.Info, "failed to appendEntries to", nil, hclog.Info},
	} {
		if got := demote(tc.level, tc.msg, tc.args); got != tc.want {
			t.Errorf("demote(%v, %q) = %v, want %v", tc.level, tc.msg, got, tc.want)
		}
	}
}
