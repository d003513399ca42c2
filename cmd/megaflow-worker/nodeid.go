package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/megaflow/megaflow/internal/nodeid"
)

// nodeIDFile is the file in the data dir that keeps a worker id that was
// not given with --node-id (the name `megaflow up` keeps its worker's id
// under too).
const nodeIDFile = "node-id"

// defaultNodeID returns the id of a worker started without --node-id, and
// where it came from ("data dir" or "hostname"): the id kept in
// <dataDir>/node-id, else hostname's (the machine's; a container's is its
// short container id), which it then keeps there, so that the worker keeps
// its id across restarts even if the hostname changes while the data dir
// stays (a container recreated on the same volume). run calls it before
// the worker starts. Errors: the file cannot be read or written, it holds
// no valid node id, or the hostname cannot be one (a name nodeid.Problem
// refuses, or "localhost", which many machines share): each says to pass
// --node-id.
func defaultNodeID(dataDir string, hostname func() (string, error)) (id, from string, err error) {
	path := filepath.Join(dataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id = strings.TrimSpace(string(b))
		if p := nodeid.Problem(id); p != "" {
			return "", "", fmt.Errorf("no --node-id, and the worker id %q kept in %s %s: fix or remove the file, or pass --node-id", id, path, p)
		}
		return id, "data dir", nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", fmt.Errorf("no --node-id, and the worker id kept in the data dir cannot be read: %w (or pass --node-id)", err)
	}
	host, err := hostname()
	if err != nil {
		return "", "", fmt.Errorf("no --node-id, and the hostname cannot be read: %w; pass --node-id (a unique, stable id)", err)
	}
	if p := nodeid.Problem(host); p != "" {
		return "", "", fmt.Errorf("no --node-id, and the hostname %q cannot be a worker id: it %s; pass --node-id (a unique, stable id)", host, p)
	}
	if l := strings.ToLower(host); l == "localhost" || strings.HasPrefix(l, "localhost.") {
		return "", "", fmt.Errorf("no --node-id, and the hostname %q is not unique to this machine; pass --node-id (a unique, stable id)", host)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", "", fmt.Errorf("no --node-id: keeping the hostname %q as the worker id: %w", host, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(host+"\n"), 0o644); err != nil {
		return "", "", fmt.Errorf("no --node-id: keeping the hostname %q as the worker id: %w", host, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", "", fmt.Errorf("no --node-id: keeping the hostname %q as the worker id: %w", host, err)
	}
	return host, "hostname", nil
}
