// Package backends opens an artifact store by URL with every backend
// MegaFlow links: file:///path (internal/blob/fileblob) and
// s3://bucket/prefix (internal/blob/s3blob, aws-sdk-go-v2). Only the
// daemons' composition roots (cmd/megaflow-head, cmd/megaflow-worker) and
// end-to-end tests import it, so other packages do not link the S3 SDK.
package backends

import (
	"context"
	"path/filepath"

	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/blob/fileblob"
	"github.com/megaflow/megaflow/internal/blob/s3blob"
)

// Open opens the store at rawURL; "" opens file://<dataDir>/artifacts,
// the single-machine default. For S3, the endpoint, region and path-style
// addressing come from the URL's query (s3://bucket/prefix?endpoint=
// http://127.0.0.1:9000&region=us-east-1&path_style=true) or the AWS
// configuration chain, credentials from the chain (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, profiles). Errors: blob.Open's.
func Open(ctx context.Context, rawURL, dataDir string) (blob.Store, error) {
	if rawURL == "" {
		dir, err := filepath.Abs(filepath.Join(dataDir, "artifacts"))
		if err != nil {
			return nil, err
		}
		rawURL = dir
	}
	return blob.Open(ctx, rawURL, fileblob.Backend(), s3blob.Backend(s3blob.Options{}))
}
