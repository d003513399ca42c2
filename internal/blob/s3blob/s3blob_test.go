package s3blob_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/blob/blobtest"
	"github.com/megaflow/megaflow/internal/blob/s3blob"
	"github.com/megaflow/megaflow/internal/blob/s3blob/s3fake"
)

// testOpts keep retries short so an unavailable server is reported fast.
var testOpts = s3blob.Options{AccessKeyID: "test", SecretAccessKey: "test", PartSize: s3blob.MinPartSize,
	MaxAttempts: 2, MaxBackoff: 1}

func newServer(t *testing.T) *s3fake.Server {
	t.Helper()
	srv, err := s3fake.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func open(t *testing.T, srv *s3fake.Server, prefix string) *s3blob.Store {
	t.Helper()
	s, err := blob.Open(context.Background(), srv.StoreURL("bkt", prefix), s3blob.Backend(testOpts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*s3blob.Store)
}

func TestContract(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return open(t, newServer(t), "artifacts") })
}

func TestContractNoPrefix(t *testing.T) {
	srv := newServer(t)
	s := open(t, srv, "")
	blobtest.Put(t, s, "a/b", []byte("x"))
	if got := blobtest.Keys(t, s, ""); !slices.Equal(got, []string{"a/b"}) {
		t.Fatalf("List = %q", got)
	}
}

func countRequests(srv *s3fake.Server, substr string) int {
	n := 0
	for _, r := range srv.Requests() {
		if strings.Contains(r, substr) {
			n++
		}
	}
	return n
}

func TestMultipartUpload(t *testing.T) {
	srv := newServer(t)
	s := open(t, srv, "p")
	body := blobtest.Bytes(9, 2*int(s3blob.MinPartSize)+1000) // three parts
	blobtest.Put(t, s, "t/g/x/1/out.bin", body)
	if n := countRequests(srv, "uploads="); n != 1 {
		t.Errorf("%d CreateMultipartUpload requests, want 1", n)
	}
	if n := countRequests(srv, "partNumber="); n != 3 {
		t.Errorf("%d UploadPart requests, want 3", n)
	}
	got, in := blobtest.Get(t, s, "t/g/x/1/out.bin")
	if !bytes.Equal(got, body) || in.SHA256 != blobtest.Sum(body) {
		t.Fatalf("Get after multipart: %d bytes, sha256 %q", len(got), in.SHA256)
	}

	// Wrong content: the last part never completes and the upload is
	// aborted, so no object and no parts remain.
	_, err := s.Put(context.Background(), "t/g/x/1/bad.bin", bytes.NewReader(body),
		blob.PutOptions{Size: -1, SHA256: blobtest.Sum([]byte("other"))})
	if !errors.Is(err, blob.ErrChecksum) {
		t.Fatalf("multipart Put with a wrong checksum: %v, want ErrChecksum", err)
	}
	if n := countRequests(srv, "DELETE /bkt/p/t/g/x/1/bad.bin?uploadId="); n != 1 {
		t.Errorf("%d AbortMultipartUpload requests, want 1: %q", n, srv.Requests())
	}
	if _, err := s.Stat(context.Background(), "t/g/x/1/bad.bin"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Stat after the refused upload: %v, want ErrNotFound", err)
	}
}

func TestCorruptionOnServerDetected(t *testing.T) {
	srv := newServer(t)
	s := open(t, srv, "p")
	blobtest.Put(t, s, "k", []byte("good bytes"))
	if err := srv.Corrupt("bkt", "p/k", []byte("evil bytes")); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Get(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); !errors.Is(err, blob.ErrChecksum) {
		t.Fatalf("reading an object corrupted on the server: %q, %v; want ErrChecksum", buf.String(), err)
	}
}

