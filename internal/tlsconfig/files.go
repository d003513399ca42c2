package tlsconfig

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/megaflow/megaflow/internal/atomicfile"
)

// WriteFiles writes p as certPath (mode 0644) and keyPath (mode 0600),
// each through a temporary file renamed into place. Unless force, it
// refuses when either file exists, and then writes neither. Errors name
// the file and what to do.
func WriteFiles(certPath, keyPath string, p PEM, force bool) error {
	if !force {
		for _, path := range []string{certPath, keyPath} {
			if _, err := os.Lstat(path); err == nil {
				return fmt.Errorf("%s exists; pass --force to overwrite it", path)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if err := writeFile(keyPath, p.Key, 0o600); err != nil {
		return err
	}
	return writeFile(certPath, p.Cert, 0o644)
}

// writeFile writes data to path with mode, atomically and durably.
func writeFile(path string, data []byte, mode os.FileMode) error {
	return atomicfile.Write(path, data, mode)
}

// ReadPEM reads a certificate and its key from certPath and keyPath.
func ReadPEM(certPath, keyPath string) (PEM, error) {
	c, err := readBounded(certPath)
	if err != nil {
		return PEM{}, err
	}
	k, err := readBounded(keyPath)
	if err != nil {
		return PEM{}, err
	}
	return PEM{Cert: c, Key: k}, nil
}

// maxFileBytes bounds a PEM file: 1 MiB, far above any real one.
const maxFileBytes = 1 << 20

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: more than %d bytes: not a PEM certificate or key", path, maxFileBytes)
	}
	return data, nil
}
