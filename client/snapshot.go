package client

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Snapshots (docs/sandboxes.md, "Snapshots and forks"): a READY sandbox
// committed into an image on its worker, from which new sandboxes start
// with its files (SandboxSpec.FromSnapshot).

// SandboxSnapshot is a sandbox snapshot as the heads show it: id, tenant, name, the
// sandbox it was taken of, its worker and image, size and time, and
// Unavailable: why no sandbox can be created from it now ("worker w1 is
// down (...)"), empty while its worker is alive.
type SandboxSnapshot = wire.Snapshot

// The reasons (errs.ReasonOf) of the snapshot calls' errors.
const (
	ReasonSnapshotNotFound   = "SNAPSHOT_NOT_FOUND"      // errs.NotFound: no such snapshot (deleted, never taken, or another tenant's)
	ReasonSnapshotWorkerDown = "SNAPSHOT_WORKER_DOWN"    // errs.FailedPrecondition: the worker holding its image is down or left; retry once it is back
	ReasonSnapshotInUse      = "SNAPSHOT_IN_USE"         // errs.FailedPrecondition: sandboxes created from it may still run it; close them first
	ReasonSnapshotQuota      = "SNAPSHOT_QUOTA_EXCEEDED" // errs.ResourceExhausted: the tenant holds its maximum of snapshots
)

// Snapshot commits the READY sandbox into an image on its worker (the
// container is paused while its files are copied) and records it; name
// is for people (at most 128 printable bytes, may be empty). Sandboxes
// created with SandboxSpec.FromSnapshot set to the returned Id start with
// the files the sandbox has now. Not retried once sent (a retry would take
// a second snapshot): on errs.Unavailable, ListSnapshots says whether it
// was taken. Errors as Exec, and errs.ResourceExhausted (the tenant holds
// its maximum of snapshots: ReasonSnapshotQuota).
func (s *Sandbox) Snapshot(ctx context.Context, name string) (*SandboxSnapshot, error) {
	if err := spec.CheckSnapshotName(name); err != nil {
		return nil, err
	}
	var (
		res     *wire.SnapshotSandboxResponse
		final   error // an answer not to retry
		finalAt string
	)
	err := s.c.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		res, err = wire.NewSandboxServiceClient(cc).SnapshotSandbox(ctx, &wire.SnapshotSandboxRequest{SandboxId: s.id, Name: name,
			MinIndex: max(s.index(), s.c.sessionIndex())})
		if err != nil && errs.ClassOf(errs.FromStatus(err)) != errs.NotLeader {
			finalAt, _, _ = s.c.pick() // the head callConn picked, for execErr
			final = err
			return nil
		}
		return err
	})
	if err == nil && final != nil {
		return nil, s.execErr(ctx, finalAt, final)
	}
	if err != nil {
		return nil, err
	}
	s.c.observe(res.GetIndex())
	return res.GetSnapshot(), nil
}

// ListSnapshots returns a tenant's snapshots (every tenant's for ""),
// oldest first.
func (c *Client) ListSnapshots(ctx context.Context, tenant string) ([]*SandboxSnapshot, error) {
	var res *wire.ListSnapshotsResponse
	err := c.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		res, err = wire.NewSandboxServiceClient(cc).ListSnapshots(ctx, &wire.ListSnapshotsRequest{Tenant: tenant, MinIndex: c.sessionIndex()})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res.GetSnapshots(), nil
}

// DeleteSnapshot removes snapshot id: its record, then its image on its
// worker (an image its worker cannot remove now, for instance while the
// worker is down, is removed by the worker's reconciliation later).
// Retried through leader changes. Errors: errs.NotFound
// (ReasonSnapshotNotFound), errs.FailedPrecondition (sandboxes created
// from it may still run it: ReasonSnapshotInUse; close them first).
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	if err := spec.CheckSnapshotID("snapshot id", id); err != nil {
		return err
	}
	var res *wire.DeleteSnapshotResponse
	err := c.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		res, err = wire.NewSandboxServiceClient(cc).DeleteSnapshot(ctx, &wire.DeleteSnapshotRequest{Id: id, MinIndex: c.sessionIndex()})
		return err
	})
	if err != nil {
		return err
	}
	c.observe(res.GetIndex())
	return nil
}

// SetTimeout makes the live sandbox end (EXPIRED) d from now, sooner or
// later than before, in whole seconds (rounded up): 1 s to 7 days, and
// its whole lifetime from creation (SandboxInfo.LifetimeSeconds, updated
// on the handle) at most 7 days. Retried through leader changes (setting
// the same timeout twice moves the end by the retry's delay only).
// Errors: errs.NotFound, errs.FailedPrecondition (it ended),
// errs.InvalidArgument (out of bounds: the message says the most it may
// be).
func (s *Sandbox) SetTimeout(ctx context.Context, d time.Duration) error {
	secs := int64((d + time.Second - 1) / time.Second)
	if secs < 1 || secs > spec.SandboxMaxSeconds {
		return errs.New(errs.InvalidArgument, "sandbox %s: timeout %v is out of range: 1s to %v", s.id, d, time.Duration(spec.SandboxMaxSeconds)*time.Second)
	}
	return updateSandbox(ctx, s, func(ctx context.Context, sc wire.SandboxServiceClient) (*wire.SetSandboxTimeoutResponse, error) {
		return sc.SetSandboxTimeout(ctx, &wire.SetSandboxTimeoutRequest{Id: s.id, TimeoutSeconds: secs,
			MinIndex: max(s.index(), s.c.sessionIndex())})
	})
}
