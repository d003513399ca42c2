// Package s3blob is the blob store in an S3 bucket (URL
// s3://bucket/prefix), through aws-sdk-go-v2: AWS itself, MinIO, Ceph RGW,
// SeaweedFS or any S3 protocol server. Only daemons' composition roots and
// tests import it, so other packages' tests do not link the SDK.
//
// # URLs and configuration
//
//	s3://bucket                          keys at the bucket's top
//	s3://bucket/some/prefix              keys under "some/prefix/"
//	s3://bucket/p?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true
//
// Query parameters (each overrides the same field of Options):
//
//	endpoint      S3 endpoint URL (MinIO, RGW, SeaweedFS); default AWS
//	region        signing region; default from the chain, else us-east-1
//	              when an endpoint is set
//	path_style    true: http://host/bucket/key instead of bucket.host
//	              (most self-hosted servers need it)
//	part_size     multipart part size: bytes, or with KiB, MiB, GiB
//	              (default 8MiB, at least 5MiB, S3's smallest part)
//	concurrency   parts in flight per upload (default 4)
//	max_attempts  tries per request, first included (default 5)
//	max_backoff   longest wait between tries, a Go duration (default 5s)
//
// What is not set by Options or the URL comes from the standard AWS
// configuration chain: AWS_REGION, AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3,
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE
// and ~/.aws/config and credentials, web identity, and on EC2 the instance
// role. Credentials never go in the URL (URL() is logged); give them by the
// chain or by Options (daemon flags).
//
// # Uploads and checksums
//
// Put goes through the SDK's upload manager: content up to one part size
// is one PutObject, larger content a multipart upload with part_size parts,
// aborted on any failure so no partial object or orphan parts remain.
// The SHA-256 of the content is checked on the client as it streams: the
// last byte is held back until the hash matches the caller's (see
// blob.VerifyingReader), so wrong content never completes an upload and the
// key keeps what it had. The SHA-256 is stored as user metadata
// (x-amz-meta-sha256) when the caller gave it, or when the reader is an
// io.ReadSeeker (hashed before sending); Get verifies the bytes it returns
// against it.
//
// The SDK's own "flexible checksums" (CRC32 by default in recent SDKs, sent
// as aws-chunked trailers) are set to "when required": several S3
// compatible servers, gofakes3 among them, do not decode aws-chunked
// trailers and would store the framing as content. Over plain HTTP the SDK
// still signs each request's payload SHA-256 (SigV4), which AWS verifies.
//
// # Errors
//
// 404s map to blob.ErrNotFound; BadDigest, InvalidDigest and
// XAmzContentSHA256Mismatch to blob.ErrChecksum; a canceled context stays
// the context's error; everything else (network, 5xx, throttling after the
// SDK's bounded retries, but also a missing bucket or denied access, which
// an operator can fix) to blob.ErrUnavailable, with the server's message.
//
// List returns sizes and modification times but no SHA-256 or content
// type (S3 lists no metadata); Stat has them.
package s3blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/megaflow/megaflow/internal/blob"
)

// Defaults of Options.
const (
	DefaultPartSize    = 8 << 20
	DefaultConcurrency = 4
	DefaultMaxAttempts = 5
	DefaultMaxBackoff  = 5 * time.Second
	// MinPartSize is S3's smallest part of a multipart upload, in bytes.
	MinPartSize = manager.MinUploadPartSize
	// metaSHA256 is the user metadata key of the content's SHA-256.
	metaSHA256 = "sha256"
)

// Options configure S3 access; zero fields take the URL's query parameter,
// then the AWS configuration chain, then the default.
type Options struct {
	// Endpoint is the S3 endpoint URL ("http://127.0.0.1:9000").
	Endpoint string
	// Region is the signing region ("us-east-1").
	Region string
	// PathStyle addresses buckets as http://host/bucket/key.
	PathStyle bool
	// AccessKeyID, SecretAccessKey and SessionToken are static
	// credentials; all empty means the chain's.
	AccessKeyID, SecretAccessKey, SessionToken string
	// PartSize is the multipart part size in bytes (0: DefaultPartSize; at
	// least MinPartSize). Memory per upload is about PartSize*Concurrency.
	PartSize int64
	// Concurrency is how many parts of one upload are in flight (0:
	// DefaultConcurrency).
	Concurrency int
	// MaxAttempts bounds the SDK's tries per request, first included (0:
	// DefaultMaxAttempts); retries back off exponentially with jitter.
	MaxAttempts int
	// MaxBackoff is the longest wait between tries (0: DefaultMaxBackoff).
	MaxBackoff time.Duration
}

