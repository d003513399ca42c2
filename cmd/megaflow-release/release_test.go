package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// tool returns the path of a Debian tool. Without it the test is skipped,
// unless $CI is set: .ci/run installs it.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed, and CI is set: .ci/run installs Debian's %s package", name, pkg)
		}
		t.Skipf("%s is not installed (apt-get install %s); skipping", name, pkg)
	}
	return p
}

func TestDebVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":                  "v1.2.3",
		"v0.0.0-dev":              "v0.0.0-dev",
		"v1.2.3-rc1":              "v1.2.3-rc1",
		"v1.2.3-dirty":            "v1.2.3+dirty",
		"v1.2.3-4-gabcdef0":       "v1.2.3+4.gabcdef0",
		"v1.2.3-4-gabcdef0-dirty": "v1.2.3+4.gabcdef0.dirty",
		"v1.2.3-rc1-2-g1234567":   "v1.2.3-rc1+2.g1234567",
	} {
		if got := DebVersion(in); got != want {
			t.Errorf("DebVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// The packages for the host's architecture, built from stand-in binaries
// (building the real ones takes minutes) and the real units, configs and
// scripts, unpacked into a scratch root: every file the units and the
// configs name is there, the configs are conffiles, the control fields are
// right, the maintainer scripts parse and start nothing on install, and
// systemd-analyze verify accepts the units against that root (a failure
// without systemd-analyze when CI is set, as .ci/run sets it).
func TestPackagesInstallWhatTheUnitsRun(t *testing.T) {
	dpkgDeb := tool(t, "dpkg-deb", "dpkg")
	arch := runtime.GOARCH
	if arch != "amd64" && arch != "arm64" {
		t.Skipf("no packages for %s", arch)
	}
	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range Packages() {
		for _, b := range p.Bins {
			if err := os.WriteFile(filepath.Join(binDir, b), []byte("#!/bin/sh\necho stand-in\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	debs, err := Build(Options{Version: "v1.2.3-4-gabcdef0", Arch: arch, BinDir: binDir, SrcDir: filepath.Join("..", ".."),
		OutDir: filepath.Join(dir, "dist"), Maintainer: "Test <test@example.invalid>"})
	if err != nil {
		t.Fatal(err)
	}
	if len(debs) != len(Packages()) {
		t.Fatalf("built %d packages, want %d: %v", len(debs), len(Packages()), debs)
	}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(dir, "control"), 0o755); err != nil {
		t.Fatal(err)
	}
	var units []string
	for i, p := range Packages() {
		deb := debs[i]
		depends := p.Depends
		if arch == "amd64" {
			depends = append(slices.Clone(depends), p.DependsAMD64...)
		}
		// Control fields.
		for field, want := range map[string]string{
			"Package":      p.Name,
			"Version":      "1.2.3+4.gabcdef0",
			"Architecture": arch,
			"Depends":      strings.Join(depends, ", "),
			"Recommends":   strings.Join(p.Recommends, ", "),
		} {
			out, err := exec.Command(dpkgDeb, "-f", deb, field).Output()
			if err != nil {
				t.Fatalf("dpkg-deb -f %s %s: %v", deb, field, err)
			}
			if got := strings.TrimSpace(string(out)); got != want {
				t.Errorf("%s: %s is %q, want %q", p.Name, field, got, want)
			}
		}
		if p.Name == "megaflow-worker" && !slices.Contains(p.Recommends, "docker.io | docker-ce") {
			t.Errorf("megaflow-worker recommends %v: docker.io | docker-ce wanted (not a Depends: the process runtime needs no Docker)", p.Recommends)
		}
		if out, err := exec.Command(dpkgDeb, "-x", deb, root).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -x %s: %v\n%s", deb, err, out)
		}
		ctrl := filepath.Join(dir, "control", p.Name)
		if out, err := exec.Command(dpkgDeb, "-e", deb, ctrl).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -e %s: %v\n%s", deb, err, out)
		}
		conffiles := lines(t, filepath.Join(ctrl, "conffiles"), false)
		// The maintainer scripts parse (sh -n). They are not run: dpkg
		// --root or --instdir chroots into the scratch root to run them,
		// which would need a shell, adduser and getent installed there.
		for _, s := range []struct{ name, src string }{{"postinst", p.PostInst}, {"prerm", p.PreRm}} {
			if s.src == "" {
				continue
			}
			if out, err := exec.Command("sh", "-n", filepath.Join(ctrl, s.name)).CombinedOutput(); err != nil {
				t.Errorf("%s: sh -n %s: %v\n%s", p.Name, s.name, err, out)
			}
		}

		for _, b := range p.Bins {
			executable(t, root, "/usr/bin/"+b)
		}
		for _, to := range p.Configs {
			exists(t, root, to)
			if !slices.Contains(conffiles, to) {
				t.Errorf("%s: %s is not a conffile (conffiles: %v): an upgrade would overwrite the operator's edits", p.Name, to, conffiles)
			}
			checkConfig(t, root, to)
		}
		if p.PostInst != "" {
			var code []string // without comments, which may mention systemctl enable
			for _, l := range lines(t, filepath.Join(ctrl, "postinst"), true) {
				if !strings.HasPrefix(l, "#") {
					code = append(code, l)
				}
			}
			script := strings.Join(code, "\n")
			if !strings.Contains(script, "adduser --system --group") || !strings.Contains(script, "/var/lib/megaflow") {
				t.Errorf("%s: postinst creates no megaflow system user or state directory:\n%s", p.Name, script)
			}
			for _, verb := range []string{"systemctl enable", "systemctl start", "systemctl restart", "deb-systemd-invoke"} {
				if strings.Contains(script, verb) {
					t.Errorf("%s: postinst runs %q: installing must start nothing", p.Name, verb)
				}
			}
		}
		for _, u := range p.Units {
			path := "/lib/systemd/system/" + u
			exists(t, root, path)
			units = append(units, path)
			execStart, config := unitExec(t, filepath.Join(root, path))
			executable(t, root, execStart)
			if config == "" {
				t.Errorf("%s: ExecStart has no --config", u)
			} else if _, ok := mapValue(p.Configs, config); !ok {
				t.Errorf("%s: --config %s is not a config file of %s (%v)", u, config, p.Name, p.Configs)
			}
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is not installed, and CI is set: .ci/run installs Debian's systemd package")
		}
		t.Log("systemd-analyze is not installed (apt-get install systemd): the units are not verified")
		return
	}
	// verify --root loads the units' dependencies (sysinit.target,
	// system.slice...) from the root: give it the host's.
	for _, pattern := range []string{"/usr/lib/systemd/system/*.target", "/usr/lib/systemd/system/*.slice"} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			data, err := os.ReadFile(m)
			if err != nil {
				continue // a dangling alias
			}
			if err := os.WriteFile(filepath.Join(root, "lib", "systemd", "system", filepath.Base(m)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// systemd-analyze warns about (and ignores) an unknown key or a bad
	// value with exit status 0: any word about our units is a failure.
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no", "--root=" + root}, units...)...).CombinedOutput()
	if err != nil || strings.Contains(string(out), "megaflow") {
		t.Errorf("systemd-analyze verify --root=%s %s: %v\n%s", root, strings.Join(units, " "), err, out)
	}
}

func mapValue(m map[string]string, v string) (string, bool) {
	for k, x := range m {
		if x == v {
			return k, true
		}
	}
	return "", false
}

// unitExec returns the binary of a unit's ExecStart and its --config file.
func unitExec(t *testing.T, path string) (bin, config string) {
	t.Helper()
	for _, l := range lines(t, path, true) {
		v, ok := strings.CutPrefix(l, "ExecStart=")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			t.Fatalf("%s: empty ExecStart", path)
		}
		bin = strings.TrimLeft(f[0], "-@:+!")
		if i := slices.Index(f, "--config"); i >= 0 && i+1 < len(f) {
			config = f[i+1]
		}
		return bin, config
	}
	t.Fatalf("%s: no ExecStart", path)
	return "", ""
}

// checkConfig checks the paths a packaged config names: its data-dir is
// under /var/lib/megaflow (the units' StateDirectory, the only writable
// path of the head's), and its init-path is installed.
func checkConfig(t *testing.T, root, path string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d, _ := cfg["data-dir"].(string); !strings.HasPrefix(d, "/var/lib/megaflow/") {
		t.Errorf("%s: data-dir %q is not under /var/lib/megaflow, the units' state directory", path, d)
	}
	if p, _ := cfg["init-path"].(string); p != "" {
		executable(t, root, p)
	}
}

func lines(t *testing.T, path string, required bool) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if !required && os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		out = append(out, strings.TrimSpace(s.Text()))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func exists(t *testing.T, root, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(filepath.Join(root, path))
	if err != nil {
		t.Errorf("%s is not installed: %v", path, err)
		return nil
	}
	return fi
}

func executable(t *testing.T, root, path string) {
	t.Helper()
	if fi := exists(t, root, path); fi != nil && (fi.IsDir() || fi.Mode().Perm()&0o111 == 0) {
		t.Errorf("%s is not an executable file (%v)", path, fi.Mode())
	}
}
