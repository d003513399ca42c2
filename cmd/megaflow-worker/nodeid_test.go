package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaultNodeID(t *testing.T) {
	host := func(name string, err error) func() (string, error) {
		return func() (string, error) { return name, err }
	}
	for _, tc := range []struct {
		name     string
		file     *string // nil: no node-id file
		hostname func() (string, error)
		id, from string
		err      string // "": no error
		kept     string // the file's content after the call
	}{
		{name: "hostname kept", hostname: host("3f2a1b9c0d7e", nil), id: "3f2a1b9c0d7e", from: "hostname", kept: "3f2a1b9c0d7e\n"},
		{name: "fqdn", hostname: host("gpu-7.rack2.example.com", nil), id: "gpu-7.rack2.example.com", from: "hostname", kept: "gpu-7.rack2.example.com\n"},
		{name: "the file wins over the hostname", file: ptr("w-old\n"), hostname: host("3f2a1b9c0d7e", nil), id: "w-old", from: "data dir", kept: "w-old\n"},
		{name: "bad file", file: ptr("w/1\n"), hostname: host("h", nil), err: `the worker id "w/1" kept in`, kept: "w/1\n"},
		{name: "empty file", file: ptr("\n"), hostname: host("h", nil), err: "is empty", kept: "\n"},
		{name: "localhost", hostname: host("localhost", nil), err: `the hostname "localhost" is not unique to this machine; pass --node-id`},
		{name: "localhost.localdomain", hostname: host("LocalHost.localdomain", nil), err: "is not unique to this machine"},
		{name: "bad hostname", hostname: host("-x", nil), err: `the hostname "-x" cannot be a worker id: it must start with a letter or digit; pass --node-id`},
		{name: "long hostname", hostname: host(strings.Repeat("a", 65), nil), err: "is 65 bytes long"},
		{name: "no hostname", hostname: host("", errors.New("uname failed")), err: "the hostname cannot be read: uname failed; pass --node-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data") // not there yet
			path := filepath.Join(dir, nodeIDFile)
			if tc.file != nil {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(*tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			id, from, err := defaultNodeID(dir, tc.hostname)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
			} else if err != nil || id != tc.id || from != tc.from {
				t.Fatalf("= %q, %q, %v; want %q, %q", id, from, err, tc.id, tc.from)
			}
			b, err := os.ReadFile(path)
			if tc.kept == "" {
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s: %q, %v; want no file", path, b, err)
				}
				return
			}
			if string(b) != tc.kept {
				t.Fatalf("%s holds %q, %v; want %q", path, b, err, tc.kept)
			}
			if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s.tmp left behind: %v", path, err)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// A worker started without --node-id runs as its hostname and keeps it in
// the data dir; started again after the file was changed (as a container
// recreated on the same volume, under a new hostname), it keeps the
// file's id.
func TestRunsWithoutNodeID(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := defaultNodeID(t.TempDir(), os.Hostname); err != nil {
		t.Skipf("this machine's hostname cannot be a worker id: %v", err)
	}
	dir := t.TempDir()
	start := func() string {
		t.Helper()
		var out syncBuffer
		cmd := newCommand(&out)
		cmd.SetArgs([]string{"--data-dir", dir, "--gossip-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--heads", "127.0.0.1:1", "--runtime", "process", "--cpu-millis", "1000", "--memory-bytes", "1073741824"})
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := cmd.ExecuteContext(ctx); err != nil {
			t.Fatalf("megaflow-worker: %v\n%s", err, out.String())
		}
		return out.String()
	}
	if out := start(); !strings.Contains(out, "megaflow-worker "+host+": runtime process") || !strings.Contains(out, "using the worker id from the hostname") {
		t.Fatalf("without --node-id the worker is not %q:\n%s", host, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, nodeIDFile)); err != nil || string(b) != host+"\n" {
		t.Fatalf("%s: %q, %v; want %q", nodeIDFile, b, err, host+"\n")
	}
	if err := os.WriteFile(filepath.Join(dir, nodeIDFile), []byte("w-kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := start(); !strings.Contains(out, "megaflow-worker w-kept: runtime process") || !strings.Contains(out, "using the worker id from the data dir") {
		t.Fatalf("the worker did not take the id kept in its data dir:\n%s", out)
	}
}
