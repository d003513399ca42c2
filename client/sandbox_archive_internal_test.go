package client

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
)

// A local tree written by writeTar and read back by extractTar is the
// same tree (files with their modes, a subdirectory, a symbolic link); a
// single file keeps its name.
func TestTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(src, "sub", "data"), []byte("data"), 0o600))
	must(os.Symlink("sub/data", filepath.Join(src, "link")))
	fi, err := os.Lstat(src)
	must(err)
	var b bytes.Buffer
	must(writeTar(&b, src, fi))
	// As the engine sends a directory: entries under its base name.
	var renamed bytes.Buffer
	tr, tw := tar.NewReader(&b), tar.NewWriter(&renamed)
	must(tw.WriteHeader(&tar.Header{Name: "repo/", Typeflag: tar.TypeDir, Mode: 0o755}))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(err)
		h.Name = "repo/" + h.Name
		must(tw.WriteHeader(h))
		_, err = io.Copy(tw, tr)
		must(err)
	}
	must(tw.Close())
	dst := t.TempDir()
	root, err := os.OpenRoot(dst)
	must(err)
	defer root.Close()
	must(extractTar(&renamed, root, "repo"))
	for name, want := range map[string]string{"run.sh": "#!/bin/sh\n", "sub/data": "data", "link": "data"} {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	if st, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("run.sh mode: %v, %v; want 0755", st.Mode(), err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "link")); err != nil || l != "sub/data" {
		t.Errorf("link: %q, %v; want a symbolic link to sub/data", l, err)
	}

	// A single file keeps its name.
	one := filepath.Join(src, "run.sh")
	fi, err = os.Lstat(one)
	must(err)
	b.Reset()
	must(writeTar(&b, one, fi))
	dst2 := t.TempDir()
	root2, err := os.OpenRoot(dst2)
	must(err)
	defer root2.Close()
	must(extractTar(&b, root2, "run.sh"))
	if got, err := os.ReadFile(filepath.Join(dst2, "run.sh")); err != nil || string(got) != "#!/bin/sh\n" {
		t.Errorf("single file: %q, %v", got, err)
	}
}

// extractTar writes nothing outside its root: a name with "..", and a
// file written through a symbolic link that points out, are refused; so
// are devices.
func TestExtractTarStaysInside(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		want    string
	}{
		{"dot dot", []tar.Header{{Name: "d/../../evil", Typeflag: tar.TypeReg}}, "leaves"},
		{"through a link", []tar.Header{{Name: "d/esc", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "d/esc/evil", Typeflag: tar.TypeReg}}, "escapes"},
		{"device", []tar.Header{{Name: "d/dev", Typeflag: tar.TypeChar}}, "tar type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			for _, h := range tc.entries {
				h.Mode = 0o644
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			tw.Close()
			dst := t.TempDir()
			root, err := os.OpenRoot(dst)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			err = extractTar(&b, root, "d")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("extractTar: %v; want an error saying %q", err, tc.want)
			}
			if tc.name != "through a link" && !errors.Is(err, errs.ErrInvalidArgument) {
				t.Fatalf("extractTar: %v; want InvalidArgument", err)
			}
			if _, err := os.Stat(filepath.Join(outside, "evil")); err == nil {
				t.Fatal("a file was written through the link, outside the root")
			}
		})
	}
}
