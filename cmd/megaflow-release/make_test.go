package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// runMainEnv makes this test binary run main instead of the tests: goStub
// copies it as the release's megaflow-release.
const runMainEnv = "MEGAFLOW_RELEASE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// goStub writes a stand-in for the go command into dir for `make release
// GO=...`: `go build -o OUT ./cmd/X` logs "CGO_ENABLED=<c> GOARCH=<a> X"
// to dir/builds.log and writes OUT: for megaflow-release this test binary
// (which runs main under runMainEnv), for a megaflow-worker built without
// cgo a small Go program built without cgo (so that `go version -m`, which
// the Makefile asks of the worker only, reports it), else a shell script:
// in seconds instead of the minutes the real binaries take. (With a Go
// stand-in for every command, gzip -9 of the tarballs took most of the
// test's minute under load.) `go env` and `go version` are the real go's. It returns the
// stub's path and the log's.
func goStub(t *testing.T, dir string) (stub, log string) {
	t.Helper()
	real, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	src := filepath.Join(dir, "nocgo.go")
	nocgo := filepath.Join(dir, "nocgo")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := exec.Command(real, "build", "-ldflags=-s -w", "-o", nocgo, src)
	b.Dir, b.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := b.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", src, err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log = filepath.Join(dir, "builds.log")
	stub = filepath.Join(dir, "go")
	script := `#!/bin/sh
[ "$1" = build ] || exec ` + real + ` "$@"
out= prev= pkg=
for a; do
  [ "$prev" = -o ] && out=$a
  case "$a" in ./cmd/*) pkg=${a#./cmd/};; esac
  prev=$a
done
echo "CGO_ENABLED=$CGO_ENABLED GOARCH=$GOARCH $pkg" >>` + log + `
if [ "$pkg" = megaflow-release ]; then cp ` + self + ` "$out"
elif [ "$CGO_ENABLED" = 0 ] && [ "$pkg" = megaflow-worker ]; then cp ` + nocgo + ` "$out"
else printf '#!/bin/sh\necho stand-in\n' >"$out"; chmod 755 "$out"; fi
`
	if err := os.WriteFile(stub, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return stub, log
}

// TestMakeReleaseWantsCgo runs the Makefile's release target with stand-in
// builds (goStub): without a C compiler (CC names none, as
// scripts/check-demo-bare.sh hides it without root) it stops before
// building anything, naming gcc, libc6-dev and ALLOW_NO_CGO; with
// ALLOW_NO_CGO=1 it releases the worker built without cgo, with the note;
// a worker that an earlier goal built without cgo (`make build release`)
// is refused too; with the host's C compiler, when it has one, the
// release's amd64 worker is built with cgo.
func TestMakeReleaseWantsCgo(t *testing.T) {
	mk := tool(t, "make", "make")
	dir := t.TempDir()
	stub, log := goStub(t, dir)
	run := func(t *testing.T, cc string, args ...string) (out string, ok bool, builds []string) {
		t.Helper()
		os.Remove(log)
		bin, dist := filepath.Join(dir, "bin"), filepath.Join(dir, "dist")
		os.RemoveAll(bin)
		os.RemoveAll(dist)
		cmd := exec.Command(mk, append([]string{"--no-print-directory", "-C", filepath.Join("..", ".."),
			"GO=" + stub, "BIN=" + bin, "DIST=" + dist, "VERSION=v1.2.3", "COMMIT=0123456789abcdef"}, args...)...)
		var env []string
		for _, e := range os.Environ() {
			k, _, _ := strings.Cut(e, "=")
			if !slices.Contains([]string{"CC", "ALLOW_NO_CGO", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GOFLAGS"}, k) {
				env = append(env, e)
			}
		}
		if cc != "" {
			env = append(env, "CC="+cc)
		}
		cmd.Env = append(env, "SOURCE_DATE_EPOCH=1764547200", runMainEnv+"=1")
		b, err := cmd.CombinedOutput()
		if l, err := os.ReadFile(log); err == nil {
			builds = strings.Split(strings.TrimSpace(string(l)), "\n")
		}
		return string(b), err == nil, builds
	}
	released := func(t *testing.T, out string) {
		t.Helper()
		for _, f := range []string{"megaflow-v1.2.3-linux-amd64.tar.gz", "megaflow-v1.2.3-linux-arm64.tar.gz", "SHA256SUMS",
			"megaflow-worker_1.2.3_amd64.deb", "megaflow-worker_1.2.3_arm64.deb"} {
			if _, err := os.Stat(filepath.Join(dir, "dist", f)); err != nil {
				t.Errorf("no %s in the release: %v\n%s", f, err, out)
			}
		}
	}
	const noCC = "megaflow-no-cc"
	const worker = "GOARCH=amd64 megaflow-worker"

	t.Run("no C compiler", func(t *testing.T) {
		out, ok, builds := run(t, noCC, "release")
		if ok {
			t.Fatalf("make release without a C compiler succeeded:\n%s", out)
		}
		for _, want := range []string{"no working C compiler (megaflow-no-cc)", "without NVML GPU discovery",
			"Install gcc and libc6-dev", "pass ALLOW_NO_CGO=1"} {
			if !strings.Contains(out, want) {
				t.Errorf("the refusal lacks %q:\n%s", want, out)
			}
		}
		if len(builds) != 0 {
			t.Errorf("built before refusing: %v", builds)
		}
		for _, p := range []string{"bin", "dist"} {
			if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
				t.Errorf("%s was created before the refusal", p)
			}
		}
	})
	t.Run("ALLOW_NO_CGO=1", func(t *testing.T) {
		out, ok, builds := run(t, noCC, "release", "ALLOW_NO_CGO=1")
		if !ok {
			t.Fatalf("make release ALLOW_NO_CGO=1: failed:\n%s", out)
		}
		if !slices.Contains(builds, "CGO_ENABLED=0 "+worker) || !slices.Contains(builds, "CGO_ENABLED=0 GOARCH= megaflow-release") {
			t.Errorf("builds: %v; want the amd64 worker and megaflow-release without cgo", builds)
		}
		for _, b := range builds {
			if !strings.HasPrefix(b, "CGO_ENABLED=0 ") {
				t.Errorf("built with cgo, without a C compiler: %s", b)
			}
		}
		if !strings.Contains(out, "note: no working C compiler (megaflow-no-cc): building megaflow-worker without cgo") {
			t.Errorf("no note that the worker is built without cgo:\n%s", out)
		}
		released(t, out)
	})
	t.Run("worker built without cgo by make build", func(t *testing.T) {
		out, ok, builds := run(t, noCC, "build", "release")
		if ok {
			t.Fatalf("make build release without a C compiler succeeded:\n%s", out)
		}
		if want := "megaflow-worker was built without cgo"; !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, out)
		}
		if !slices.Contains(builds, "CGO_ENABLED=0 "+worker) || slices.ContainsFunc(builds, func(b string) bool { return strings.Contains(b, "arm64") }) {
			t.Errorf("builds: %v; want the amd64 ones only (make build), then the refusal", builds)
		}
	})
	t.Run("C compiler", func(t *testing.T) {
		if out, err := exec.Command("sh", "-c", `printf '#include <stdlib.h>\nint main(void) { return 0; }\n' | $(go env CC) -x c -o /dev/null -`).CombinedOutput(); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("no working C compiler, and CI is set: .ci/run installs gcc and libc6-dev: %v\n%s", err, out)
			}
			t.Skipf("no working C compiler (apt-get install gcc libc6-dev): %v", err)
		}
		out, ok, builds := run(t, "", "release")
		if !ok {
			t.Fatalf("make release: failed:\n%s", out)
		}
		if !slices.Contains(builds, "CGO_ENABLED=1 "+worker) || !slices.Contains(builds, "CGO_ENABLED=0 GOARCH=arm64 megaflow-worker") {
			t.Errorf("builds: %v; want the amd64 worker with cgo, the arm64 one without", builds)
		}
		if strings.Contains(out, "note: no working C compiler") {
			t.Errorf("a note about no C compiler, with one:\n%s", out)
		}
		released(t, out)
	})
}
