// Package version says which build of MegaFlow a binary is: the module
// version, the commit, the build date and the Go version. The Makefile sets
// the first three at link time:
//
//	go build -ldflags "-X github.com/megaflow/megaflow/internal/version.version=v0.5.0
//	  -X github.com/megaflow/megaflow/internal/version.commit=<sha>
//	  -X github.com/megaflow/megaflow/internal/version.date=<RFC 3339 UTC>"
//
// A plain `go build` or `go install` falls back to the build information
// Go embeds (runtime/debug.ReadBuildInfo: the module version, vcs.revision
// and vcs.time when built with VCS stamping). Every binary's --version
// prints Get().String(); heads and workers advertise Get().Short() under
// MetaKey in their gossip Meta and in ClusterStatus / WorkerInfo.
//
// Any package may import it; it imports the standard library only.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by the linker (-X); the only package-level state, read by Get.
var version, commit, date string

// MetaKey is the gossip Meta.Extra key under which heads and workers
// advertise their Info.Short.
const MetaKey = "v"

// Devel is the version of a build that has none: neither -ldflags nor a
// module version (a build inside the repository without the Makefile).
const Devel = "(devel)"

// Info describes one build.
type Info struct {
	// Version is the module version (v0.5.0, or a git describe such as
	// v0.5.0-3-gabc1234), Devel when unknown.
	Version string `json:"version"`
	// Commit is the full commit hash; empty when unknown.
	Commit string `json:"commit,omitempty"`
	// Modified is true when the build's tree had uncommitted changes (as
	// far as the VCS stamp says).
	Modified bool `json:"modified,omitempty"`
	// Date is the build date, RFC 3339 UTC; empty when unknown.
	Date string `json:"date,omitempty"`
	// Go is the toolchain version, e.g. go1.26.8.
	Go string `json:"go"`
}

// Get returns this binary's Info: what the linker set, completed from the
// embedded build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return from(bi, version, commit, date)
}

// from builds the Info of linker values over build information (bi may
// be nil).
func from(bi *debug.BuildInfo, ldVersion, ldCommit, ldDate string) Info {
	i := Info{Version: ldVersion, Commit: ldCommit, Date: ldDate, Go: runtime.Version(),
		Modified: strings.HasSuffix(ldVersion, "-dirty")}
	if bi == nil {
		bi = &debug.BuildInfo{}
	}
	if bi.GoVersion != "" {
		i.Go = bi.GoVersion
	}
	if i.Version == "" {
		i.Version = bi.Main.Version
	}
	if i.Version == "" {
		i.Version = Devel
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if i.Commit == "" {
				i.Commit = s.Value
			}
		case "vcs.time":
			if i.Date == "" {
				i.Date = s.Value
			}
		case "vcs.modified":
			i.Modified = i.Modified || s.Value == "true"
		}
	}
	return i
}

// Short is the version as heads and workers advertise it: Version, with
// the commit's first 12 digits when Version is Devel (two devel builds
// are then told apart), e.g. "v0.5.0" or "(devel)+1a2b3c4d5e6f".
func (i Info) Short() string {
	if i.Version == Devel && i.Commit != "" {
		return i.Version + "+" + shortCommit(i.Commit)
	}
	return i.Version
}

// String is what --version prints after the program's name:
// "v0.5.0 (commit 1a2b3c4d5e6f, built 2026-12-01T10:00:00Z, go1.26.8)".
func (i Info) String() string {
	parts := []string{}
	if i.Commit != "" {
		c := "commit " + shortCommit(i.Commit)
		if i.Modified && !strings.HasSuffix(i.Version, "-dirty") {
			c += " with local changes"
		}
		parts = append(parts, c)
	}
	if i.Date != "" {
		parts = append(parts, "built "+i.Date)
	}
	parts = append(parts, i.Go)
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(parts, ", "))
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
