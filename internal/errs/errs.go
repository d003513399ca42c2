// Package errs is MegaFlow's one catalog of error classes and the one table
// that maps them to gRPC status codes and back. Heads wrap every error that
// crosses the wire with ToStatus; the client library turns statuses back into
// *Error with FromStatus, so callers test classes with errors.Is, never by
// matching strings. Any package may import it.
package errs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Class is the kind of an error, independent of its message.
type Class uint8

// The classes. Keep them few: each maps to exactly one gRPC code.
const (
	// Unknown is any error without a class.
	Unknown Class = iota
	// InvalidArgument: the request is malformed; retrying it cannot help.
	InvalidArgument
	// NotFound: the named graph, task or head does not exist.
	NotFound
	// AlreadyExists: the id is taken by something different.
	AlreadyExists
	// FailedPrecondition: the request is valid but the state forbids it now.
	FailedPrecondition
	// Unavailable: try again, possibly at another head.
	Unavailable
	// NotLeader: this head is not the leader; Error.LeaderAddr says who is.
	NotLeader
	// ResourceExhausted: a rate limit or quota; Error.RetryAfter says when.
	ResourceExhausted
	// OutOfRange: a Watch cursor older than the retained history.
	OutOfRange
	// Internal: a bug or a broken invariant.
	Internal
	// PermissionDenied: the caller is known but may not do this (its
	// certificate's role does not allow the call); retrying cannot help.
	PermissionDenied
	// Unauthenticated: the call came without a valid credential (no API
	// token, an unknown or an expired one, on a cluster with ACLs on).
	Unauthenticated
)

var classNames = [...]string{"unknown", "invalid argument", "not found", "already exists",
	"failed precondition", "unavailable", "not leader", "resource exhausted", "out of range", "internal", "permission denied", "unauthenticated"}

// String names the class in lower case, e.g. "invalid argument".
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Error is an error with a class. Its message is complete on its own: it says
// what was wrong and, where it can, what to do.
type Error struct {
	Class   Class
	Message string
	// LeaderID and LeaderAddr (gRPC address) are set on NotLeader when known.
	LeaderID   string
	LeaderAddr string
	// RetryAfter is set on ResourceExhausted and Unavailable when known.
	RetryAfter time.Duration
	// Reason, when set, is a machine-readable cause within the class, in
	// upper snake case (e.g. "SANDBOX_CLOSED", docs/sandboxes.md): callers
	// may branch on it instead of on the message. It crosses the wire in
	// the status's ErrorInfo (domain megaflow.io).
	Reason string
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Is reports whether target is the class sentinel of e's class, so that
// errors.Is(err, errs.ErrNotFound) works through any wrapping.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Class == e.Class
}

// Class sentinels for errors.Is.
var (
	ErrInvalidArgument    = &Error{Class: InvalidArgument}
	ErrNotFound           = &Error{Class: NotFound}
	ErrAlreadyExists      = &Error{Class: AlreadyExists}
	ErrFailedPrecondition = &Error{Class: FailedPrecondition}
	ErrUnavailable        = &Error{Class: Unavailable}
	ErrNotLeader          = &Error{Class: NotLeader}
	ErrResourceExhausted  = &Error{Class: ResourceExhausted}
	ErrOutOfRange         = &Error{Class: OutOfRange}
	ErrInternal           = &Error{Class: Internal}
	ErrPermissionDenied   = &Error{Class: PermissionDenied}
)

// New returns an error of class c with a formatted message.
func New(c Class, format string, args ...any) *Error {
	return &Error{Class: c, Message: fmt.Sprintf(format, args...)}
}

// ReasonOf returns Error.Reason of the first *Error in err's chain, or "".
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// ClassOf returns the class of the first *Error in err's chain, Unavailable
// for context deadline errors, and Unknown otherwise.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return Unknown
}

// Retryable reports whether the same request may succeed at another head or
// later: Unavailable, NotLeader, and ResourceExhausted with a RetryAfter
// (a rate limit).
func Retryable(err error) bool {
	switch ClassOf(err) {
	case Unavailable, NotLeader:
		return true
	case ResourceExhausted:
		// A rate limit says when to retry; a ResourceExhausted without a
		// RetryAfter is a message over gRPC's size limit ("received
		// message larger than max"), which the same call meets again.
		var e *Error
		return errors.As(err, &e) && e.RetryAfter > 0
	}
	return false
}

var classCodes = map[Class]codes.Code{
	Unknown:            codes.Unknown,
	InvalidArgument:    codes.InvalidArgument,
	NotFound:           codes.NotFound,
	AlreadyExists:      codes.AlreadyExists,
	FailedPrecondition: codes.FailedPrecondition,
	Unavailable:        codes.Unavailable,
	NotLeader:          codes.Unavailable, // with reason NOT_LEADER in ErrorInfo
	ResourceExhausted:  codes.ResourceExhausted,
	OutOfRange:         codes.OutOfRange,
	Internal:           codes.Internal,
	PermissionDenied:   codes.PermissionDenied,
	Unauthenticated:    codes.Unauthenticated,
}

const (
	domain          = "megaflow.io"
	reasonNotLeader = "NOT_LEADER"
)

// ToStatus converts err into a gRPC status error for the wire. Context errors
// become Canceled or DeadlineExceeded; errors without a class become Unknown.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		var e *Error
		if !errors.As(err, &e) {
			return err
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	var e *Error
	if !errors.As(err, &e) {
		return status.Error(codes.Unknown, err.Error())
	}
	st := status.New(classCodes[e.Class], err.Error())
	var details []protoadapt.MessageV1
	if e.Class == NotLeader {
		details = append(details, &errdetails.ErrorInfo{Reason: reasonNotLeader, Domain: domain,
			Metadata: map[string]string{"leader_id": e.LeaderID, "leader_addr": e.LeaderAddr}})
	}
	if e.Reason != "" && e.Class != NotLeader {
		details = append(details, &errdetails.ErrorInfo{Reason: e.Reason, Domain: domain})
	}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	if len(details) > 0 {
		if withDetails, derr := st.WithDetails(details...); derr == nil {
			st = withDetails
		}
	}
	return st.Err()
}

// FromStatus converts a gRPC status error from a head back into *Error. Errors
// that are not statuses are returned unchanged.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Message: st.Message()}
	switch st.Code() {
	case codes.InvalidArgument:
		e.Class = InvalidArgument
	case codes.NotFound:
		e.Class = NotFound
	case codes.AlreadyExists:
		e.Class = AlreadyExists
	case codes.FailedPrecondition:
		e.Class = FailedPrecondition
	case codes.Unavailable:
		e.Class = Unavailable
	case codes.ResourceExhausted:
		e.Class = ResourceExhausted
	case codes.OutOfRange:
		e.Class = OutOfRange
	case codes.Internal:
		e.Class = Internal
	case codes.PermissionDenied:
		e.Class = PermissionDenied
	case codes.Unauthenticated:
		e.Class = Unauthenticated
	case codes.Canceled:
		return fmt.Errorf("%s: %w", st.Message(), context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", st.Message(), context.DeadlineExceeded)
	default:
		e.Class = Unknown
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			switch {
			case d.GetReason() == reasonNotLeader:
				e.Class = NotLeader
				e.LeaderID = d.GetMetadata()["leader_id"]
				e.LeaderAddr = d.GetMetadata()["leader_addr"]
			case d.GetDomain() == domain:
				e.Reason = d.GetReason()
			}
		case *errdetails.RetryInfo:
			e.RetryAfter = d.GetRetryDelay().AsDuration()
		}
	}
	return e
}
