package docker

import (
	"slices"
	"testing"
	"time"

	mobynet "github.com/moby/moby/api/types/network"

	"github.com/megaflow/megaflow/runtime/contract"
)

func TestCreateOptions(t *testing.T) {
	spec := contract.Spec{
		Name:         "t1-a1",
		Image:        "img:1",
		Command:      []string{"python", "-c", "print(1)"},
		Env:          map[string]string{"B": "2", "A": "1", "CUDA_VISIBLE_DEVICES": "0,1,2", "NVIDIA_VISIBLE_DEVICES": "all"},
		WorkingDir:   "/work",
		CPUMillis:    1500,
		MemoryBytes:  64 << 20,
		Capabilities: []string{"NET_RAW"},
		Labels:       map[string]string{"megaflow.task": "t1"},
		GPUUUIDs:     []string{"GPU-aaa", "GPU-bbb"},
	}
	o := createOptions(spec, 1024)
	h := o.HostConfig
	if o.Name != "t1-a1" || o.Config.Image != "img:1" || o.Config.WorkingDir != "/work" {
		t.Fatalf("name/image/workdir: %+v", o)
	}
	if !slices.Equal(o.Config.Entrypoint, []string{"python"}) || !slices.Equal(o.Config.Cmd, []string{"-c", "print(1)"}) {
		t.Fatalf("entrypoint %q cmd %q: Command[0] must be the program", o.Config.Entrypoint, o.Config.Cmd)
	}
	if h.NanoCPUs != 1_500_000_000 {
		t.Errorf("NanoCPUs = %d, want 1.5e9", h.NanoCPUs)
	}
	if h.Memory != 64<<20 || h.MemorySwap != 64<<20 {
		t.Errorf("Memory %d MemorySwap %d: want both 64 MiB (no swap)", h.Memory, h.MemorySwap)
	}
	if h.PidsLimit == nil || *h.PidsLimit != 1024 {
		t.Errorf("PidsLimit %v, want the default 1024", h.PidsLimit)
	}
	if !slices.Equal(h.SecurityOpt, []string{"no-new-privileges"}) || !slices.Equal(h.CapDrop, []string{"ALL"}) || !slices.Equal(h.CapAdd, []string{"NET_RAW"}) {
		t.Errorf("security: opt %q drop %q add %q", h.SecurityOpt, h.CapDrop, h.CapAdd)
	}
	if h.Init == nil || !*h.Init {
		t.Error("Init is not set")
	}
	if h.NetworkMode != "none" {
		t.Errorf("NetworkMode %q, want none by default", h.NetworkMode)
	}
	if len(h.DeviceRequests) != 1 {
		t.Fatalf("DeviceRequests %+v", h.DeviceRequests)
	}
	dr := h.DeviceRequests[0]
	if dr.Driver != "nvidia" || !slices.Equal(dr.DeviceIDs, spec.GPUUUIDs) || len(dr.Capabilities) != 1 || !slices.Equal(dr.Capabilities[0], []string{"gpu"}) {
		t.Errorf("device request %+v", dr)
	}
	wantEnv := []string{"A=1", "B=2", "CUDA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb", "NVIDIA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb", tiniGroupEnv + "=1"}
	if !slices.Equal(o.Config.Env, wantEnv) {
		t.Errorf("env %q, want %q (the pinned GPUs override the spec's)", o.Config.Env, wantEnv)
	}
	if o.Config.Labels["megaflow.task"] != "t1" {
		t.Errorf("labels %v", o.Config.Labels)
	}

	// Zero values: no limits, the image's command, no GPUs.
	o = createOptions(contract.Spec{Image: "img:1", PidsLimit: -1, Network: "bridge"}, 1024)
	h = o.HostConfig
	if h.NanoCPUs != 0 || h.Memory != 0 || h.MemorySwap != 0 || h.PidsLimit != nil || h.DeviceRequests != nil {
		t.Errorf("zero spec got limits: %+v", h.Resources)
	}
	if o.Config.Entrypoint != nil || o.Config.Cmd != nil {
		t.Errorf("empty Command must keep the image's: entrypoint %q cmd %q", o.Config.Entrypoint, o.Config.Cmd)
	}
	if h.NetworkMode != "bridge" {
		t.Errorf("NetworkMode %q", h.NetworkMode)
	}
	if o = createOptions(contract.Spec{Image: "i", Command: []string{"true"}}, 1024); o.Config.Cmd == nil || len(o.Config.Cmd) != 0 {
		t.Errorf("a one-word Command must clear the image's CMD, got %q", o.Config.Cmd)
	}
}

