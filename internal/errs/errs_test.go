package errs

import (
	"errors"
	"testing"
	"time"
)

// An error's class, reason, retry-after and leader survive the wire.
func TestStatusRoundTrip(t *testing.T) {
	for _, in := range []*Error{
		{Class: FailedPrecondition, Message: "sandbox closed", Reason: "SANDBOX_CLOSED"},
		{Class: NotFound, Message: "no such file"},
		{Class: ResourceExhausted, Message: "slow down", RetryAfter: time.Second, Reason: "RATE_LIMITED"},
		{Class: NotLeader, Message: "not leader", LeaderID: "h2", LeaderAddr: "h2:7070"},
	} {
		out := FromStatus(ToStatus(in))
		var e *Error
		if !errors.As(out, &e) || *e != *in {
			t.Errorf("%+v came back as %+v", in, out)
		}
		if ReasonOf(out) != in.Reason {
			t.Errorf("ReasonOf = %q; want %q", ReasonOf(out), in.Reason)
		}
	}
	if ReasonOf(errors.New("plain")) != "" {
		t.Error("a plain error has a reason")
	}
}
