package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	mobynet "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/runtime/contract"
)

// tiniGroupEnv makes the container's init (tini, Docker's --init) forward
// signals to its child's whole process group, so Stop's SIGTERM reaches
// every process of a shell script, not only the shell.
const tiniGroupEnv = "TINI_KILL_PROCESS_GROUP"

// Start creates and starts a container for spec, then copies its output
// into spec.LogPath (appended to; created, with its missing directories,
// when the first byte arrives: no output, no file) from a goroutine of
// the Runtime until the container exits or is removed. The worker calls it
// once per attempt. The container gets spec's limits, no swap, every
// capability dropped except spec.Capabilities, no-new-privileges, an init
// process, network "none" unless spec says otherwise, spec's labels,
// spec.Ports published on every host address, and
// spec.GPUUUIDs through the nvidia device driver (with
// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES set to them). A
// container with a spec.User and a spec.WorkingDir (not "/", its root
// writable) gets that directory owned by the user before it starts
// (MakeDir), so that a non-root task or sandbox can write where it runs.
//
// Errors: contract.ErrImageNotFound (nothing is pulled: there is no
// registry), contract.ErrConflict (spec.Name taken), contract.ErrUnavailable,
// ctx's error, or the engine's refusal (a command that does not exist,
// say). A container created but not started is removed before Start
// returns; a ctx cancelled during the create does not cut it short (the
// engine would finish it unseen): Start waits for its answer, within
// CallTimeout, and removes what it made.
func (r *Runtime) Start(ctx context.Context, spec contract.Spec) (string, error) {
	what := spec.Name
	if what == "" {
		what = "(unnamed)"
	}
	if spec.Image == "" {
		return "", fmt.Errorf("docker start %s: Spec.Image is empty", what)
	}
	if spec.Init != nil && len(spec.Command) == 0 {
		// The init runs the image's own command: read it from the image.
		cmd, err := r.imageCommand(ctx, spec.Image)
		if err != nil {
			return "", fmt.Errorf("docker start %s: %w", what, err)
		}
		spec.Command = cmd
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("docker start %s: cancelled before it was created: %w", what, err)
	}
	// The create is not cancelled with ctx, only bounded by CallTimeout:
	// the engine (20.10 here) finishes a create whose client went away,
	// so a create cancelled mid-way left a container nobody knew of
	// until the worker's reconciliation found it (the attempt stopped and
	// forgotten meanwhile). Waiting for the answer lets the check below
	// remove it at once, by id.
	cctx, cancel := r.cleanupCtx(ctx)
	created, err := r.cli.ContainerCreate(cctx, createOptions(spec, r.cfg.DefaultPidsLimit))
	cancel()
	if err != nil {
		return "", r.createFailed(ctx, spec, what, err)
	}
	for _, w := range created.Warnings {
		r.log.Warn("engine warning on create", "container", what, "warning", w)
	}

	if wd := spec.WorkingDir; spec.User != "" && wd != "" && wd != "/" && !spec.ReadOnlyRootfs {
		// The engine made the working directory root's; a container that
		// runs as another user (an admission policy's run_as_user) gets it
		// as its own, so that it can write where it starts (a sandbox's
		// files). The image's own WORKDIR is left as the image has it.
		if err := r.MakeDir(ctx, created.ID, wd, spec.User); err != nil {
			r.removeQuietly(ctx, created.ID)
			return "", fmt.Errorf("docker start %s: giving the working directory %s to user %s: %w", what, wd, spec.User, err)
		}
	}
	if err := ctx.Err(); err != nil {
		// Cancelled (the attempt was stopped) while it was being created:
		// it must not start. A start request already sent cannot be taken
		// back (the engine finishes it), so this is the last moment.
		r.removeQuietly(ctx, created.ID)
		return "", fmt.Errorf("docker start %s: cancelled before it started: %w", what, err)
	}
	cctx, cancel = r.callCtx(ctx)
	_, err = r.cli.ContainerStart(cctx, created.ID, client.ContainerStartOptions{})
	cancel()
	if err != nil {
		r.removeQuietly(ctx, created.ID)
		// A 404 here is something the container refers to (a network),
		// not the container: no class for it.
		if ctx.Err() == nil && cerrdefs.IsInvalidArgument(err) {
			// The engine refused what the spec asks (e.g. "exec: \"x\":
			// executable file not found in $PATH"): a retry cannot help.
			return "", fmt.Errorf("docker start %s: %w: %v", what, contract.ErrInvalidSpec, err)
		}
		return "", r.wrap(ctx, "start", what, err, nil)
	}
	if spec.LogPath != "" {
		r.startLogCopy(created.ID, &contract.LazyLog{Path: spec.LogPath}, 0)
	}
	return created.ID, nil
}