func TestExitCodeFromStatus(t *testing.T) {
	for status, want := range map[string]int{
		"Exited (0) 2 seconds ago":    0,
		"Exited (137) 5 minutes ago":  137,
		"Up 3 seconds":                -1,
		"Created":                     -1,
		"Exited (-1) Less than a sec": -1,
	} {
		if got := exitCodeFromStatus(status); got != want {
			t.Errorf("%q: got %d, want %d", status, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{CallTimeout: -1}).Validate(); err == nil {
		t.Error("negative CallTimeout accepted")
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Error(err)
	}
}

// A service's port is exposed and published on the host port, on every host
// address; a spec without ports publishes nothing.
func TestCreateOptionsPublishesPorts(t *testing.T) {
	o := createOptions(contract.Spec{Image: "img", Network: "bridge",
		Ports: []contract.PortBinding{{ContainerPort: 8000, HostPort: 30007}}}, 0)
	cp, _ := mobynet.PortFrom(8000, mobynet.TCP)
	if _, ok := o.Config.ExposedPorts[cp]; !ok || len(o.Config.ExposedPorts) != 1 {
		t.Fatalf("exposed ports %v, want 8000/tcp", o.Config.ExposedPorts)
	}
	b := o.HostConfig.PortBindings[cp]
	if len(o.HostConfig.PortBindings) != 1 || len(b) != 1 || b[0].HostPort != "30007" || b[0].HostIP.IsValid() {
		t.Fatalf("port bindings %v, want 8000/tcp on host port 30007, every address", o.HostConfig.PortBindings)
	}
	if o := createOptions(contract.Spec{Image: "img"}, 0); o.Config.ExposedPorts != nil || o.HostConfig.PortBindings != nil {
		t.Fatalf("ports published without any asked: %v %v", o.Config.ExposedPorts, o.HostConfig.PortBindings)
	}
}

// With Spec.Init, megaflow-init is PID 1 (the engine's init is off), runs
// the task's command, and sees the init binary and the lease directory
// read-only.
func TestCreateOptionsWithLeaseInit(t *testing.T) {
	spec := contract.Spec{Name: "t1-a1", Image: "img:1", Command: []string{"sh", "-c", "sleep 1"},
		Init: &contract.Init{Path: "/opt/bin/megaflow-init", LeaseDir: "/data/w1/lease", Grace: 1250 * time.Millisecond}}
	o := createOptions(spec, 0)
	if o.HostConfig.Init == nil || *o.HostConfig.Init {
		t.Errorf("HostConfig.Init = %v, want false: megaflow-init replaces tini", o.HostConfig.Init)
	}
	want := []string{"--lease", "/.megaflow/lease/expiry", "--grace", "1.25s", "--", "sh", "-c", "sleep 1"}
	if !slices.Equal(o.Config.Entrypoint, []string{"/.megaflow/init"}) || !slices.Equal(o.Config.Cmd, want) {
		t.Fatalf("entrypoint %q cmd %q, want /.megaflow/init %q", o.Config.Entrypoint, o.Config.Cmd, want)
	}
	mounts := map[string]string{}
	for _, m := range o.HostConfig.Mounts {
		if !m.ReadOnly {
			t.Errorf("mount %s -> %s is writable", m.Source, m.Target)
		}
		mounts[m.Target] = m.Source
	}
	if mounts["/.megaflow/init"] != "/opt/bin/megaflow-init" || mounts["/.megaflow/lease"] != "/data/w1/lease" {
		t.Fatalf("mounts %v", mounts)
	}
}

// An admission policy's confinement (contract.Spec.User, ReadOnlyRootfs,
// PidsLimit) maps to the engine's Config.User, HostConfig.ReadonlyRootfs
// with a tmpfs at /tmp, and PidsLimit; without it, none of them is set.
func TestCreateOptionsConfinement(t *testing.T) {
	o := createOptions(contract.Spec{Name: "c", Image: "img", Command: []string{"sh"}, User: "65534:65534", ReadOnlyRootfs: true, PidsLimit: 64}, 1024)
	if o.Config.User != "65534:65534" || !o.HostConfig.ReadonlyRootfs || o.HostConfig.Tmpfs["/tmp"] != ReadOnlyTmpfsOptions ||
		o.HostConfig.PidsLimit == nil || *o.HostConfig.PidsLimit != 64 {
		t.Fatalf("confined: user %q, read-only %v, tmpfs %v, pids %v", o.Config.User, o.HostConfig.ReadonlyRootfs, o.HostConfig.Tmpfs, o.HostConfig.PidsLimit)
	}
	o = createOptions(contract.Spec{Name: "c", Image: "img", Command: []string{"sh"}}, 1024)
	if o.Config.User != "" || o.HostConfig.ReadonlyRootfs || len(o.HostConfig.Tmpfs) != 0 {
		t.Fatalf("unconfined: user %q, read-only %v, tmpfs %v", o.Config.User, o.HostConfig.ReadonlyRootfs, o.HostConfig.Tmpfs)
	}
}
