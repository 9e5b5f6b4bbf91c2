package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
)

// With NARWHAL_TEST_MAIN=1 the test binary is the narwhal command itself, so a test can run
// `narwhal serve` as a process and signal it, as an operator would.
func TestMain(m *testing.M) {
	if os.Getenv("NARWHAL_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// execute runs the command line args in process and returns its output and error.
func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := rootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := execute(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.HasPrefix(out, "narwhal ") || !strings.Contains(out, "revision ") || !strings.HasSuffix(out, runtime.Version()+"\n") {
			t.Fatalf("%v printed %q, want narwhal <module version> revision <vcs revision> %s", args, out, runtime.Version())
		}
	}
}

func TestStrayArgumentsAreAnError(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "extra-arg"}, {"serve", "--check", "--config", "x.yaml", "extra"}, {"preflight", "x.yaml"},
		{"dump", "tree"}, {"demo", "now"}, {"version", "x"}, {"sim", "fleet", "x"}, {"nonsense"},
	} {
		if _, err := execute(t, args...); err == nil {
			t.Errorf("narwhal %s: accepted", strings.Join(args, " "))
		} else if !strings.Contains(err.Error(), "takes no arguments") && !strings.Contains(err.Error(), "unknown command") {
			t.Errorf("narwhal %s: %v", strings.Join(args, " "), err)
		}
	}
}

func TestServeCheckValidatesAndExits(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("engines:\n  - {name: p0, url: \"http://10.0.0.1:8000\", role: prefill}\n  - {name: d0, url: \"http://10.0.0.2:8000\", role: decode}\n"), 0o644)
	out, err := execute(t, "serve", "--check", "--config", good)
	if err != nil || !strings.Contains(out, "configuration valid (2 engines)") {
		t.Fatalf("valid file: %q, %v", out, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("server: {listen: \":99999\"}\nengines: []\n"), 0o644)
	if _, err := execute(t, "serve", "--check", "--config", bad); err == nil || !strings.Contains(err.Error(), "server.listen") {
		t.Fatalf("invalid file: %v", err)
	}
}

func TestDumpExplainsHowToPassTheToken(t *testing.T) {
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer right" {
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "tree\n")
	}))
	defer admin.Close()
	addr := strings.TrimPrefix(admin.URL, "http://")
	t.Setenv("NARWHAL_ADMIN_TOKEN", "")
	if _, err := execute(t, "dump", "--admin", addr); err == nil || !strings.Contains(err.Error(), "401") ||
		!strings.Contains(err.Error(), "--token or $NARWHAL_ADMIN_TOKEN") {
		t.Fatalf("without a token: %v", err)
	}
	if _, err := execute(t, "dump", "--admin", addr, "--token", "wrong"); err == nil || !strings.Contains(err.Error(), "is not this admin listener's") {
		t.Fatalf("with a wrong token: %v", err)
	}
	t.Setenv("NARWHAL_ADMIN_TOKEN", "right")
	if _, err := execute(t, "dump", "--admin", addr); err != nil {
		t.Fatalf("with the token from the environment: %v", err)
	}
}

// TestServeStartsAsAnOperatorSeesIt runs `narwhal serve` as a process in front of a simulated
// fleet with the strict start (preflight.require: all): the preflight verdict is printed once,
// an admin listener open beyond loopback without a token and a client listener open beyond
// loopback without API keys are warned about, and SIGTERM stops it cleanly.
func TestServeStartsAsAnOperatorSeesIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Models: []string{"m"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	path := writeFleetConfig(t, fleet, "listen: \"0.0.0.0:0\", admin_listen: \"0.0.0.0:0\", shutdown_grace_s: 1, drain_delay_s: 0",
		"preflight: {require: all}")
	cmd := exec.Command(os.Args[0], "serve", "--config", path)
	cmd.Env = append(os.Environ(), "NARWHAL_TEST_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var log strings.Builder
	listening := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "narwhal listening") && !once {
				once = true
				close(listening)
			}
		}
	}()
	select {
	case <-listening:
	case <-done:
		t.Fatalf("narwhal serve exited before listening:\n%s", log.String())
	case <-time.After(20 * time.Second):
		t.Fatal("narwhal serve did not start within 20 s")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("narwhal serve did not stop within 20 s of SIGTERM")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("narwhal serve exited with %v:\n%s", err, log.String())
	}
	out := log.String()
	if n := strings.Count(out, "preflight passed"); n != 1 {
		t.Errorf("\"preflight passed\" printed %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "has no token") {
		t.Errorf("no warning about an admin listener beyond loopback without a token:\n%s", out)
	}
	if !strings.Contains(out, "no client API key is configured") {
		t.Errorf("no warning about a client listener beyond loopback without API keys:\n%s", out)
	}
}

// TestDemoPrintsWhereEverythingListens runs `narwhal demo` as a process and follows what its
// banner prints, as a newcomer would: every simulated engine's URL answers /v1/models directly,
// the admin URL answers /engines, and the API answers /v1/models.
func TestDemoPrintsWhereEverythingListens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	cmd := exec.Command(os.Args[0], "demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "NARWHAL_TEST_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	banner := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "Ctrl-C stops it.") {
				banner <- b.String()
				io.Copy(io.Discard, stdout) // the access log
				return
			}
		}
		banner <- b.String()
	}()
	var out string
	select {
	case out = <-banner:
	case <-time.After(30 * time.Second):
		t.Fatal("narwhal demo printed no banner within 30 s")
	}
	get := func(url string) {
		t.Helper()
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
		if err != nil {
			t.Fatalf("GET %s (from the banner): %v\n%s", url, err, out)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s (from the banner): %s\n%s", url, resp.Status, out)
		}
	}
	engines := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && (f[1] == "prefill" || f[1] == "decode") && strings.HasPrefix(f[2], "http://") {
			engines++
			get(f[2] + "/v1/models")
		}
	}
	if engines != 4 {
		t.Fatalf("the banner lists %d engines with their URLs, want the demo's 4:\n%s", engines, out)
	}
	var api, adminURL string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "API" {
			api = f[1]
		}
		if len(f) >= 2 && f[0] == "admin" {
			adminURL = strings.TrimSuffix(f[1], "/debug/tree?format=text")
		}
	}
	if api == "" || adminURL == "" || strings.HasSuffix(api, ":0/v1") {
		t.Fatalf("the banner has no usable API (%q) or admin (%q) URL:\n%s", api, adminURL, out)
	}
	get(api + "/models")
	get(adminURL + "/engines")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("narwhal demo exited with %v after SIGTERM", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("narwhal demo did not stop within 20 s of SIGTERM")
	}
}
