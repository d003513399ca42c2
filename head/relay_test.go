package head

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A worker that could not be reached for a sandbox call: the relayed error
// says whether the call may have run there. A refused connection means it
// was never sent (a new user was told "may or may not have run" then).
func TestRelayErrSaysWhetherTheCallWasSent(t *testing.T) {
	for _, c := range []struct {
		msg, want string
	}{
		{`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:7947: connect: connection refused"`,
			"the call did not reach it (no connection: nothing was sent)"},
		{"failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7947: Connection refused",
			"the call did not reach it (no connection: nothing was sent)"},
		{"error reading from server: EOF", "the call may or may not have run there"},
		{"connection reset by peer", "the call may or may not have run there"},
	} {
		err := relayErr("sbx-1", "w1", status.Error(codes.Unavailable, c.msg))
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), c.want) {
			t.Errorf("%q relayed as %v; want Unavailable saying %q", c.msg, err, c.want)
		}
	}
}
