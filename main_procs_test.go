package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/internal/testwait"
)

// writeFleetConfig writes a configuration of the server keys given (the inside of its
// {...}), the extra top-level lines given, and every engine of fleet (model m, KV identity
// pinned), and returns its path.
func writeFleetConfig(t *testing.T, fleet *sim.Fleet, server string, extra ...string) string {
	t.Helper()
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "server: {%s}\nlog: {format: text}\n", server)
	for _, l := range extra {
		yaml.WriteString(l + "\n")
	}
	yaml.WriteString("engines:\n")
	for _, e := range fleet.Engines {
		fmt.Fprintf(&yaml, "  - {name: %s, url: %q, role: %s, models: [m], kv: {engine_id: %q, endpoint: %q}}\n",
			e.Name(), e.URL(), e.Role(), e.EngineID(), e.KVEndpoint())
	}
	path := filepath.Join(t.TempDir(), "narwhal.yaml")
	if err := os.WriteFile(path, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveProcess runs `narwhal serve` as a process in front of fleet with the extra server keys
// and environment given, and returns its client and admin addresses. It is killed at cleanup.
func serveProcess(t *testing.T, fleet *sim.Fleet, serverKeys string, env ...string) (addr, admin string) {
	t.Helper()
	addr, admin, _ = serveBinary(t, os.Args[0], fleet, serverKeys, append([]string{"NARWHAL_TEST_MAIN=1"}, env...)...)
	return addr, admin
}

// serveBinary runs bin (a narwhal binary, or this test binary with NARWHAL_TEST_MAIN=1 in env)
// as `narwhal serve` in front of fleet, and returns its client and admin addresses and its
// "narwhal listening" log line. It is killed at cleanup.
func serveBinary(t *testing.T, bin string, fleet *sim.Fleet, serverKeys string, env ...string) (addr, admin, line string) {
	t.Helper()
	path := writeFleetConfig(t, fleet, "listen: \"127.0.0.1:0\", admin_listen: \"127.0.0.1:0\", shutdown_grace_s: 1"+serverKeys)
	cmd := exec.Command(bin, "serve", "--config", path, "--skip-preflight")
	// The test's own GOMAXPROCS, if any, is not passed on: each case sets what it measures.
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	listening := regexp.MustCompile(`msg="narwhal listening" addr=(\S+) admin=(\S+)`)
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- append(m, sc.Text())
			}
		}
		close(found)
	}()
	select {
	case m, ok := <-found:
		if !ok {
			t.Fatal("narwhal serve exited before listening")
		}
		go func() { // keep draining stderr
			for range found {
			}
		}()
		return m[1], m[2], m[3]
	case <-time.After(20 * time.Second):
		t.Fatal("narwhal serve did not start within 20 s")
	}
	return "", "", ""
}

var runtimeProcs = regexp.MustCompile(`(?m)^narwhal_runtime_procs ([0-9.e+]+)$`)

// scrapeProcs reads narwhal_runtime_procs from the admin listener's /metrics (-1: not there).
func scrapeProcs(t *testing.T, admin string) int {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := runtimeProcs.FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return int(v)
}

// waitForProcs polls the gauge every 250 ms: rendering /metrics costs the router a few
// milliseconds of CPU (more in a race build), and polling much faster would be a load of its own.
func waitForProcs(t *testing.T, admin string, want int, within time.Duration, when string) {
	t.Helper()
	var got int
	testwait.UntilEvery(t, within, 250*time.Millisecond, func() bool { got = scrapeProcs(t, admin); return got == want },
		func() string { return fmt.Sprintf("%s: narwhal_runtime_procs %d, want %d", when, got, want) })
}

// server.procs as an operator sees it on /metrics: every CPU by default, a fixed count, a
// GOMAXPROCS environment variable over it, and with auto one CPU while idle, every CPU under
// load and one again after it.
func TestServeSizesTheSchedulerToTheLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	cpus := runtime.NumCPU()
	if cpus < 2 {
		t.Skip("needs at least 2 CPUs")
	}
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Models: []string{"m"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()

	t.Run("default", func(t *testing.T) {
		_, admin := serveProcess(t, fleet, "")
		waitForProcs(t, admin, cpus, 10*time.Second, "server.procs unset")
	})
	t.Run("fixed", func(t *testing.T) {
		_, admin := serveProcess(t, fleet, ", procs: 2")
		waitForProcs(t, admin, 2, 10*time.Second, "server.procs: 2")
	})
	t.Run("environment wins", func(t *testing.T) {
		_, admin := serveProcess(t, fleet, ", procs: auto", "GOMAXPROCS=1")
		waitForProcs(t, admin, 1, 10*time.Second, "GOMAXPROCS=1 with server.procs: auto")
	})
	t.Run("auto", func(t *testing.T) {
		addr, admin := serveProcess(t, fleet, ", procs: auto")
		waitForProcs(t, admin, 1, 10*time.Second, "idle")

		var stop atomic.Bool
		var served atomic.Int64
		var wg sync.WaitGroup
		client := &http.Client{Timeout: 10 * time.Second}
		body := `{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hello there"}]}`
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						served.Add(1)
					}
				}
			}()
		}
		waitForProcs(t, admin, cpus, 20*time.Second, "under load")
		stop.Store(true)
		wg.Wait()
		if served.Load() == 0 {
			t.Fatal("no request succeeded under load")
		}
		waitForProcs(t, admin, 1, 20*time.Second, "after the load")
	})
}
