package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

// wrap turns an error of the Docker client into one of the contract's
// classes, with op and the object it concerned in the message. parent is
// the caller's context: when it ended, its error is returned (wrapped), so a
// caller who cancelled sees context.Canceled, not ErrUnavailable; when only
// the per-call deadline expired, the engine did not answer in time and the
// error is ErrUnavailable. notFound is the class a 404 means for this call
// (ErrNotFound, or nil for none). Conflicts are classified by the caller:
// only a create's conflict is a name in use.
func (r *Runtime) wrap(parent context.Context, op, what string, err error, notFound error) error {
	if err == nil {
		return nil
	}
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("docker %s %s: %w", op, what, perr)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("docker %s %s: %w: the engine at %s did not answer within %v",
			op, what, contract.ErrUnavailable, r.cli.DaemonHost(), r.cfg.CallTimeout)
	case client.IsErrConnectionFailed(err), isTransport(err):
		return fmt.Errorf("docker %s %s: %w: %v", op, what, contract.ErrUnavailable, err)
	case cerrdefs.IsNotFound(err) && notFound != nil:
		return fmt.Errorf("docker %s %s: %w: %v", op, what, notFound, err)
	case cerrdefs.IsUnavailable(err):
		return fmt.Errorf("docker %s %s: %w: %v", op, what, contract.ErrUnavailable, err)
	}
	return fmt.Errorf("docker %s %s: %w", op, what, err)
}

// isTransport reports whether err is the connection to the engine failing
// (the daemon restarted mid-request, say) rather than an answer.
func isTransport(err error) bool {
	var ne net.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &ne)
}