// Store is a blob.Store in an S3 bucket. It is safe for concurrent use.
type Store struct {
	client *s3.Client
	up     *manager.Uploader
	bucket string
	prefix string // "" or ending in "/"
	url    string
}

var _ blob.Store = (*Store)(nil)

// Backend returns the blob.Backend of scheme "s3" for blob.Open, with opts
// as the base the URL's query parameters override.
func Backend(opts Options) blob.Backend {
	return blob.Backend{Scheme: "s3", Open: func(ctx context.Context, u *url.URL) (blob.Store, error) {
		return Open(ctx, u, opts)
	}}
}

// Open returns the store at u (scheme s3). It does not contact the server
// (a store that is down must not stop a daemon from starting; see Check).
// Errors name the bad URL part or option.
func Open(ctx context.Context, u *url.URL, opts Options) (*Store, error) {
	shown := u.Redacted()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("artifact store %q: %s", shown, fmt.Sprintf(format, args...))
	}
	if u.User != nil {
		return nil, bad("credentials do not go in the URL; use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or the daemon's flags")
	}
	if u.Host == "" {
		return nil, bad("no bucket; use s3://bucket/prefix")
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := blob.ValidKey(prefix); err != nil {
			return nil, bad("prefix %q: %v", prefix, err)
		}
		prefix += "/"
	}
	if err := applyQuery(&opts, u.Query()); err != nil {
		return nil, bad("%v", err)
	}
	if opts.PartSize == 0 {
		opts.PartSize = DefaultPartSize
	}
	if opts.PartSize < MinPartSize {
		return nil, bad("part size %d bytes is below S3's minimum of %d (5MiB)", opts.PartSize, MinPartSize)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.Concurrency < 1 || opts.MaxAttempts < 1 || opts.MaxBackoff < 0 {
		return nil, bad("concurrency and max_attempts must be at least 1, max_backoff not negative")
	}
	if (opts.AccessKeyID == "") != (opts.SecretAccessKey == "") {
		return nil, bad("give both an access key id and a secret access key, or neither (to use the AWS chain)")
	}

	load := []func(*config.LoadOptions) error{
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = opts.MaxAttempts
				o.MaxBackoff = opts.MaxBackoff
				// Our callers (the spool) back off on their own; the
				// client-wide retry quota would only turn a long outage
				// into "quota exceeded" errors after it ends.
				o.RateLimiter = ratelimit.None
			})
		}),
	}
	if opts.Region != "" {
		load = append(load, config.WithRegion(opts.Region))
	}
	if opts.AccessKeyID != "" {
		load = append(load, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(opts.AccessKeyID, opts.SecretAccessKey, opts.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, bad("AWS configuration: %v", err)
	}
	if cfg.Region == "" {
		if opts.Endpoint == "" && cfg.BaseEndpoint == nil {
			return nil, bad("no region: add region= to the URL, set AWS_REGION, or name one in ~/.aws/config")
		}
		cfg.Region = "us-east-1" // self-hosted servers mostly ignore it
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		o.UsePathStyle = opts.PathStyle
	})
	up := manager.NewUploader(client, func(u *manager.Uploader) {
		u.PartSize = opts.PartSize
		u.Concurrency = opts.Concurrency
		u.LeavePartsOnError = false
		u.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	})
	return &Store{client: client, up: up, bucket: u.Host, prefix: prefix, url: shown}, nil
}

