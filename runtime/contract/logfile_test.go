package contract

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A LazyLog touches the file system only with its first byte: nothing
// written, or only empty writes, leaves neither the file nor the
// directories above it; the first byte creates both; an existing file is
// appended to; after Close, writes fail.
func TestLazyLog(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing string   // the file's content before, "" for none
		writes   []string // Write calls in order
		file     bool     // File() is called after the writes
		want     string   // the file's content after; "-" for no file
	}{
		{"nothing written", "", nil, false, "-"},
		{"empty writes", "", []string{"", ""}, false, "-"},
		{"first byte creates it", "", []string{"", "a", "bc\n"}, false, "abc\n"},
		{"File creates it", "", nil, true, ""},
		{"appends to an existing file", "old\n", []string{"new\n"}, false, "old\nnew\n"},
		{"an existing file untouched", "old\n", nil, false, "old\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, "logs", "g+t", "1.log")
			if tc.existing != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.existing), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l := &LazyLog{Path: path}
			for _, w := range tc.writes {
				if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if tc.file {
				if f, err := l.File(); f == nil || err != nil {
					t.Fatalf("File() = %v, %v", f, err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			switch {
			case tc.want == "-":
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("log file: %q, %v; want none", b, err)
				}
				if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("its directory exists (%v); want none", err)
				}
			case err != nil || string(b) != tc.want:
				t.Fatalf("log file %q, %v; want %q", b, err, tc.want)
			}
			if _, err := l.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
				t.Errorf("Write after Close: %v, want os.ErrClosed", err)
			}
		})
	}
}

// OpenLog reports what the file system refused: a parent that is a file.
func TestOpenLogError(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "logs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := OpenLog(filepath.Join(root, "logs", "g+t", "1.log")); err == nil {
		f.Close()
		t.Fatal("OpenLog under a file succeeded")
	}
	l := &LazyLog{Path: filepath.Join(root, "logs", "x.log")}
	if _, err := l.Write([]byte("a")); err == nil {
		t.Fatal("Write under a file succeeded")
	}
	if _, err := l.Write([]byte("b")); err == nil {
		t.Fatal("a second Write after a failed open succeeded")
	}
}
