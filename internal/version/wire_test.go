package version

import (
	"strings"
	"testing"
)

func TestCheckWorkerWire(t *testing.T) {
	for _, tc := range []struct {
		v    uint32
		want string // "" accepted
	}{
		{0, ""}, // before protocol versions: protocol 1
		{WireOldest, ""},
		{WireCurrent, ""},
		{WireCurrent + 1, "upgrade the heads first"},
	} {
		err := CheckWorkerWire(tc.v, "h1", "w1")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("protocol %d refused: %v", tc.v, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "worker w1") || !strings.Contains(err.Error(), "head h1")):
			t.Errorf("protocol %d: %v; want a refusal naming w1 and h1 saying %q", tc.v, err, tc.want)
		}
	}
}
