// Package testimage builds the small images MegaFlow's tests run in
// containers, with no registry: a FROM scratch image holding Debian's static
// busybox (/bin/busybox and one symlink per applet, so sh -c, sleep, echo,
// cat, dd, head, tr ... work) plus any files a test adds (a static Go binary
// of ours, say). It builds through the Docker Engine API with a tar context
// made in Go, and skips the build when the tag already holds the same
// content. It also owns the helpers tests use to reach the engine and to
// clean up the containers they create (labelled megaflow.test=1).
//
// Only tests import it (runtime/docker's and, later, worker/'s); it is not
// linked into any binary.
package testimage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
)

const (
	// DefaultTag is the tag Require builds and returns.
	DefaultTag = "megaflow-test/busybox:1"
	// DefaultBusybox is where Debian's busybox-static package installs the
	// static binary the image is made of.
	DefaultBusybox = "/bin/busybox"
	// HashLabel is the image label holding the sha256 of the build context;
	// Build skips building when the tag's image carries the same value.
	HashLabel = "megaflow.testimage.hash"
)

// Image describes a test image to build.
type Image struct {
	// Tag names the image, e.g. "megaflow-test/busybox:1". Required.
	Tag string
	// Busybox is the host path of a statically linked busybox; "" means
	// DefaultBusybox. It is copied to /bin/busybox in the image, with one
	// symlink in /bin per applet it lists.
	Busybox string
	// Files are extra files by absolute path in the image (for example
	// "/bin/megaflow-probe"), written with mode 0755; they replace busybox
	// applet links of the same path.
	Files map[string][]byte
}

// Build builds the busybox test image under tag through cli, or does
// nothing when tag already names an image built from the same content.
// Callers are tests and benchmarks, usually through Require. Errors name
// what failed: the busybox binary missing, the engine unreachable, or the
// build's own error message.
func Build(ctx context.Context, cli *client.Client, tag string) error {
	return BuildImage(ctx, cli, Image{Tag: tag})
}

// BuildImage builds img through cli, idempotently: when img.Tag already
// names an image whose HashLabel equals the hash of img's build context, it
// returns at once. The build uses the classic builder (no BuildKit session
// and no registry: the Dockerfile is FROM scratch with one COPY).
func BuildImage(ctx context.Context, cli *client.Client, img Image) error {
	if img.Tag == "" {
		return errors.New("testimage: Image.Tag is empty")
	}
	tarball, hash, err := buildContext(img)
	if err != nil {
		return err
	}
	if have, err := cli.ImageInspect(ctx, img.Tag); err == nil {
		if have.Config != nil && have.Config.Labels[HashLabel] == hash {
			return nil
		}
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("testimage: inspect %s: %w", img.Tag, err)
	}
	res, err := cli.ImageBuild(ctx, bytes.NewReader(tarball), client.ImageBuildOptions{
		Tags:        []string{img.Tag},
		Labels:      map[string]string{HashLabel: hash},
		Remove:      true,
		ForceRemove: true,
		NetworkMode: "none",
		Version:     build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("testimage: build %s: %w", img.Tag, err)
	}
	defer res.Body.Close()
	return buildResult(img.Tag, res.Body)
}

// buildResult reads the build's JSON message stream to its end and returns
// the first error message in it.
func buildResult(tag string, body io.Reader) error {
	dec := json.NewDecoder(bufio.NewReader(body))
	var tail []string
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("testimage: build %s: reading the build output: %w", tag, err)
		}
		if s := strings.TrimSpace(msg.Stream); s != "" {
			tail = append(tail, s)
			if len(tail) > 5 {
				tail = tail[1:]
			}
		}
		if msg.Error != "" {
			return fmt.Errorf("testimage: build %s: %s (last output: %s)", tag, msg.Error, strings.Join(tail, " | "))
		}
	}
}

// buildContext returns the tar build context for img and its content hash.
// The tar is deterministic (sorted entries, fixed times and owners), so the
// hash changes only when the content does.
func buildContext(img Image) ([]byte, string, error) {
	bbPath := img.Busybox
	if bbPath == "" {
		bbPath = DefaultBusybox
	}
	bb, err := os.ReadFile(bbPath)
	if err != nil {
		return nil, "", fmt.Errorf("testimage: read busybox (on Debian: apt-get install busybox-static): %w", err)
	}
	applets, err := appletList(bbPath)
	if err != nil {
		return nil, "", err
	}

	type entry struct {
		name string
		typ  byte
		mode int64
		data []byte
		link string
	}
	entries := map[string]entry{
		"rootfs/bin":         {typ: tar.TypeDir, mode: 0o755},
		"rootfs/tmp":         {typ: tar.TypeDir, mode: 0o1777},
		"rootfs/etc":         {typ: tar.TypeDir, mode: 0o755},
		"rootfs/bin/busybox": {typ: tar.TypeReg, mode: 0o755, data: bb},
		"rootfs/etc/passwd":  {typ: tar.TypeReg, mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		"rootfs/etc/group":   {typ: tar.TypeReg, mode: 0o644, data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		"Dockerfile":         {typ: tar.TypeReg, mode: 0o644, data: []byte("FROM scratch\nCOPY rootfs/ /\nCMD [\"/bin/sh\"]\n")},
		"rootfs/root":        {typ: tar.TypeDir, mode: 0o700},
		"rootfs/usr":         {typ: tar.TypeDir, mode: 0o755},
		"rootfs/usr/bin":     {typ: tar.TypeDir, mode: 0o755},
		"rootfs/usr/bin/env": {typ: tar.TypeSymlink, mode: 0o777, link: "/bin/busybox"},
	}
	for _, a := range applets {
		if a == "busybox" {
			continue
		}
		entries["rootfs/bin/"+a] = entry{typ: tar.TypeSymlink, mode: 0o777, link: "busybox"}
	}
	for p, data := range img.Files {
		clean := path.Clean("/" + p)
		if clean == "/" || strings.HasSuffix(p, "/") {
			return nil, "", fmt.Errorf("testimage: file path %q is not a file path", p)
		}
		for dir := path.Dir(clean); dir != "/"; dir = path.Dir(dir) {
			if e, ok := entries["rootfs"+dir]; !ok {
				entries["rootfs"+dir] = entry{typ: tar.TypeDir, mode: 0o755}
			} else if e.typ != tar.TypeDir {
				return nil, "", fmt.Errorf("testimage: file %q: %s is a file in the image", p, dir)
			}
		}
		entries["rootfs"+clean] = entry{typ: tar.TypeReg, mode: 0o755, data: data}
	}

	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, n := range names {
		e := entries[n]
		hdr := &tar.Header{Name: n, Typeflag: e.typ, Mode: e.mode, ModTime: epoch, Linkname: e.link, Format: tar.FormatPAX}
		if e.typ == tar.TypeDir {
			hdr.Name += "/"
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, "", fmt.Errorf("testimage: tar %s: %w", n, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, "", fmt.Errorf("testimage: tar %s: %w", n, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", fmt.Errorf("testimage: tar: %w", err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:]), nil
}

// appletList asks the busybox binary (static, so it runs on the host) which
// applets it has.
func appletList(bbPath string) ([]string, error) {
	out, err := exec.Command(bbPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("testimage: %s --list: %w", bbPath, err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "" && !strings.ContainsAny(a, "/.") {
			applets = append(applets, a)
		}
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("testimage: %s --list printed no applets", bbPath)
	}
	return applets, nil
}
