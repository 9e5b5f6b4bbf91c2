package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
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

// TestVersion runs `narwhal version` and `--version` in this test binary, which carries neither
// a build stamp nor VCS information: the line says what it knows (the Go version) and that the
// rest is unknown, with how to get a build that knows (make_build_test.go checks a stamped one).
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := execute(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		want := "narwhal (devel) revision unknown built unknown " + runtime.Version() + " (no build stamp: build with make build)\n"
		if out != want {
			t.Fatalf("%v printed %q, want %q", args, out, want)
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
	// Free ports: --check binds every listener, and the defaults (:8000, :8001) may be taken here.
	os.WriteFile(good, []byte("server: {listen: \"127.0.0.1:0\", admin_listen: \"127.0.0.1:0\"}\nengines:\n  - {name: p0, url: \"http://10.0.0.1:8000\", role: prefill}\n  - {name: d0, url: \"http://10.0.0.2:8000\", role: decode}\n"), 0o644)
	out, err := execute(t, "serve", "--check", "--config", good)
	if err != nil || !strings.Contains(out, "configuration valid (2 engines)") {
		t.Fatalf("valid file: %q, %v", out, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("server: {listen: \":99999\"}\nengines: []\n"), 0o644) // testports: not bound (an invalid port, refused)
	if _, err := execute(t, "serve", "--check", "--config", bad); err == nil || !strings.Contains(err.Error(), "server.listen") {
		t.Fatalf("invalid file: %v", err)
	}
}

// TestServeCheckRefusesWhatServeWould runs `narwhal serve --check` as a process, as systemd's
// ExecStartPre does, on files that `serve` would refuse: a fraction where a whole number is
// wanted, two listeners on one port, and a port another process holds (the check binds every
// listener). Each exits 1 and names the key; --skip-bind-check (for a reload while the router
// holds its ports) leaves the last one to serve.
func TestServeCheckRefusesWhatServeWould(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	const engines = "engines:\n  - {name: p0, url: \"http://10.0.0.1:8000\", role: prefill%s}\n  - {name: d0, url: \"http://10.0.0.2:8000\", role: decode}\n"
	dir := t.TempDir()
	check := func(yaml string, extra ...string) (int, string) {
		t.Helper()
		path := filepath.Join(dir, "narwhal.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], append([]string{"serve", "--check", "--config", path}, extra...)...)
		cmd.Env = append(os.Environ(), "NARWHAL_TEST_MAIN=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	free := "server: {listen: \"127.0.0.1:0\", admin_listen: \"127.0.0.1:0\"}\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"a fraction for max_inflight", free + fmt.Sprintf(engines, ", max_inflight: 1.5"),
			`line 3: engines[0].max_inflight: "1.5" is not allowed; want a whole number`},
		{"listen equal to admin_listen", "server:\n  listen: \"127.0.0.1:18011\"\n  admin_listen: \"127.0.0.1:18011\"\n" + fmt.Sprintf(engines, ""), // testports: not bound (refused by validation)
			`line 3: server.admin_listen: "127.0.0.1:18011" takes the port of server.listen ("127.0.0.1:18011", line 2)`}, // testports: not bound (the refusal)
		{"a port another process holds", fmt.Sprintf("server: {listen: %q, admin_listen: \"127.0.0.1:0\"}\n", held.Addr().String()) + fmt.Sprintf(engines, ""),
			fmt.Sprintf("server.listen: cannot listen on %q: bind: address already in use", held.Addr().String())},
		{"the cluster port held", free + fmt.Sprintf("cluster: {enabled: true, bind: %q}\n", held.Addr().String()) + fmt.Sprintf(engines, ""),
			fmt.Sprintf("cluster.bind: cannot listen on %q: bind: address already in use", held.Addr().String())},
	} {
		code, out := check(tc.yaml)
		if code != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, output %q; want exit 1 and %q", tc.name, code, out, tc.want)
		}
	}
	code, out := check(fmt.Sprintf("server: {listen: %q, admin_listen: \"127.0.0.1:0\"}\n", held.Addr().String())+fmt.Sprintf(engines, ""), "--skip-bind-check")
	if code != 0 || !strings.Contains(out, "configuration valid (2 engines)") {
		t.Errorf("--skip-bind-check: exit %d, output %q", code, out)
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

// `narwhal cluster certs` makes what cluster.tls names, and `serve --check` takes it; a cluster
// bound beyond loopback without it does not pass (issue 26, item 4).
func TestClusterCertsMakeWhatServeAccepts(t *testing.T) {
	dir := t.TempDir()
	out, err := execute(t, "cluster", "certs", "--out", filepath.Join(dir, "certs"), "--nodes", "a,b", "--host", "10.0.0.1")
	if err != nil || !strings.Contains(out, "a:\n  tls: {cert_file: ") || !strings.Contains(out, "b-key.pem") {
		t.Fatalf("cluster certs: %q, %v", out, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "certs", "a-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("a's key: %v, %v", st, err)
	}
	// serve --check binds every listener: the API and admin on ports the kernel picks, the
	// cluster on a port free now (never the defaults, which a router on this machine may hold).
	engines := "server: {listen: \"127.0.0.1:0\", admin_listen: \"127.0.0.1:0\"}\n" +
		"engines:\n  - {name: p0, url: \"http://10.0.0.1:8000\", role: prefill}\n  - {name: d0, url: \"http://10.0.0.2:8000\", role: decode}\n"
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	c := filepath.Join(dir, "certs")
	withTLS := filepath.Join(dir, "tls.yaml")
	os.WriteFile(withTLS, []byte("cluster: {enabled: true, bind: \"0.0.0.0:"+port+"\", advertise: \"10.0.0.1:"+port+"\", tls: {cert_file: "+
		filepath.Join(c, "a.pem")+", key_file: "+filepath.Join(c, "a-key.pem")+", ca_file: "+filepath.Join(c, "ca.pem")+"}}\n"+engines), 0o644)
	if out, err := execute(t, "serve", "--check", "--config", withTLS); err != nil || !strings.Contains(out, "configuration valid") {
		t.Fatalf("with the certificates: %q, %v", out, err)
	}
	without := filepath.Join(dir, "plain.yaml")
	os.WriteFile(without, []byte("cluster: {enabled: true, bind: \"0.0.0.0:"+port+"\", advertise: \"10.0.0.1:"+port+"\"}\n"+engines), 0o644)
	if _, err := execute(t, "serve", "--check", "--config", without); err == nil || !strings.Contains(err.Error(), "cluster.tls: required") {
		t.Fatalf("beyond loopback without credentials: %v", err)
	}
}
