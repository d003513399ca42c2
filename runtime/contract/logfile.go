package contract

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// An attempt's log file (Spec.LogPath) comes into being with its first
// byte of output: the runtime creates it, and the directories above it
// that are missing, when there is something to write. An attempt that
// prints nothing leaves no file and no directory, and a reader takes a
// missing log file for an empty log. This keeps the file system off a
// silent attempt's path entirely (a directory and a file per attempt were
// a fifth of a no-op task's cost, and their journal writes slowed the
// heads' fsyncs sharing the disk).

// OpenLog opens the log file at path for reading and appending, creating
// it, and its missing parent directories (0755), if need be; the file is
// created 0644. Runtimes call it when an attempt's first byte of output
// arrives (LazyLog does). Errors: the file system's.
func OpenLog(path string) (*os.File, error) {
	const flags = os.O_RDWR | os.O_APPEND | os.O_CREATE
	f, err := os.OpenFile(path, flags, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if merr := os.MkdirAll(filepath.Dir(path), 0o755); merr != nil {
			return nil, merr
		}
		f, err = os.OpenFile(path, flags, 0o644)
	}
	return f, err
}

// LazyLog appends to the log file at its Path, which it opens (OpenLog)
// on the first Write of at least one byte: until then nothing on the file
// system changes. Its zero value with a Path set is ready to use. One
// goroutine at a time; the owner calls Close when the output ends.
type LazyLog struct {
	// Path is the log file (Spec.LogPath).
	Path string
	f    *os.File
	err  error // the open's error, returned by every later Write
}

// Write appends p to the file, opening it first if this is the first
// byte. An empty p changes nothing. Errors: opening or writing the file;
// once the open failed, every later Write fails with the same error.
func (l *LazyLog) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	f, err := l.File()
	if err != nil {
		return 0, err
	}
	return f.Write(p)
}

// File returns the open log file, opening (creating) it now if no byte
// was written yet: for a writer that must read the file back or mark it.
// Errors: as OpenLog's.
func (l *LazyLog) File() (*os.File, error) {
	if l.f == nil && l.err == nil {
		l.f, l.err = OpenLog(l.Path)
	}
	return l.f, l.err
}

// Close closes the file if it was opened (nil otherwise); later Writes
// fail with os.ErrClosed and create nothing.
func (l *LazyLog) Close() error {
	var err error
	if l.f != nil {
		err = l.f.Close()
	}
	l.f, l.err = nil, os.ErrClosed
	return err
}
