package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestStampWinsFieldByField(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
		{Key: "vcs.time", Value: "2026-01-01T00:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	got := resolve(stamp{version: "v1.2.3", buildTime: "2026-02-02T02:02:02Z"}, bi, true)
	want := Info{Version: "v1.2.3", Revision: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", Modified: "true",
		BuildTime: "2026-02-02T02:02:02Z", GoVersion: "go1.26.0", Stamped: true}
	if got != want {
		t.Fatalf("resolve = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "narwhal v1.2.3 revision aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa (modified) built 2026-02-02T02:02:02Z go1.26.0" {
		t.Fatalf("String = %q", s)
	}
}

func TestToolchainInformationWithoutAStamp(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.9.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "bbbb"}, {Key: "vcs.time", Value: "2026-01-01T00:00:00Z"}, {Key: "vcs.modified", Value: "false"},
	}}
	got := resolve(stamp{}, bi, true)
	if got.Stamped || got.Version != "v0.9.0" || got.Revision != "bbbb" || got.Modified != "false" || got.BuildTime != "2026-01-01T00:00:00Z" {
		t.Fatalf("resolve = %+v", got)
	}
	if s := got.String(); s != "narwhal v0.9.0 revision bbbb built 2026-01-01T00:00:00Z go1.26.0" {
		t.Fatalf("String = %q", s)
	}
}

// A build with neither a stamp nor VCS information (go build -buildvcs=false, a test binary)
// says what it does not know and how to get a build that knows.
func TestNothingKnownSaysSo(t *testing.T) {
	for _, bi := range []*debug.BuildInfo{nil, {GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}} {
		got := resolve(stamp{}, bi, bi != nil)
		if got.Revision != Unknown || got.Modified != Unknown || got.BuildTime != Unknown || got.Version != "(devel)" || got.Stamped {
			t.Fatalf("resolve = %+v", got)
		}
		if s := got.String(); !strings.HasPrefix(s, "narwhal (devel) revision unknown built unknown go") ||
			!strings.HasSuffix(s, "(no build stamp: build with make build)") {
			t.Fatalf("String = %q", s)
		}
	}
}
