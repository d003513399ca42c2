package blob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/megaflow/megaflow/internal/blob"
)

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestValidKeyAndPrefix(t *testing.T) {
	cases := []struct {
		s           string
		key, prefix bool
	}{
		{"t/g/task/1/stdout", true, true},
		{"a", true, true},
		{"", false, true},
		{"t/g/", false, true},
		{"t/g/ta", true, true},
		{"/abs", false, false},
		{"../x", false, false},
		{"a/../b", false, false},
		{"a//b", false, false},
		{"a/./b", false, false},
		{"a\\b", false, false},
		{"a/b\\", false, false},
		{"a\x00", false, false},
		{strings.Repeat("x", blob.MaxKeyBytes), true, true},
		{strings.Repeat("x", blob.MaxKeyBytes+1), false, true},
	}
	for _, tc := range cases {
		if err := blob.ValidKey(tc.s); (err == nil) != tc.key || (err != nil && !errors.Is(err, blob.ErrInvalidKey)) {
			t.Errorf("ValidKey(%q) = %v, want valid=%v", tc.s, err, tc.key)
		}
		if err := blob.ValidPrefix(tc.s); (err == nil) != tc.prefix || (err != nil && !errors.Is(err, blob.ErrInvalidKey)) {
			t.Errorf("ValidPrefix(%q) = %v, want valid=%v", tc.s, err, tc.prefix)
		}
	}
}

// cut records how much of a reader's content a consumer received.
func readAllFrom(r io.Reader, chunk int) ([]byte, error) {
	var out []byte
	buf := make([]byte, chunk)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func TestVerifyingReader(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80,000 bytes: more than one internal buffer
	wrappers := map[string]func(io.Reader) io.Reader{
		"plain":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	cases := []struct {
		name    string
		content []byte
		want    string
		size    int64
		ok      bool
	}{
		{"good", body, sum(body), int64(len(body)), true},
		{"good, size unknown", body, sum(body), -1, true},
		{"no checksum", body, "", -1, true},
		{"empty", nil, blob.EmptySHA256, 0, true},
		{"one byte", []byte("x"), sum([]byte("x")), 1, true},
		{"wrong sum", body, sum([]byte("no")), -1, false},
		{"short", body, "", int64(len(body)) + 1, false},
		{"long", body, "", int64(len(body)) - 1, false},
		{"empty, wrong sum", nil, sum([]byte("x")), -1, false},
	}
	for wname, wrap := range wrappers {
		for _, chunk := range []int{1, 7, 32 << 10, 100 << 10} {
			for _, tc := range cases {
				v := blob.NewVerifyingReader(wrap(bytes.NewReader(tc.content)), tc.want, tc.size, "test")
				got, err := readAllFrom(v, chunk)
				if tc.ok {
					if err != nil || !bytes.Equal(got, tc.content) || v.Sum() != sum(tc.content) || v.N() != int64(len(tc.content)) {
						t.Errorf("%s/%d/%s: %d bytes, %v; want all %d bytes", wname, chunk, tc.name, len(got), err, len(tc.content))
					}
					continue
				}
				if !errors.Is(err, blob.ErrChecksum) {
					t.Errorf("%s/%d/%s: %v, want ErrChecksum", wname, chunk, tc.name, err)
				}
				// The consumer never receives the whole content of a bad
				// stream: that is what keeps a bad upload from completing.
				if len(tc.content) > 0 && len(got) >= len(tc.content) {
					t.Errorf("%s/%d/%s: delivered all %d bytes before failing", wname, chunk, tc.name, len(got))
				}
			}
		}
	}
}

func TestVerifyingReaderPassesErrors(t *testing.T) {
	boom := errors.New("disk on fire")
	v := blob.NewVerifyingReader(iotest.TimeoutReader(strings.NewReader(strings.Repeat("x", 100))), "", -1, "test")
	_, err := readAllFrom(v, 10)
	if !errors.Is(err, iotest.ErrTimeout) {
		t.Fatalf("got %v, want the underlying error", err)
	}
	v = blob.NewVerifyingReader(iotest.ErrReader(boom), "", -1, "test")
	if _, err := readAllFrom(v, 10); !errors.Is(err, boom) {
		t.Fatalf("got %v, want %v", err, boom)
	}
}

func TestValidSHA256(t *testing.T) {
	for s, ok := range map[string]bool{blob.EmptySHA256: true, strings.ToUpper(blob.EmptySHA256): false, "abc": false, "": false,
		strings.Repeat("g", 64): false} {
		if err := blob.ValidSHA256(s); (err == nil) != ok {
			t.Errorf("ValidSHA256(%q) = %v, want ok=%v", s, err, ok)
		}
	}
}

func TestOpenPicksBackendByScheme(t *testing.T) {
	var got string
	b := func(scheme string) blob.Backend {
		return blob.Backend{Scheme: scheme, Open: func(_ context.Context, u *url.URL) (blob.Store, error) {
			got = scheme + " " + u.Host + u.Path
			return nil, nil
		}}
	}
	ctx := context.Background()
	for in, want := range map[string]string{"file:///x/y": "file /x/y", "/x/y": "file /x/y", "S3://bkt/p": "s3 bkt/p"} {
		got = ""
		if _, err := blob.Open(ctx, in, b("file"), b("s3")); err != nil || got != want {
			t.Errorf("Open(%q) opened %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := blob.Open(ctx, "s4://x", b("file"), b("s3"))
	if want := `artifact store "s4://x": unknown scheme "s4"; use file:///path or s3://bucket/prefix (linked: file://, s3://)`; err == nil || err.Error() != want {
		t.Errorf("Open(s4://x): %v\nwant %s", err, want)
	}
}