// imageCommand returns image's ENTRYPOINT followed by its CMD, the
// command a container of it runs by default. Errors: ErrImageNotFound, an
// image that names no command (ErrInvalidSpec), the engine's.
func (r *Runtime) imageCommand(ctx context.Context, image string) ([]string, error) {
	cctx, cancel := r.callCtx(ctx)
	res, err := r.cli.ImageInspect(cctx, image)
	cancel()
	if err != nil {
		if cerrdefs.IsNotFound(err) && ctx.Err() == nil {
			return nil, fmt.Errorf("%w: image %q not found on this worker's Docker engine; build or load it (no registry is reachable)", contract.ErrImageNotFound, image)
		}
		return nil, r.wrap(ctx, "inspect image", image, err, nil)
	}
	var cmd []string
	if res.Config != nil {
		cmd = append(slices.Clone(res.Config.Entrypoint), res.Config.Cmd...)
	}
	if len(cmd) == 0 {
		return nil, fmt.Errorf("%w: image %q has no ENTRYPOINT or CMD and the task gives no command", contract.ErrInvalidSpec, image)
	}
	return cmd, nil
}

// createFailed classifies a failed create. A 404 is a missing image unless
// the image is there (then it was something else, a network say). After a
// timeout or cancellation the engine may still have created the container,
// so it is removed by name; never after a conflict, where the name is
// another container's.
func (r *Runtime) createFailed(ctx context.Context, spec contract.Spec, what string, err error) error {
	if cerrdefs.IsNotFound(err) && ctx.Err() == nil {
		cctx, cancel := r.callCtx(ctx)
		_, ierr := r.cli.ImageInspect(cctx, spec.Image)
		cancel()
		if cerrdefs.IsNotFound(ierr) {
			return fmt.Errorf("docker start %s: %w: image %q not found on this worker's Docker engine; build or load it (no registry is reachable)",
				what, contract.ErrImageNotFound, spec.Image)
		}
		return fmt.Errorf("docker create %s: %v", what, err)
	}
	if cerrdefs.IsConflict(err) && ctx.Err() == nil {
		return fmt.Errorf("docker create %s: %w: %v", what, contract.ErrConflict, err)
	}
	werr := r.wrap(ctx, "create", what, err, nil)
	if spec.Name != "" && (ctx.Err() != nil || errors.Is(werr, contract.ErrUnavailable)) {
		r.removeQuietly(ctx, spec.Name)
	}
	return werr
}

// removeQuietly force-removes a container after a failure, even when ctx
// was cancelled, and logs what it could not do.
func (r *Runtime) removeQuietly(ctx context.Context, idOrName string) {
	cctx, cancel := r.cleanupCtx(ctx)
	defer cancel()
	_, err := r.cli.ContainerRemove(cctx, idOrName, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		r.log.Warn("cannot remove container after a failed start", "container", idOrName, "err", err)
	}
}

// ReadOnlyTmpfsOptions are the mount options of the tmpfs at /tmp of a
// container with a read-only root (contract.Spec.ReadOnlyRootfs): 64 MiB,
// writable by every user (sticky, like /tmp), no devices or set-uid files.
const ReadOnlyTmpfsOptions = "rw,nosuid,nodev,size=64m,mode=1777"

