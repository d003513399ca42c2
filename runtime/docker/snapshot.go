package docker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

var _ contract.Snapshotter = (*Runtime)(nil)

// Commit commits container id into image ref (docker commit, the container
// paused while its files are copied, Docker's default); see
// contract.Snapshotter. Each label becomes a LABEL change of the image. The
// commit is bounded by ctx only, not CallTimeout: a large container's copy
// takes as long as its files.
func (r *Runtime) Commit(ctx context.Context, id, ref string, labels map[string]string) (string, int64, error) {
	var changes []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		changes = append(changes, fmt.Sprintf("LABEL %q=%q", k, labels[k]))
	}
	res, err := r.cli.ContainerCommit(ctx, id, client.ContainerCommitOptions{
		Reference: ref,
		Comment:   "megaflow sandbox snapshot",
		Changes:   changes,
	})
	if err != nil {
		return "", 0, r.wrap(ctx, "commit", id, err, contract.ErrNotFound)
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	ins, err := r.cli.ImageInspect(cctx, res.ID)
	if err != nil {
		return res.ID, 0, r.wrap(ctx, "image inspect", res.ID, err, contract.ErrImageNotFound)
	}
	return res.ID, ins.Size, nil
}

// RemoveImage removes image ref (its untagged parents pruned); see
// contract.Snapshotter. An image a container (running or not) uses is
// contract.ErrConflict.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) (bool, error) {
	if strings.TrimSpace(ref) == "" {
		return false, fmt.Errorf("docker image remove: the reference is empty")
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	// Not forced: a forced removal of an image a container uses only
	// untags it, leaving the image behind, unnamed, for good.
	_, err := r.cli.ImageRemove(cctx, ref, client.ImageRemoveOptions{PruneChildren: true})
	if err != nil {
		if cerrdefs.IsNotFound(err) && ctx.Err() == nil {
			return false, nil
		}
		if cerrdefs.IsConflict(err) && ctx.Err() == nil {
			return false, fmt.Errorf("docker image remove %s: %w: %v", ref, contract.ErrConflict, err)
		}
		return false, r.wrap(ctx, "image remove", ref, err, nil)
	}
	return true, nil
}

// SnapshotImages lists the images carrying every label of match (a value
// of "" matches any value of its key), in one call bounded by
// CallTimeout; see contract.Snapshotter. Dangling "<none>:<none>" tags are
// left out of Tags.
func (r *Runtime) SnapshotImages(ctx context.Context, match map[string]string) ([]contract.Image, error) {
	f := make(client.Filters)
	for k, v := range match {
		if v == "" {
			f.Add("label", k)
		} else {
			f.Add("label", k+"="+v)
		}
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	res, err := r.cli.ImageList(cctx, client.ImageListOptions{Filters: f})
	if err != nil {
		return nil, r.wrap(ctx, "image list", fmt.Sprint(match), err, nil)
	}
	var out []contract.Image
	for _, im := range res.Items {
		ok := true
		for k, v := range match {
			if hv, has := im.Labels[k]; !has || (v != "" && hv != v) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		var tags []string
		for _, t := range im.RepoTags {
			if t != "" && t != "<none>:<none>" {
				tags = append(tags, t)
			}
		}
		out = append(out, contract.Image{ID: im.ID, Tags: tags, Labels: im.Labels, Created: time.Unix(im.Created, 0)})
	}
	return out, nil
}
