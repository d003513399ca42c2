// Package race says whether the binary was built with the race detector
// (go build -race / go test -race), so that tests of pure, single-goroutine
// code, where the detector can find nothing and costs a factor of about 5
// to 10 in CPU, can leave that run to `make test`'s run without it.
package race

import "testing"

// SkipPure skips t when Enabled: t tests single-goroutine code (no
// goroutine, no shared state), so the race detector has nothing to find in
// it. `make test` runs the packages holding such tests a second time
// without -race (the Makefile's PURE_PKGS), where t runs in full.
func SkipPure(t testing.TB) {
	t.Helper()
	if Enabled {
		t.Skip("single-goroutine property test: runs without -race (make test's PURE_PKGS run)")
	}
}
