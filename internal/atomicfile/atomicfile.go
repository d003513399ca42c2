// Package atomicfile writes a file so that a crash leaves either the old
// file or the whole new one, never a part, and the new one is on disk when
// Write returns.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path with mode: into a temporary file in the same
// directory (".<base>.*.tmp", removed on any error), synced, renamed over
// path, then the directory synced so that the rename itself is durable.
// A crash may leave a temporary file behind: readers that list the
// directory skip or remove names ending in ".tmp". Errors are the file
// system's, with the path.
func Write(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	name := tmp.Name()
	err = tmp.Chmod(mode)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		_ = os.Remove(name)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
