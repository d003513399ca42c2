package acl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
)

func TestCheckRelayKey(t *testing.T) {
	key := bytes.Repeat([]byte{0xab}, RelayKeyBytes)
	other := bytes.Repeat([]byte{0xac}, RelayKeyBytes)
	good := RelayKeyValue(key)
	for _, tc := range []struct {
		name    string
		key     []byte
		require bool
		got     []string
		want    errs.Class // 0: served
		says    string
	}{
		{"ACLs off, no key: served as before", nil, false, nil, 0, ""},
		{"ACLs off, no key, a key presented: served", nil, false, []string{good}, 0, ""},
		{"ACLs on, no key yet", nil, true, []string{good}, errs.Unavailable, "not connected to a leader yet"},
		{"the right key", key, true, []string{good}, 0, ""},
		{"the right key, worker without a token", key, false, []string{good}, 0, ""},
		{"no key presented", key, true, nil, errs.Unauthenticated, "carries no relay key"},
		{"no key presented, worker without a token", key, false, nil, errs.Unauthenticated, "carries no relay key"},
		{"a wrong key", key, true, []string{RelayKeyValue(other)}, errs.Unauthenticated, "not this cluster's"},
		{"the key in upper case hex", key, true, []string{strings.ToUpper(good)}, 0, ""},
		{"a short key", key, true, []string{good[:62]}, errs.Unauthenticated, "64 hex digits"},
		{"not hex", key, true, []string{strings.Repeat("zz", 32)}, errs.Unauthenticated, "64 hex digits"},
		{"two keys", key, true, []string{good, good}, errs.Unauthenticated, "2 relay keys"},
		{"empty", key, true, []string{""}, errs.Unauthenticated, "64 hex digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRelayKey(tc.key, tc.require, tc.got)
			if tc.want == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if errs.ClassOf(err) != tc.want || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v (class %v); want class %v saying %q", err, errs.ClassOf(err), tc.want, tc.says)
			}
			if strings.Contains(err.Error(), good) {
				t.Fatalf("the error names the key: %v", err)
			}
		})
	}
}

func TestNewRelayKey(t *testing.T) {
	k, err := NewRelayKey(bytes.NewReader(bytes.Repeat([]byte{1}, 40)))
	if err != nil || len(k) != RelayKeyBytes {
		t.Fatalf("NewRelayKey: %x, %v", k, err)
	}
	if _, err := NewRelayKey(bytes.NewReader(make([]byte, 10))); errs.ClassOf(err) != errs.Internal {
		t.Fatalf("NewRelayKey from a short reader: %v; want Internal", err)
	}
}