// applyQuery sets opts from the URL's query parameters.
func applyQuery(opts *Options, q url.Values) error {
	for name, vals := range q {
		v := vals[len(vals)-1]
		var err error
		switch name {
		case "endpoint":
			var eu *url.URL
			if eu, err = url.Parse(v); err == nil && (eu.Scheme != "http" && eu.Scheme != "https" || eu.Host == "") {
				err = fmt.Errorf("want http://host:port or https://host")
			}
			opts.Endpoint = v
		case "region":
			opts.Region = v
		case "path_style":
			opts.PathStyle, err = strconv.ParseBool(v)
		case "part_size":
			opts.PartSize, err = ParseSize(v)
		case "concurrency":
			opts.Concurrency, err = strconv.Atoi(v)
		case "max_attempts":
			opts.MaxAttempts, err = strconv.Atoi(v)
		case "max_backoff":
			opts.MaxBackoff, err = time.ParseDuration(v)
		default:
			if strings.Contains(name, "key") || strings.Contains(name, "secret") || strings.Contains(name, "token") {
				return fmt.Errorf("parameter %q: credentials do not go in the URL; use the AWS chain or the daemon's flags", name)
			}
			return fmt.Errorf("unknown parameter %q; known: endpoint, region, path_style, part_size, concurrency, max_attempts, max_backoff", name)
		}
		if err != nil {
			return fmt.Errorf("parameter %s=%q: %v", name, v, err)
		}
	}
	return nil
}

// ParseSize parses a size in bytes: "5242880", "5MiB", "64KiB", "1GiB".
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("not a size: want bytes, or a number with KiB, MiB or GiB")
	}
	return n * mult, nil
}

// URL returns the URL the store was opened with, without credentials.
func (s *Store) URL() string { return s.url }

// Close releases idle connections.
func (s *Store) Close() error {
	if c, ok := s.client.Options().HTTPClient.(*awshttp.BuildableClient); ok {
		c.GetTransport().CloseIdleConnections()
	}
	return nil
}

// Check asks the server whether the bucket exists and is accessible
// (HeadBucket), for a daemon to report a misconfiguration at startup.
// Errors as the other methods.
func (s *Store) Check(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	if err = s.mapErr("check bucket", "", err); errors.Is(err, blob.ErrNotFound) {
		return fmt.Errorf("s3 check bucket: %w: bucket %q does not exist; create it or fix the store URL", blob.ErrUnavailable, s.bucket)
	}
	return err
}

func (s *Store) full(key string) string { return s.prefix + key }

// mapErr maps an SDK error to the blob error classes (see the package doc).
func (s *Store) mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("s3 %s s3://%s/%s", op, s.bucket, s.full(key))
	switch {
	case errors.Is(err, blob.ErrChecksum), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", where, err)
	}
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return fmt.Errorf("%s: %w", where, blob.ErrNotFound)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("%s: %w", where, blob.ErrNotFound)
		case "BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch":
			return fmt.Errorf("%s: %w: the server says %s", where, blob.ErrChecksum, ae.ErrorMessage())
		case "NoSuchBucket":
			return fmt.Errorf("%s: %w: bucket %q does not exist; create it or fix the store URL", where, blob.ErrUnavailable, s.bucket)
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch":
			return fmt.Errorf("%s: %w: %s (check the credentials and the region)", where, blob.ErrUnavailable, ae.ErrorCode())
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == 404 && key != "" {
		return fmt.Errorf("%s: %w", where, blob.ErrNotFound)
	}
	return fmt.Errorf("%s: %w (%v)", where, blob.ErrUnavailable, err)
}

