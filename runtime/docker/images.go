package docker

import (
	"context"
	"slices"

	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

var _ contract.ImageLister = (*Runtime)(nil)

// Images returns the tags of the images the engine holds ("repo:tag",
// sorted, without duplicates; dangling "<none>:<none>" left out), in one
// call bounded by CallTimeout. The worker calls it from its image refresh
// loop. Errors: contract.ErrUnavailable, ctx's error.
func (r *Runtime) Images(ctx context.Context) ([]string, error) {
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	res, err := r.cli.ImageList(cctx, client.ImageListOptions{})
	if err != nil {
		return nil, r.wrap(ctx, "image list", r.cli.DaemonHost(), err, nil)
	}
	var out []string
	for _, im := range res.Items {
		for _, tag := range im.RepoTags {
			if tag != "" && tag != "<none>:<none>" {
				out = append(out, tag)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
