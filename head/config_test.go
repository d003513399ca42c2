package head_test

import (
	"strings"
	"testing"

	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/tlsconfig/tlstest"
)

// A head refuses to start with another head's certificate, and takes its
// own or one made before certificates named their node.
func TestConfigValidateTLSNode(t *testing.T) {
	set := tlstest.New(t, t.TempDir())
	old, err := tlsconfig.Load(set.IssueWithoutNode(t, tlsconfig.RoleHead, "old"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		tls   *tlsconfig.Store
		error string // "": valid
	}{
		{"its own", set.Store(t, tlsconfig.RoleHead, "h1"), ""},
		{"made before node ids", old, ""},
		{"another head's", set.Store(t, tlsconfig.RoleHead, "h2"), "--tls-cert: certificate \"h2\" is head h2's (h2.head.megaflow), not head h1's"},
		{"a worker's", set.Store(t, tlsconfig.RoleWorker, "w1"), "a head needs a head certificate (megaflow tls cert create --head --node-id h1)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := head.DefaultConfig()
			cfg.NodeID, cfg.DataDir = "h1", t.TempDir()
			cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
			cfg.TLS = tc.tls
			err := cfg.Validate()
			if tc.error == "" {
				if err != nil {
					t.Fatalf("Validate = %v; want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Fatalf("Validate = %v; want an error containing %q", err, tc.error)
			}
		})
	}
}

// The retention settings: 0 keeps (valid), a negative retention or a
// sweep interval out of 10ms to 1h is refused, naming the fields.
func TestConfigValidateRetention(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*head.Config)
		error string // "": valid
	}{
		{"defaults", func(*head.Config) {}, ""},
		{"keep forever", func(c *head.Config) { c.GraphRetention, c.ArchiveRetention = 0, 0 }, ""},
		{"negative graph retention", func(c *head.Config) { c.GraphRetention = -1 }, "GraphRetention -1ns and ArchiveRetention"},
		{"negative archive retention", func(c *head.Config) { c.ArchiveRetention = -1 }, "ArchiveRetention -1ns must not be negative"},
		{"no sweep interval", func(c *head.Config) { c.ArchiveSweepInterval = 0 }, "ArchiveSweepInterval 0s must be 10ms to 1h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := head.DefaultConfig()
			cfg.NodeID, cfg.DataDir = "h1", t.TempDir()
			cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
			tc.edit(&cfg)
			err := cfg.Validate()
			if tc.error == "" {
				if err != nil {
					t.Fatalf("Validate = %v; want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Fatalf("Validate = %v; want an error containing %q", err, tc.error)
			}
		})
	}
}