func TestServerChecksumErrorMapped(t *testing.T) {
	srv := newServer(t)
	s := open(t, srv, "p")
	srv.SetHook(func(r *http.Request) (int, string) {
		if r.Method == http.MethodPut {
			return http.StatusBadRequest, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>BadDigest</Code><Message>The Content-MD5 you specified did not match what we received.</Message></Error>`
		}
		return 0, ""
	})
	_, err := s.Put(context.Background(), "k", strings.NewReader("x"), blob.PutOptions{Size: 1})
	if !errors.Is(err, blob.ErrChecksum) {
		t.Fatalf("Put answered BadDigest: %v, want ErrChecksum", err)
	}
}

func TestServerDownIsUnavailable(t *testing.T) {
	srv := newServer(t)
	s := open(t, srv, "p")
	ctx := context.Background()
	for _, mode := range []s3fake.Mode{s3fake.Unavailable, s3fake.Refuse} {
		srv.SetMode(mode)
		if _, err := s.Put(ctx, "k", strings.NewReader("x"), blob.PutOptions{Size: 1}); !errors.Is(err, blob.ErrUnavailable) {
			t.Errorf("mode %d: Put: %v, want ErrUnavailable", mode, err)
		}
		if _, _, err := s.Get(ctx, "k"); !errors.Is(err, blob.ErrUnavailable) {
			t.Errorf("mode %d: Get: %v, want ErrUnavailable", mode, err)
		}
		if _, err := s.List(ctx, ""); !errors.Is(err, blob.ErrUnavailable) {
			t.Errorf("mode %d: List: %v, want ErrUnavailable", mode, err)
		}
	}
	srv.SetMode(s3fake.Up)
	blobtest.Put(t, s, "k", []byte("x"))
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check of a live bucket: %v", err)
	}
}

func TestMissingBucket(t *testing.T) {
	srv := newServer(t)
	s, err := blob.Open(context.Background(), srv.StoreURL("nobucket", ""), s3blob.Backend(testOpts))
	if err != nil {
		t.Fatal(err)
	}
	err = s.(*s3blob.Store).Check(context.Background())
	if !errors.Is(err, blob.ErrUnavailable) {
		t.Fatalf("Check of a missing bucket: %v, want ErrUnavailable", err)
	}
	_, err = s.Put(context.Background(), "k", strings.NewReader("x"), blob.PutOptions{Size: 1})
	if !errors.Is(err, blob.ErrUnavailable) || !strings.Contains(err.Error(), `bucket "nobucket" does not exist`) {
		t.Fatalf("Put to a missing bucket: %v", err)
	}
}

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	ok := "s3://b/pre/fix?endpoint=http://127.0.0.1:9&region=eu-west-1&path_style=true&part_size=16MiB&concurrency=2&max_attempts=3&max_backoff=2s"
	s, err := blob.Open(ctx, ok, s3blob.Backend(testOpts))
	if err != nil {
		t.Fatalf("Open(%q): %v", ok, err)
	}
	if s.URL() != ok {
		t.Errorf("URL() = %q, want %q", s.URL(), ok)
	}
	for _, tc := range []struct{ url, want string }{
		{"s3://", "no bucket"},
		{"s3://b/../x?endpoint=http://h:1", "invalid key"},
		{"s3://b?endpoint=http://h:1&regoin=x", `unknown parameter "regoin"`},
		{"s3://b?endpoint=http://h:1&secret_key=x", "credentials do not go in the URL"},
		{"s3://AKIA:secret@b?endpoint=http://h:1", "credentials do not go in the URL"},
		{"s3://b?endpoint=http://h:1&part_size=1MiB", "below S3's minimum"},
		{"s3://b?endpoint=http://h:1&part_size=lots", "not a size"},
		{"s3://b?endpoint=h:1", "want http://host:port"},
		{"s3://b?endpoint=http://h:1&path_style=maybe", "path_style"},
	} {
		_, err := blob.Open(ctx, tc.url, s3blob.Backend(testOpts))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v, want an error containing %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") && strings.Contains(tc.url, ":secret@") {
			t.Errorf("Open(%q): the error shows the secret: %v", tc.url, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{{"5242880", 5 << 20, true}, {"5MiB", 5 << 20, true}, {"64KiB", 64 << 10, true}, {"1GiB", 1 << 30, true},
		{"", 0, false}, {"-1", 0, false}, {"5MB", 0, false}, {"MiB", 0, false}} {
		got, err := s3blob.ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v", tc.in, got, err)
		}
	}
}

var _ = url.Parse
