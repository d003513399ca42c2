package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/megaflow/megaflow/runtime/contract"
)

// A program that does not exist or cannot run, and a missing working
// directory, are ErrInvalidSpec (not retried); a working start is not.
func TestStartInvalidSpec(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec.sh")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cmd     []string
		wd      string
		invalid bool
	}{
		{"no such program", []string{"/no/such/program"}, "", true},
		{"not on PATH", []string{"megaflow-no-such-program"}, "", true},
		{"not executable", []string{noexec}, "", true},
		{"no working dir", []string{"/bin/true"}, filepath.Join(dir, "missing"), true},
		{"runs", []string{"/bin/true"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRuntime(t)
			id, err := r.Start(context.Background(), contract.Spec{Name: tc.name, Command: tc.cmd, WorkingDir: tc.wd,
				LogPath: filepath.Join(dir, tc.name+".log")})
			if got := errors.Is(err, contract.ErrInvalidSpec); got != tc.invalid {
				t.Fatalf("Start: err = %v; ErrInvalidSpec %v, want %v", err, got, tc.invalid)
			}
			if err == nil {
				wait(t, r, id)
			}
		})
	}
}
