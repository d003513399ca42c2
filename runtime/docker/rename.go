package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

var _ contract.Renamer = (*Runtime)(nil)

// Rename gives container id the name name (docker rename); see
// contract.Renamer. One call bounded by CallTimeout.
func (r *Runtime) Rename(ctx context.Context, id, name string) error {
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	if _, err := r.cli.ContainerRename(cctx, id, client.ContainerRenameOptions{NewName: name}); err != nil {
		if cerrdefs.IsConflict(err) && ctx.Err() == nil {
			return fmt.Errorf("docker rename %s to %s: %w: %v", id, name, contract.ErrConflict, err)
		}
		return r.wrap(ctx, "rename", id, err, contract.ErrNotFound)
	}
	return nil
}
