// Command megaflow-release builds MegaFlow's Debian packages from built
// binaries, with nFPM as a library (`make release` runs it for amd64 and
// arm64):
//
//	megaflow-release --release-version v1.2.0 --arch amd64 --bin-dir bin --out-dir dist
//
// Three packages:
//
//   - megaflow: the CLI (/usr/bin/megaflow).
//   - megaflow-head: the head daemon, its systemd unit and
//     /etc/megaflow/head.yaml (a conffile).
//   - megaflow-worker: the worker daemon and megaflow-init (the init of
//     every task it starts; worker.yaml's init-path points at
//     /usr/bin/megaflow-init), its unit and /etc/megaflow/worker.yaml.
//     Docker is recommended, not required: the process runtime needs none.
//
// The daemons' postinst creates the megaflow system user and
// /var/lib/megaflow; nothing is enabled or started on install
// (docs/operations.md, "Installing from packages"). The demo's programs
// (megaflow-agent, megaflow-model, megaflow-sh) are only in the tarballs.
//
// Only this command links nFPM: internal/deptest keeps it out of the
// daemons and the client library.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/megaflow/megaflow/internal/version"
)

// Package is one Debian package: binaries from the bin directory and files
// from the source tree (paths relative to its root).
type Package struct {
	Name        string
	Description string
	Bins        []string          // installed to /usr/bin
	Units       []string          // deploy/systemd/<unit>, installed to /lib/systemd/system
	Configs     map[string]string // source -> /etc/megaflow/..., conffiles
	Depends     []string
	// DependsAMD64 is added on amd64 only: the worker links NVML through
	// cgo there (dynamically, against glibc; make build), statically
	// without cgo on arm64.
	DependsAMD64 []string
	Recommends   []string
	PostInst     string // source tree path
	PreRm        string
}

// Packages lists what megaflow-release builds.
func Packages() []Package {
	return []Package{
		{
			Name:        "megaflow",
			Description: "MegaFlow command-line client\n The megaflow CLI: submits graphs, watches tasks and administers a MegaFlow cluster.",
			Bins:        []string{"megaflow"},
		},
		{
			Name:        "megaflow-head",
			Description: "MegaFlow head daemon\n One head of a MegaFlow cluster (Raft member, scheduler, API), run by systemd.",
			Bins:        []string{"megaflow-head"},
			Units:       []string{"megaflow-head.service"},
			Configs:     map[string]string{"deploy/config/head.yaml": "/etc/megaflow/head.yaml"},
			Depends:     []string{"adduser"},
			Recommends:  []string{"megaflow"},
			PostInst:    "deploy/debian/megaflow-head.postinst",
			PreRm:       "deploy/debian/megaflow-head.prerm",
		},
		{
			Name:         "megaflow-worker",
			Description:  "MegaFlow worker daemon\n Runs a MegaFlow cluster's tasks in Docker containers or as processes, run by systemd.",
			Bins:         []string{"megaflow-worker", "megaflow-init"},
			Units:        []string{"megaflow-worker.service"},
			Configs:      map[string]string{"deploy/config/worker.yaml": "/etc/megaflow/worker.yaml"},
			Depends:      []string{"adduser"},
			DependsAMD64: []string{"libc6 (>= 2.34)"},
			Recommends:   []string{"docker.io | docker-ce", "megaflow"},
			PostInst:     "deploy/debian/megaflow-worker.postinst",
			PreRm:        "deploy/debian/megaflow-worker.prerm",
		},
	}
}

// Options say what to build from where.
type Options struct {
	Version    string // v1.2.3, v1.2.3-4-gabcdef0-dirty (git describe)
	Arch       string // amd64 or arm64
	BinDir     string // the built binaries
	SrcDir     string // the source tree's root (units, configs, scripts)
	OutDir     string
	Maintainer string
}

