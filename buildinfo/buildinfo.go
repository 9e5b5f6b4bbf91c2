// Package buildinfo owns the identity of the running build: its version, the VCS revision it
// was built from, whether the tree had local changes, and when it was built. `make build`
// stamps these at link time (-ldflags -X, see the Makefile); a plain `go build` or `go install`
// falls back on what the Go toolchain embeds (debug.ReadBuildInfo: the module version, and the
// VCS revision, time and modified flag unless built with -buildvcs=false). What neither source
// knows is reported as unknown, never guessed. `narwhal version`, the narwhal_build_info metric
// and the start-up log line all read Get, so they always agree.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Stamped at link time by `make build`:
//
//	-X github.com/narwhal-router/narwhal/buildinfo.version=$(VERSION)
//	-X github.com/narwhal-router/narwhal/buildinfo.revision=$(REVISION)
//	-X github.com/narwhal-router/narwhal/buildinfo.dirty=true|false
//	-X github.com/narwhal-router/narwhal/buildinfo.buildTime=$(BUILD_TIME)
//
// Empty: not stamped.
var version, revision, dirty, buildTime string

// Unknown is what a field says when neither the link-time stamp nor the toolchain knows it.
const Unknown = "unknown"

// Info is the identity of a build.
type Info struct {
	// Version is the stamped version (git describe), else the module version ("v1.2.3" for a
	// `go install ...@v1.2.3`, "(devel)" for a build from a work tree).
	Version string
	// Revision is the full VCS revision, or Unknown.
	Revision string
	// Modified is "true" when the tree had local changes, "false" when it had none, Unknown
	// when that is not known.
	Modified string
	// BuildTime is when the binary was built (stamped), else the revision's commit time, in
	// RFC 3339; or Unknown.
	BuildTime string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
	// Stamped says the values came from `make build`'s link-time stamp.
	Stamped bool
}

// Get returns the running binary's build identity.
var Get = sync.OnceValue(func() Info {
	info, ok := debug.ReadBuildInfo()
	return resolve(stamp{version, revision, dirty, buildTime}, info, ok)
})

type stamp struct{ version, revision, dirty, buildTime string }

// resolve combines the link-time stamp with the toolchain's build information: a stamped
// value wins, field by field.
func resolve(s stamp, bi *debug.BuildInfo, ok bool) Info {
	out := Info{Version: "(devel)", Revision: Unknown, Modified: Unknown, BuildTime: Unknown, GoVersion: runtime.Version()}
	if ok && bi != nil {
		if bi.Main.Version != "" {
			out.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			out.GoVersion = bi.GoVersion
		}
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision":
				out.Revision = kv.Value
			case "vcs.time":
				out.BuildTime = kv.Value
			case "vcs.modified":
				out.Modified = kv.Value
			}
		}
	}
	set := func(dst *string, v string) {
		if v = strings.TrimSpace(v); v != "" {
			*dst = v
			out.Stamped = true
		}
	}
	set(&out.Version, s.version)
	set(&out.Revision, s.revision)
	set(&out.Modified, s.dirty)
	set(&out.BuildTime, s.buildTime)
	return out
}

// String is the one line `narwhal version` prints, for example
//
//	narwhal v0.4.0-3-g1a2b3c4 revision 1a2b3c4d5e6f… (modified) built 2026-03-01T10:00:00Z go1.26.1
//
// An unstamped build without VCS information says so rather than print a bare "(devel)":
//
//	narwhal (devel) revision unknown built unknown go1.26.1 (no build stamp: build with make build)
func (i Info) String() string {
	var b strings.Builder
	b.WriteString("narwhal ")
	b.WriteString(i.Version)
	b.WriteString(" revision ")
	b.WriteString(i.Revision)
	switch i.Modified {
	case "true":
		b.WriteString(" (modified)")
	case "false":
	default:
		if i.Revision != Unknown {
			b.WriteString(" (modified: unknown)")
		}
	}
	b.WriteString(" built ")
	b.WriteString(i.BuildTime)
	b.WriteString(" ")
	b.WriteString(i.GoVersion)
	if !i.Stamped && i.Revision == Unknown {
		b.WriteString(" (no build stamp: build with make build)")
	}
	return b.String()
}
