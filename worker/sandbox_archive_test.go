package worker

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
	mfspec "github.com/megaflow/megaflow/internal/spec"
)

type entry struct {
	name, link string
	typ        byte
	data       string
}

func tarOf(t *testing.T, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Size: int64(len(e.data)), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rearchive renames every entry under the directory and refuses entries
// that would leave it, absolute names, and devices, naming the entry.
func TestRearchive(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []entry
		want    string // names and link targets after, or the error's words
		wantErr bool
	}{
		{"files and dirs", []entry{{name: "./", typ: tar.TypeDir}, {name: "a.txt", typ: tar.TypeReg, data: "x"}, {name: "sub/", typ: tar.TypeDir},
			{name: "sub/./b", typ: tar.TypeReg}}, "work/dst/a.txt work/dst/sub work/dst/sub/b", false},
		{"links", []entry{{name: "l", link: "/etc/passwd", typ: tar.TypeSymlink}, {name: "h", link: "sub/b", typ: tar.TypeLink}},
			"work/dst/l->/etc/passwd work/dst/h->work/dst/sub/b", false},
		{"dot dot", []entry{{name: "../evil", typ: tar.TypeReg}}, "leaves the directory", true},
		{"dot dot inside", []entry{{name: "a/../../evil", typ: tar.TypeReg}}, "leaves the directory", true},
		{"absolute", []entry{{name: "/etc/evil", typ: tar.TypeReg}}, "absolute", true},
		{"hard link out", []entry{{name: "h", link: "../../etc/shadow", typ: tar.TypeLink}}, "hard link", true},
		{"device", []entry{{name: "dev", typ: tar.TypeChar}}, "tar type", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := rearchive(bytes.NewReader(tarOf(t, tc.in...)), &out, "/work/dst")
			if tc.wantErr {
				if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("rearchive: %v; want InvalidArgument saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			tr := tar.NewReader(&out)
			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				n := strings.TrimSuffix(h.Name, "/")
				if h.Linkname != "" {
					n += "->" + h.Linkname
				}
				got = append(got, n)
			}
			if strings.Join(got, " ") != tc.want {
				t.Fatalf("entries %q; want %q", strings.Join(got, " "), tc.want)
			}
		})
	}
	// Not a tar stream at all.
	if err := rearchive(strings.NewReader(strings.Repeat("x", 1024)), io.Discard, "/d"); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("rearchive of garbage: %v; want InvalidArgument", err)
	}
	// Over the bound: the chunk reader says so.
	cr := &chunkReader{buf: make([]byte, 10), recv: func() ([]byte, error) { return make([]byte, 10), nil }, limit: 25}
	if _, err := io.Copy(io.Discard, cr); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "over 25 bytes") {
		t.Fatalf("a stream over its bound: %v", err)
	}
}

// TestRearchiveRefusesExpandingEntries: a sparse entry (PAX GNU.sparse
// records) and entries whose declared sizes add up past the archive bound
// are refused before anything of them is written: a few bytes of tar
// could otherwise make the worker write terabytes.
func TestRearchiveRefusesExpandingEntries(t *testing.T) {
	for _, tc := range []struct {
		h    tar.Header
		want bool
	}{
		{tar.Header{PAXRecords: map[string]string{"GNU.sparse.major": "1", "GNU.sparse.minor": "0"}}, true},
		{tar.Header{PAXRecords: map[string]string{"GNU.sparse.realsize": "1099511627776"}}, true},
		{tar.Header{PAXRecords: map[string]string{"mtime": "1"}}, false},
		{tar.Header{}, false},
	} {
		if got := hasSparseRecords(&tc.h); got != tc.want {
			t.Errorf("hasSparseRecords(%v) = %v, want %v", tc.h.PAXRecords, got, tc.want)
		}
	}
	// One header declaring more than the bound (its data never follows:
	// the header alone must be refused).
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: mfspec.SandboxMaxArchive + 1, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := rearchive(bytes.NewReader(buf.Bytes()), &out, "/work/dst")
	if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "add up to over") {
		t.Fatalf("a file declared past the bound: %v; want InvalidArgument", err)
	}
	if out.Len() != 0 {
		t.Fatalf("%d bytes written for a refused entry", out.Len())
	}
}