// Build writes every package's .deb into o.OutDir and returns their paths.
func Build(o Options) ([]string, error) {
	if o.Arch != "amd64" && o.Arch != "arm64" {
		return nil, fmt.Errorf("--arch %q: amd64 or arm64", o.Arch)
	}
	if o.Version == "" {
		return nil, fmt.Errorf("--release-version is required")
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range Packages() {
		path, err := buildDeb(o, p)
		if err != nil {
			return out, fmt.Errorf("%s: %w", p.Name, err)
		}
		out = append(out, path)
	}
	return out, nil
}

func buildDeb(o Options, p Package) (string, error) {
	src := func(rel string) string { return filepath.Join(o.SrcDir, filepath.FromSlash(rel)) }
	var contents files.Contents
	for _, b := range p.Bins {
		bin := filepath.Join(o.BinDir, b)
		if _, err := os.Stat(bin); err != nil {
			return "", err
		}
		contents = append(contents, &files.Content{Source: bin, Destination: "/usr/bin/" + b,
			FileInfo: &files.ContentFileInfo{Mode: 0o755}})
	}
	for _, u := range p.Units {
		contents = append(contents, &files.Content{Source: src("deploy/systemd/" + u), Destination: "/lib/systemd/system/" + u,
			FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	}
	for from, to := range p.Configs {
		contents = append(contents, &files.Content{Source: src(from), Destination: to, Type: files.TypeConfig,
			FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	}
	contents = append(contents, &files.Content{Source: src("README.md"), Destination: "/usr/share/doc/" + p.Name + "/README.md",
		FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	if _, err := os.Stat(src("LICENSE")); err == nil {
		contents = append(contents, &files.Content{Source: src("LICENSE"), Destination: "/usr/share/doc/" + p.Name + "/copyright",
			FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	}
	depends := p.Depends
	if o.Arch == "amd64" {
		depends = append(slices.Clone(depends), p.DependsAMD64...)
	}
	info := &nfpm.Info{
		Name:        p.Name,
		Arch:        o.Arch,
		Platform:    "linux",
		Version:     DebVersion(o.Version),
		Section:     "admin",
		Priority:    "optional",
		Maintainer:  o.Maintainer,
		Description: p.Description,
		Homepage:    "https://github.com/megaflow/megaflow",
		Overridables: nfpm.Overridables{
			Depends:    depends,
			Recommends: p.Recommends,
			Contents:   contents,
			Scripts:    nfpm.Scripts{},
		},
	}
	if p.PostInst != "" {
		info.Scripts.PostInstall = src(p.PostInst)
	}
	if p.PreRm != "" {
		info.Scripts.PreRemove = src(p.PreRm)
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", err
	}
	path := filepath.Join(o.OutDir, deb.Default.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	return path, f.Close()
}

// describe matches what `git describe --tags --dirty` adds after a tag:
// commits since it, the commit, a dirty tree.
var describe = regexp.MustCompile(`^(.*)-([0-9]+)-g([0-9a-f]+)(-dirty)?$`)

// DebVersion turns the Makefile's VERSION (git describe) into a semantic
// version whose Debian form sorts right: v1.2.3-4-gabcdef0 is 1.2.3+4.gabcdef0
// (after 1.2.3; nFPM would make the -4-gabcdef0 a pre-release, 1.2.3~4...,
// which sorts before it), v1.2.3-rc1 stays 1.2.3~rc1, v1.2.3-dirty is
// 1.2.3+dirty.
func DebVersion(v string) string {
	if m := describe.FindStringSubmatch(v); m != nil {
		meta := m[2] + ".g" + m[3]
		if m[4] != "" {
			meta += ".dirty"
		}
		return m[1] + "+" + meta
	}
	if base, ok := strings.CutSuffix(v, "-dirty"); ok {
		return base + "+dirty"
	}
	return v
}

func main() {
	var o Options
	flag.StringVar(&o.Version, "release-version", "", "the release's version (git describe: v1.2.3, v1.2.3-4-gabcdef0)")
	showVersion := flag.Bool("version", false, "print this program's build and exit")
	flag.StringVar(&o.Arch, "arch", "amd64", "target architecture: amd64 or arm64")
	flag.StringVar(&o.BinDir, "bin-dir", "bin", "directory of the built binaries for --arch")
	flag.StringVar(&o.SrcDir, "src-dir", ".", "the source tree's root (deploy/systemd, deploy/config, deploy/debian, README.md)")
	flag.StringVar(&o.OutDir, "out-dir", "dist", "where the .deb files go")
	flag.StringVar(&o.Maintainer, "maintainer", "MegaFlow maintainers <maintainers@megaflow.invalid>", "the packages' Maintainer field")
	flag.Parse()
	if *showVersion {
		fmt.Println("megaflow-release", version.Get())
		return
	}
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "megaflow-release: unexpected arguments %s\n", strings.Join(flag.Args(), " "))
		os.Exit(2)
	}
	paths, err := Build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "megaflow-release:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
}
