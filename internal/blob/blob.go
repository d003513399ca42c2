// Package blob is MegaFlow's artifact store contract: task logs, output
// files, manifests and large results live in a blob store apart from the
// task table, which records only references and sizes (docs/artifacts.md,
// "artifacts"). Backends are chosen by URL: file:///path (the default, under
// a daemon's data dir) and s3://bucket/prefix (any S3 endpoint through
// aws-sdk-go-v2). Every backend passes the same contract test suite.
//
// Keys are slash-separated relative paths, "tenant/graph/task/attempt/...";
// a key never starts with "/", never contains "." or ".." elements or empty
// elements, and is at most MaxKeyBytes long. ValidKey checks that.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// MaxKeyBytes is the longest key, in bytes (S3's limit is 1,024).
const MaxKeyBytes = 1024

// Errors every backend returns (wrapped, test with errors.Is).
var (
	// ErrNotFound: no object has the key.
	ErrNotFound = errors.New("blob: object not found")
	// ErrChecksum: the bytes stored or read do not match the SHA-256 the
	// caller gave or the object's recorded one; nothing was stored.
	ErrChecksum = errors.New("blob: checksum mismatch")
	// ErrUnavailable: the store did not answer (network, 5xx, disk gone);
	// the call may be retried later with the same arguments.
	ErrUnavailable = errors.New("blob: store unavailable")
	// ErrInvalidKey: the key is not a valid key (see ValidKey).
	ErrInvalidKey = errors.New("blob: invalid key")
)

// Info describes one stored object.
type Info struct {
	// Key is the object's key.
	Key string
	// Size in bytes.
	Size int64
	// SHA256 is the lowercase hex SHA-256 of the content, when the backend
	// recorded it at Put ("" when unknown).
	SHA256 string
	// ContentType is the MIME type given at Put ("" when none).
	ContentType string
	// Modified is when the object was last written.
	Modified time.Time
}

// PutOptions qualify one Put.
type PutOptions struct {
	// Size is the content length in bytes; a Put of content of another
	// length fails with ErrChecksum and stores nothing. 0 or -1 means
	// unknown (the zero PutOptions is valid: the backend streams and
	// counts); an empty object needs no size.
	Size int64
	// SHA256 is the lowercase hex SHA-256 the content must have; when set,
	// a mismatch returns ErrChecksum and stores nothing: the key keeps the
	// object it had before the Put (none if it had none).
	SHA256 string
	// ContentType is recorded with the object.
	ContentType string
}

// Store is a blob store. Implementations are safe for concurrent use and
// every method returns promptly when ctx ends.
type Store interface {
	// Put writes r's content under key, replacing any object there; the
	// object becomes visible whole or not at all. Errors: ErrInvalidKey,
	// ErrChecksum, ErrUnavailable, ctx's error.
	Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (Info, error)
	// Get opens the object under key for reading; the caller closes it.
	// Errors: ErrInvalidKey, ErrNotFound, ErrUnavailable.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat returns the object's Info. Errors as Get.
	Stat(ctx context.Context, key string) (Info, error)
	// List returns the objects whose keys start with prefix, in key order.
	// Errors: ErrUnavailable, ctx's error.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes the object under key; a missing object is no error.
	// Errors: ErrInvalidKey, ErrUnavailable.
	Delete(ctx context.Context, key string) error
	// DeletePrefix removes every object whose key starts with prefix and
	// returns how many it removed. Errors: ErrUnavailable, ctx's error.
	DeletePrefix(ctx context.Context, prefix string) (int, error)
	// URL returns the store's location as given to Open, without secrets.
	URL() string
	// Close releases the store's resources.
	Close() error
}

// ValidKey reports whether key is a valid key, with a reason when not.
func ValidKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyBytes)
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("%w: %q starts with /", ErrInvalidKey, key)
	case strings.ContainsRune(key, 0) || strings.Contains(key, "\\"):
		return fmt.Errorf("%w: %q contains a NUL byte or a backslash", ErrInvalidKey, key)
	}
	for _, el := range strings.Split(key, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("%w: %q has an empty, \".\" or \"..\" element", ErrInvalidKey, key)
		}
	}
	return nil
}

// AttemptPrefix is the key prefix of one attempt's artifacts:
// "tenant/graph/task/attempt/". tenant, graph and task must be valid key
// elements (spec names are).
func AttemptPrefix(tenant, graph, task string, attempt uint32) string {
	return fmt.Sprintf("%s/%s/%s/%d/", tenant, graph, task, attempt)
}

// ValidPrefix reports whether some valid key could start with prefix, with
// a reason when none can ("../", "/abs", "a//"). "" is valid (every key).
// Backends refuse List and DeletePrefix of an invalid prefix with
// ErrInvalidKey rather than search for keys that cannot exist.
func ValidPrefix(prefix string) error {
	i := strings.LastIndex(prefix, "/")
	if strings.ContainsAny(prefix[i+1:], "\\\x00") {
		return fmt.Errorf("%w: prefix %q: no key can start with it (NUL byte or backslash)", ErrInvalidKey, prefix)
	}
	if i < 0 {
		return nil
	}
	if err := ValidKey(prefix[:i]); err != nil {
		return fmt.Errorf("prefix %q: no key can start with it: %w", prefix, err)
	}
	return nil
}
