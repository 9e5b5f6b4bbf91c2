// Package sourcetest is what the engine sources' tests share: running a source and waiting, with
// a deadline, for the report a user would notice; a real etcd (Debian's etcd-server) on free
// loopback ports that a test can stop and start again; free ports. Only tests import it.
package sourcetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
	"github.com/narwhal-router/narwhal/transport/discovery"
)

// Report is what a source reports.
type Report = discovery.Report

// Recorder runs a source and keeps every report it makes.
type Recorder struct {
	mu      sync.Mutex
	reports []discovery.Report
	next    int // the first report Wait has not looked at
	notify  chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	leaks  goleak.Option
}

// Start runs src until the test ends (or Stop). Goroutines running at this point are the
// baseline Stop checks against.
func Start(t *testing.T, src discovery.Source) *Recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{notify: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}), leaks: goleak.IgnoreCurrent()}
	go func() {
		defer close(r.done)
		src.Run(ctx, r.report)
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *Recorder) report(rep discovery.Report) {
	r.mu.Lock()
	r.reports = append(r.reports, rep)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// stop ends the source and requires Run to return promptly.
func (r *Recorder) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Errorf("the source's Run did not return within 5 s of its context ending")
	}
}

// Stop ends the source, requires Run to return promptly and every goroutine the source started
// to end.
func (r *Recorder) Stop(t *testing.T) {
	t.Helper()
	r.stop(t)
	if err := goleak.Find(r.leaks); err != nil {
		t.Errorf("goroutines left running after the source stopped: %v", err)
	}
}

// Wait returns the first report not yet looked at that satisfies cond, failing the test if none
// comes within d (what says what was awaited; the last report seen is shown).
func (r *Recorder) Wait(t *testing.T, d time.Duration, what string, cond func(discovery.Report) bool) discovery.Report {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	var last *discovery.Report
	for {
		r.mu.Lock()
		for r.next < len(r.reports) {
			rep := r.reports[r.next]
			r.next++
			last = &rep
			if cond(rep) {
				r.mu.Unlock()
				return rep
			}
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-deadline.C:
			seen := "no report"
			if last != nil {
				seen = Describe(*last)
			}
			t.Fatalf("not within %v: %s (last report: %s)", d, what, seen)
		}
	}
}

// WaitNames waits for a set of exactly the engines named, in this order.
func (r *Recorder) WaitNames(t *testing.T, d time.Duration, names ...string) discovery.Report {
	t.Helper()
	return r.Wait(t, d, fmt.Sprintf("the engines %v", names), func(rep discovery.Report) bool {
		return rep.Err == nil && slices.Equal(Names(rep), names)
	})
}

// WaitErr waits for an error report whose message contains want.
func (r *Recorder) WaitErr(t *testing.T, d time.Duration, want string) discovery.Report {
	t.Helper()
	return r.Wait(t, d, fmt.Sprintf("an error report containing %q", want), func(rep discovery.Report) bool {
		return rep.Err != nil && strings.Contains(rep.Err.Error(), want)
	})
}

// Last is the source's latest report (false: none yet).
func (r *Recorder) Last() (discovery.Report, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reports) == 0 {
		return discovery.Report{}, false
	}
	return r.reports[len(r.reports)-1], true
}

// Count is how many reports the source made so far.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reports)
}

// Names are the names of a report's engines, in its order.
func Names(rep discovery.Report) []string {
	names := make([]string, 0, len(rep.Engines))
	for _, e := range rep.Engines {
		names = append(names, e.Name)
	}
	return names
}

// Engine is the engine of rep named name (the test fails without one).
func Engine(t *testing.T, rep discovery.Report, name string) config.Engine {
	t.Helper()
	for _, e := range rep.Engines {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no engine %s in %s", name, Describe(rep))
	return config.Engine{}
}

// Describe says what a report holds, for failure messages.
func Describe(rep discovery.Report) string {
	if rep.Err != nil {
		return "error: " + rep.Err.Error()
	}
	parts := make([]string, 0, len(rep.Engines))
	for _, e := range rep.Engines {
		parts = append(parts, fmt.Sprintf("%s=%s(%s)", e.Name, e.URL, e.Role))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// WaitUntil checks cond every 20 ms until it holds, failing the test after d.
func WaitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.UntilEvery(t, d, 20*time.Millisecond, cond, func() string { return what })
}

var (
	portsMu sync.Mutex
	given   = map[int]bool{}
)

// FreePort returns a loopback TCP port nothing listens on, never the same one twice in a test
// binary (a process stopped and started again keeps its ports).
func FreePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !given[port] {
			given[port] = true
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// Process is a server the test runs, stops (as a crash would) and starts again with the same
// arguments; what it prints is kept for failure messages.
type Process struct {
	Logs LogBuffer

	t    *testing.T
	name string
	bin  string
	args []string
	// ready says the server serves; Start waits up to a minute for it.
	ready func() bool

	mu  sync.Mutex
	cmd *exec.Cmd
}

// NewProcess describes a server; Start runs it, and it is stopped when the test ends.
func NewProcess(t *testing.T, name, bin string, args []string, ready func() bool) *Process {
	p := &Process{t: t, name: name, bin: bin, args: args, ready: ready}
	t.Cleanup(p.Stop)
	return p
}

// Start runs the server (again) and waits until it is ready.
func (p *Process) Start() {
	p.t.Helper()
	p.mu.Lock()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = &p.Logs, &p.Logs
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.cmd = cmd
	p.mu.Unlock()
	took := testwait.UntilEvery(p.t, time.Minute, 50*time.Millisecond, p.ready,
		func() string { return p.name + " not ready:\n" + p.Logs.String() })
	p.t.Logf("%s ready after %v", p.name, took.Round(time.Millisecond))
}

// Signal sends sig to the running server: SIGSTOP freezes it (its connections stay open and
// nothing answers on them), SIGCONT thaws it.
func (p *Process) Signal(sig os.Signal) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		p.t.Fatalf("signal %s: %s is not running", sig, p.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
}

// Stop kills the server and waits for it to exit.
func (p *Process) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	p.cmd = nil
}

// LogBuffer collects what a server or a source logs, safe for concurrent writes.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Etcd is a real etcd server (Debian's etcd-server package; .ci/run installs it) on loopback
// ports of its own, with a data directory that outlives a Stop, so Start brings the same
// store back.
type Etcd struct {
	*Process
	URL string
}

// StartEtcd starts an etcd for the test and stops it when the test ends. Without an etcd
// binary the test fails, naming the package to install, unless NARWHAL_SKIP_ETCD=1 allows a
// skip.
func StartEtcd(t *testing.T) *Etcd {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("NARWHAL_SKIP_ETCD") == "1" {
			t.Skip("etcd is not installed and NARWHAL_SKIP_ETCD=1")
		}
		t.Fatal("etcd is not installed: apt-get install etcd-server (.ci/run does), or set NARWHAL_SKIP_ETCD=1 to skip")
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	e := &Etcd{URL: client, Process: NewProcess(t, "etcd", bin, []string{"--name", "default",
		"--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default=" + peer, "--log-level", "error"}, func() bool {
		resp, err := probe.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})}
	e.Start()
	return e
}
