package blob

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
)

// Backend opens stores of one URL scheme. The daemon's composition root
// lists the backends it links (fileblob.Backend(), s3blob.Backend(opts)) and
// passes them to Open, so this package links no backend and no SDK.
type Backend struct {
	// Scheme is the URL scheme the backend serves, lowercase ("file", "s3").
	Scheme string
	// Open opens the store at u; u.Scheme equals Scheme. Errors name what
	// in the URL was wrong.
	Open func(ctx context.Context, u *url.URL) (Store, error)
}

// Open opens the store at rawURL with the backend of its scheme. A bare
// absolute path ("/var/lib/megaflow/artifacts") is taken as file://path.
// Errors: an unparsable URL, a scheme no backend serves (the error lists
// the schemes that are linked), or the backend's own error.
func Open(ctx context.Context, rawURL string, backends ...Backend) (Store, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("artifact store: empty URL; use file:///path or s3://bucket/prefix")
	}
	if filepath.IsAbs(rawURL) && !strings.Contains(rawURL, "://") {
		rawURL = (&url.URL{Scheme: "file", Path: filepath.Clean(rawURL)}).String()
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("artifact store %q: %v; use file:///path or s3://bucket/prefix", rawURL, err)
	}
	scheme := strings.ToLower(u.Scheme)
	var known []string
	for _, b := range backends {
		if b.Scheme == scheme {
			u.Scheme = scheme
			return b.Open(ctx, u)
		}
		known = append(known, b.Scheme+"://")
	}
	sort.Strings(known)
	if scheme == "" {
		return nil, fmt.Errorf("artifact store %q: no scheme; use file:///path or s3://bucket/prefix (linked: %s)",
			rawURL, strings.Join(known, ", "))
	}
	return nil, fmt.Errorf("artifact store %q: unknown scheme %q; use file:///path or s3://bucket/prefix (linked: %s)",
		rawURL, u.Scheme, strings.Join(known, ", "))
}
