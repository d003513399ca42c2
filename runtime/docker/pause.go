package docker

import (
	"context"

	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

var _ contract.Pauser = (*Runtime)(nil)

// Pause freezes container id's processes (docker pause: the cgroup
// freezer); see contract.Pauser. A container paused already is no error:
// when the engine refuses, the container's state decides. One call
// bounded by CallTimeout (and one inspect when refused).
func (r *Runtime) Pause(ctx context.Context, id string) error {
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	if _, err := r.cli.ContainerPause(cctx, id, client.ContainerPauseOptions{}); err != nil {
		return r.settled(ctx, "pause", id, true, err)
	}
	return nil
}

// Unpause thaws container id's processes (docker unpause); see
// contract.Pauser. A container that is not paused is no error.
func (r *Runtime) Unpause(ctx context.Context, id string) error {
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	if _, err := r.cli.ContainerUnpause(cctx, id, client.ContainerUnpauseOptions{}); err != nil {
		return r.settled(ctx, "unpause", id, false, err)
	}
	return nil
}

// settled turns the engine's refusal of a pause (paused true) or an
// unpause into nil when the container already is as asked (the engine
// refuses to pause a paused container, and to unpause one that is not),
// else into the wrapped error.
func (r *Runtime) settled(ctx context.Context, op, id string, paused bool, err error) error {
	if ctx.Err() == nil {
		cctx, cancel := r.callCtx(ctx)
		ins, ierr := r.cli.ContainerInspect(cctx, id, client.ContainerInspectOptions{})
		cancel()
		if ierr == nil && ins.Container.State != nil && ins.Container.State.Running && ins.Container.State.Paused == paused {
			return nil
		}
	}
	return r.wrap(ctx, op, id, err, contract.ErrNotFound)
}