// ctxReader fails reads once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Put implements blob.Store.Put (see the package doc).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts blob.PutOptions) (blob.Info, error) {
	if err := blob.ValidKey(key); err != nil {
		return blob.Info{}, err
	}
	if opts.SHA256 != "" {
		if err := blob.ValidSHA256(opts.SHA256); err != nil {
			return blob.Info{}, fmt.Errorf("put %q: %w", key, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	sum := opts.SHA256
	if rs, ok := r.(io.ReadSeeker); ok && sum == "" {
		// Hash first so the SHA-256 can go in the metadata.
		start, err := rs.Seek(0, io.SeekCurrent)
		if err == nil {
			vr := blob.NewVerifyingReader(ctxReader{ctx, rs}, "", -1, "")
			if _, err = io.Copy(io.Discard, vr); err == nil {
				sum = vr.Sum()
				_, err = rs.Seek(start, io.SeekStart)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return blob.Info{}, ctx.Err()
			}
			return blob.Info{}, fmt.Errorf("put %q: reading the content: %w", key, err)
		}
	}
	size := opts.Size
	if size < 0 {
		size = -1
	}
	vr := blob.NewVerifyingReader(ctxReader{ctx, r}, sum, size, fmt.Sprintf("key %q", key))
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String(s.full(key)), Body: vr}
	if opts.ContentType != "" {
		in.ContentType = aws.String(opts.ContentType)
	}
	if sum != "" {
		in.Metadata = map[string]string{metaSHA256: sum}
	}
	if _, err := s.up.Upload(ctx, in); err != nil {
		return blob.Info{}, s.mapErr("put", key, err)
	}
	// No HeadObject to read the stored state back: a concurrent Put of the
	// same key may already have replaced it. The bytes sent were checked.
	return blob.Info{Key: key, Size: vr.N(), SHA256: vr.Sum(), ContentType: opts.ContentType, Modified: time.Now()}, nil
}

func info(key string, size *int64, modified *time.Time, ctype *string, meta map[string]string) blob.Info {
	in := blob.Info{Key: key, Size: aws.ToInt64(size), Modified: aws.ToTime(modified), ContentType: aws.ToString(ctype)}
	for k, v := range meta {
		if strings.EqualFold(k, metaSHA256) && blob.ValidSHA256(v) == nil {
			in.SHA256 = v
		}
	}
	return in
}

// Get implements blob.Store.Get; the reader fails with ErrChecksum at the
// end of an object whose bytes do not match its recorded SHA-256, and with
// ErrUnavailable when the connection breaks.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	if err := blob.ValidKey(key); err != nil {
		return nil, blob.Info{}, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.full(key))})
	if err != nil {
		return nil, blob.Info{}, s.mapErr("get", key, err)
	}
	in := info(key, out.ContentLength, out.LastModified, out.ContentType, out.Metadata)
	size := int64(-1)
	if out.ContentLength != nil {
		size = *out.ContentLength
	}
	vr := blob.NewVerifyingReader(out.Body, in.SHA256, size, fmt.Sprintf("key %q", key))
	return &body{s: s, key: key, r: vr, c: out.Body}, in, nil
}

type body struct {
	s   *Store
	key string
	r   io.Reader
	c   io.Closer
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = b.s.mapErr("get", b.key, err)
	}
	return n, err
}

func (b *body) Close() error { return b.c.Close() }

// Stat implements blob.Store.Stat.
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := blob.ValidKey(key); err != nil {
		return blob.Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(s.full(key))})
	if err != nil {
		return blob.Info{}, s.mapErr("stat", key, err)
	}
	return info(key, out.ContentLength, out.LastModified, out.ContentType, out.Metadata), nil
}

// List implements blob.Store.List (no SHA-256 or content type: see the
// package doc).
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	if err := blob.ValidPrefix(prefix); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []blob.Info
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.full(prefix))})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.mapErr("list", prefix, err)
		}
		for _, o := range page.Contents {
			key, ok := strings.CutPrefix(aws.ToString(o.Key), s.prefix)
			if !ok || blob.ValidKey(key) != nil {
				continue // not written through this package
			}
			out = append(out, info(key, o.Size, o.LastModified, nil, nil))
		}
	}
	return out, nil
}

// Delete implements blob.Store.Delete.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidKey(key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.full(key))})
	if err != nil {
		if errors.Is(s.mapErr("delete", key, err), blob.ErrNotFound) {
			return nil
		}
		return s.mapErr("delete", key, err)
	}
	return nil
}

// DeletePrefix implements blob.Store.DeletePrefix with DeleteObjects, 1,000
// keys a request.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	infos, err := s.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	n := 0
	for len(infos) > 0 {
		batch := infos[:min(len(infos), 1000)]
		infos = infos[len(batch):]
		ids := make([]types.ObjectIdentifier, len(batch))
		for i, in := range batch {
			ids[i] = types.ObjectIdentifier{Key: aws.String(s.full(in.Key))}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return n, s.mapErr("delete prefix", prefix, err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return n + len(batch) - len(out.Errors), fmt.Errorf("s3 delete prefix s3://%s/%s: %w: %d keys not deleted, first %q: %s %s",
				s.bucket, s.full(prefix), blob.ErrUnavailable, len(out.Errors), aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
		}
		n += len(batch)
	}
	return n, nil
}
