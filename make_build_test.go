package main

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/internal/testwait"
)

// TestMakeBuildStampsTheBuild builds the binary as an operator does, with `make build`, and
// checks that the build names itself the same way everywhere: `narwhal version`, `--version`,
// the start-up log line and narwhal_build_info. VERSION and BUILD_TIME are given on the make
// command line (as a release or image build would); REVISION and DIRTY come from the Makefile's
// own defaults, which read the git checkout.
func TestMakeBuildStampsTheBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not a git checkout: the Makefile's REVISION default has nothing to read")
	}
	revision := strings.TrimSpace(string(rev))
	status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "narwhal")
	const version, built = "v9.8.7-test", "2026-01-02T03:04:05Z"
	if out, err := exec.Command(mk, "--no-print-directory", "build", "BIN="+bin, "VERSION="+version, "BUILD_TIME="+built).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	modified := ""
	if len(strings.TrimSpace(string(status))) > 0 {
		modified = " (modified)"
	}
	want := "narwhal " + version + " revision " + revision + modified + " built " + built + " " + runtime.Version() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("narwhal %v: %v\n%s", args, err, out)
		}
		if string(out) != want {
			t.Errorf("narwhal %v printed %q, want %q", args, out, want)
		}
	}

	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Models: []string{"m"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	_, admin, line := serveBinary(t, bin, fleet, "")
	for _, kv := range []string{"version=" + version, "revision=" + revision, "built=" + built} {
		if !strings.Contains(line, " "+kv) {
			t.Errorf("the start-up line does not say %s: %s", kv, line)
		}
	}
	// Gauges reach the scrape at the first flush (metrics.statsd.flush_interval_s, else 1 s).
	buildInfo := regexp.MustCompile(`(?m)^narwhal_build_info\{(.*)\} 1$`)
	var info [][]byte
	var scrape []byte
	testwait.UntilEvery(t, 10*time.Second, 100*time.Millisecond, func() bool {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		scrape, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		info = buildInfo.FindSubmatch(scrape)
		return info != nil
	}, func() string { return fmt.Sprintf("no narwhal_build_info 1 in the scrape:\n%s", scrape) })
	for _, l := range []string{`version="` + version + `"`, `revision="` + revision + `"`, `goversion="` + runtime.Version() + `"`} {
		if !strings.Contains(string(info[1]), l) {
			t.Errorf("narwhal_build_info{%s}: no %s", info[1], l)
		}
	}
}
