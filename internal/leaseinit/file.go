// Package leaseinit is megaflow-init: the small static init that is PID 1
// of every container the worker starts (replacing Docker's --init, tini)
// and, as the spawner (spawn.go), the parent of every process-runtime
// task. It runs the task's command in its own process group, forwards
// signals to that group, reaps zombies, and kills the task's whole tree when the worker's lease file says the
// lease lapsed: a worker killed with kill -9, or frozen, that does not
// renew its lease leaves no task running past it (internal/lease).
//
// The lease file is one line, the lease's expiry as Unix nanoseconds
// (wall clock: the worker and its tasks share the host). The worker
// writes it in <data dir>/lease/ (WriteExpiry) and renews it with every
// acked heartbeat; the docker runtime bind-mounts that directory read-only
// at ContainerLeaseDir. cmd/megaflow-init is the binary; the worker, the
// runtimes and the tests import this package for the file format and the
// command line (Argv).
package leaseinit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FileName is the lease file's name in its directory.
const FileName = "expiry"

// In a container: where the docker runtime mounts the init binary and the
// lease directory (read-only).
const (
	ContainerInitPath = "/.megaflow/init"
	ContainerLeaseDir = "/.megaflow/lease"
)

// WriteExpiry writes expiry to dir/FileName atomically (a temporary file
// renamed over it, so a reader never sees half a line; a directory, not
// the file, is what containers mount, so they see the new file). dir is
// created if missing. The worker calls it after each renewal.
func WriteExpiry(dir string, expiry time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lease file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".expiry-*")
	if err != nil {
		return fmt.Errorf("lease file: %w", err)
	}
	_, werr := tmp.WriteString(strconv.FormatInt(expiry.UnixNano(), 10) + "\n")
	cerr := tmp.Close()
	if err := os.Chmod(tmp.Name(), 0o644); err == nil && werr == nil && cerr == nil {
		if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err == nil {
			return nil
		} else {
			werr = err
		}
	}
	_ = os.Remove(tmp.Name())
	return fmt.Errorf("lease file in %s: %v", dir, firstErr(werr, cerr))
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return fmt.Errorf("chmod failed")
}

// ReadExpiry reads the expiry in file. Errors: the file cannot be read or
// does not hold a number.
func ReadExpiry(file string) (time.Time, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, fmt.Errorf("lease file %s: %q is not a time in Unix nanoseconds", file, strings.TrimSpace(string(b)))
	}
	return time.Unix(0, n), nil
}

// Argv returns the command line that runs command under the init at
// initPath with the lease file leaseFile, SIGKILL coming grace after
// SIGTERM when the lease lapses.
func Argv(initPath, leaseFile string, grace time.Duration, command []string) []string {
	out := []string{initPath, "--lease", leaseFile, "--grace", grace.String(), "--"}
	return append(out, command...)
}
