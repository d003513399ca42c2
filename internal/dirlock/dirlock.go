// Package dirlock keeps two processes off one data directory: a lock file
// in the directory, held with flock(2) for as long as the process uses the
// directory, naming the holder's pid. The kernel releases the lock when
// the holder exits, however it exits, so a crash leaves no stale lock.
// The head's Raft wiring (head/consensus) and `megaflow up` take one; any
// package of this module may import it.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/megaflow/megaflow/internal/errs"
)

// FileName is the lock file's name inside the directory.
const FileName = "LOCK"

// Lock is a held lock on a directory. Release it with Release.
type Lock struct {
	f *os.File
}

// Acquire creates dir if needed and locks it for this process at once,
// without waiting. If another process holds it, it returns a
// FailedPrecondition error that names the directory, the holder's pid if
// the lock file says it, and what to do; what says who wants the
// directory ("megaflow up", "the head's Raft store") for the message. The
// lock file is left in place on Release: its presence means nothing, only
// the kernel's lock does.
func Acquire(dir, what string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s: create %s: %w", what, dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: open lock file %s: %w", what, path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf("another process (pid %d)", pid)
			}
		}
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errs.New(errs.FailedPrecondition,
				"%s: data directory %s is in use by %s (it holds %s): stop that process first (megaflow up or megaflow-head on this directory), or give this one another --data-dir",
				what, dir, holder, path)
		}
		return nil, fmt.Errorf("%s: lock %s: %w", what, path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up. It is safe to call more than once and on nil.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	return err
}