// createOptions maps spec to the engine's create request. It is pure;
// defaultPids applies when spec.PidsLimit is 0.
func createOptions(spec contract.Spec, defaultPids int64) client.ContainerCreateOptions {
	env := envList(spec.Env, spec.GPUUUIDs)
	if _, ok := spec.Env[tiniGroupEnv]; !ok {
		env = append(env, tiniGroupEnv+"=1")
	}
	cfg := &container.Config{
		Image:      spec.Image,
		Env:        env,
		WorkingDir: spec.WorkingDir,
		Labels:     maps.Clone(spec.Labels),
		User:       spec.User,
	}
	command := spec.Command
	if spec.Init != nil {
		// megaflow-init is PID 1 (instead of the engine's tini): it holds
		// the worker's lease, mounted read-only with it.
		command = leaseinit.Argv(leaseinit.ContainerInitPath, leaseinit.ContainerLeaseDir+"/"+leaseinit.FileName, spec.Init.Grace, spec.Command)
	}
	if len(command) > 0 {
		// Command[0] is the program, whatever the image's ENTRYPOINT.
		cfg.Entrypoint = []string{command[0]}
		cfg.Cmd = slices.Clone(command[1:])
		if cfg.Cmd == nil {
			cfg.Cmd = []string{}
		}
	}

	res := container.Resources{
		NanoCPUs: spec.CPUMillis * 1_000_000,
		Memory:   spec.MemoryBytes,
	}
	if spec.MemoryBytes > 0 {
		res.MemorySwap = spec.MemoryBytes // memory+swap = memory: no swap
	}
	pids := spec.PidsLimit
	if pids == 0 {
		pids = defaultPids
	}
	if pids > 0 {
		res.PidsLimit = &pids
	}
	if len(spec.GPUUUIDs) > 0 {
		res.DeviceRequests = []container.DeviceRequest{{
			Driver:       "nvidia",
			DeviceIDs:    slices.Clone(spec.GPUUUIDs),
			Capabilities: [][]string{{"gpu"}},
		}}
	}
	network := spec.Network
	if network == "" {
		network = "none"
	}
	init := spec.Init == nil // Docker's tini, unless ours runs
	host := &container.HostConfig{
		Resources:   res,
		NetworkMode: container.NetworkMode(network),
		SecurityOpt: []string{"no-new-privileges"},
		CapDrop:     []string{"ALL"},
		CapAdd:      slices.Clone(spec.Capabilities),
		Init:        &init,
	}
	if spec.ReadOnlyRootfs {
		host.ReadonlyRootfs = true
		// Shells and most programs need a writable /tmp.
		host.Tmpfs = map[string]string{"/tmp": ReadOnlyTmpfsOptions}
	}
	for _, m := range spec.Mounts {
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	if spec.Init != nil {
		host.Mounts = append(host.Mounts,
			mount.Mount{Type: mount.TypeBind, Source: spec.Init.Path, Target: leaseinit.ContainerInitPath, ReadOnly: true},
			mount.Mount{Type: mount.TypeBind, Source: spec.Init.LeaseDir, Target: leaseinit.ContainerLeaseDir, ReadOnly: true})
	}
	for _, pb := range spec.Ports {
		cp, ok := mobynet.PortFrom(uint16(pb.ContainerPort), mobynet.TCP)
		if !ok {
			continue
		}
		if cfg.ExposedPorts == nil {
			cfg.ExposedPorts = mobynet.PortSet{}
			host.PortBindings = mobynet.PortMap{}
		}
		cfg.ExposedPorts[cp] = struct{}{}
		host.PortBindings[cp] = append(host.PortBindings[cp], mobynet.PortBinding{HostPort: strconv.Itoa(pb.HostPort)})
	}
	return client.ContainerCreateOptions{Name: spec.Name, Config: cfg, HostConfig: host}
}

// envList returns env as sorted KEY=VALUE pairs, with CUDA_VISIBLE_DEVICES
// and NVIDIA_VISIBLE_DEVICES set to gpus (comma-separated) when gpus is not
// empty, whatever env says: the pinned devices win.
func envList(env map[string]string, gpus []string) []string {
	m := maps.Clone(env)
	if len(gpus) > 0 {
		if m == nil {
			m = map[string]string{}
		}
		v := strings.Join(gpus, ",")
		m["CUDA_VISIBLE_DEVICES"] = v
		m["NVIDIA_VISIBLE_DEVICES"] = v
	}
	out := make([]string, 0, len(m)+1)
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
