package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// Each test node runs in a process of its own (this test binary, re-executed): protoactor's
// remote sets gRPC's process-wide logger on every start, a data race between two nodes of one
// process, and a node per process is how Narwhal runs anyway. The parent drives a node over
// its stdin and reads what it hears, one JSON line each, from its stdout.

const nodeEnv = "NARWHAL_CLUSTER_TEST_NODE"

func TestMain(m *testing.M) {
	if spec := os.Getenv(nodeEnv); spec != "" {
		os.Exit(runTestNode(spec))
	}
	os.Exit(m.Run())
}

type command struct {
	Op      string  `json:"op"`
	Verdict Verdict `json:"verdict"`
	Engine  string  `json:"engine"`
	Ms      int     `json:"ms"`
}

type line struct {
	Heard  *Verdict  `json:"heard,omitempty"`
	At     time.Time `json:"at"`
	Status *Status   `json:"status,omitempty"`
	Probe  *bool     `json:"probe,omitempty"`
	OK     bool      `json:"ok,omitempty"`
	Err    string    `json:"err,omitempty"`
}

func runTestNode(spec string) int {
	var cfg config.Cluster
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(l line) { mu.Lock(); enc.Encode(l); mu.Unlock() }
	n, err := Start(cfg, Options{
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnVerdict: func(v Verdict) { emit(line{Heard: &v, At: time.Now()}) },
	})
	if err != nil {
		emit(line{Err: err.Error()})
		return 1
	}
	defer n.Close()
	emit(line{OK: true})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			emit(line{Err: err.Error()})
			continue
		}
		switch c.Op {
		case "publish":
			n.Publish(c.Verdict)
			emit(line{OK: true, At: time.Now()})
		case "status":
			st := n.Status()
			emit(line{Status: &st})
		case "probe":
			p := n.ShouldProbe(c.Engine)
			emit(line{Probe: &p})
		case "mute":
			if inc := n.current(); inc != nil && inc.static != nil {
				inc.static.muted.Store(true)
				time.AfterFunc(time.Duration(c.Ms)*time.Millisecond, func() { inc.static.muted.Store(false) })
			}
			emit(line{OK: true})
		}
	}
	return 0
}

// proc is a test node seen from the test.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	in      io.WriteCloser
	cmdMu   sync.Mutex
	replies chan line

	mu    sync.Mutex
	heard []line
}

func startProc(t *testing.T, cfg config.Cluster) *proc {
	t.Helper()
	p, err := launchProc(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// launchProc starts a node and waits for it to be up; safe to call from any goroutine.
func launchProc(t *testing.T, cfg config.Cluster) (*proc, error) {
	spec, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	raceDir := t.TempDir()
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec), "GORACE=halt_on_error=0 log_path="+filepath.Join(raceDir, "race"))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{t: t, name: cfg.Node(), cmd: cmd, in: in, replies: make(chan line, 4)}
	go func() {
		dec := json.NewDecoder(out)
		for {
			var l line
			if dec.Decode(&l) != nil {
				close(p.replies)
				return
			}
			if l.Heard != nil {
				p.mu.Lock()
				p.heard = append(p.heard, l)
				p.mu.Unlock()
				continue
			}
			p.replies <- l
		}
	}()
	t.Cleanup(func() {
		p.stop()
		checkRaces(t, p.name, raceDir)
	})
	select {
	case l, ok := <-p.replies:
		if !ok || !l.OK {
			return nil, fmt.Errorf("node %s did not start: %+v", p.name, l)
		}
	case <-time.After(15 * time.Second):
		return nil, fmt.Errorf("node %s did not start within 15s", p.name)
	}
	return p, nil
}

func (p *proc) do(c command) line {
	p.t.Helper()
	p.cmdMu.Lock()
	defer p.cmdMu.Unlock()
	b, _ := json.Marshal(c)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("node %s: %v", p.name, err)
	}
	select {
	case l, ok := <-p.replies:
		if !ok {
			p.t.Fatalf("node %s exited", p.name)
		}
		return l
	case <-time.After(10 * time.Second):
		p.t.Fatalf("node %s did not answer %s", p.name, c.Op)
	}
	return line{}
}

func (p *proc) publish(v Verdict) time.Time { return p.do(command{Op: "publish", Verdict: v}).At }
func (p *proc) status() Status              { return *p.do(command{Op: "status"}).Status }
func (p *proc) shouldProbe(engine string) bool {
	return *p.do(command{Op: "probe", Engine: engine}).Probe
}

// find returns the first verdict heard on engine in state, and when.
func (p *proc) find(engine, state string) (Verdict, time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.heard {
		if l.Heard.Engine == engine && l.Heard.State == state {
			return *l.Heard, l.At, true
		}
	}
	return Verdict{}, time.Time{}, false
}

// stop ends the node as SIGTERM would: it leaves the cluster (stdin closed), then exits.
func (p *proc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.in.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// checkRaces fails the test on a data race in a node process whose racing access is in
// Narwhal's code. protoactor's own (its BlockList and gRPC's logger are read without locks, a
// library matter at the pinned version) are logged, not failed.
func checkRaces(t *testing.T, name, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "race*"))
	library := 0
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, report := range strings.Split(string(b), "WARNING: DATA RACE")[1:] {
			if ours(report) {
				t.Errorf("node %s: data race in Narwhal's code:%s", name, report)
			} else {
				library++
			}
		}
	}
	if library > 0 {
		t.Logf("node %s: %d data race report(s) inside protoactor (not Narwhal's accesses)", name, library)
	}
}

// ours reports whether either racing access happened in a function of this module.
func ours(report string) bool {
	lines := strings.Split(report, "\n")
	for i, l := range lines {
		if (strings.HasPrefix(l, "Read at") || strings.HasPrefix(l, "Write at") ||
			strings.HasPrefix(l, "Previous read at") || strings.HasPrefix(l, "Previous write at")) && i+1 < len(lines) {
			if strings.Contains(lines[i+1], "github.com/narwhal-router/narwhal/") {
				return true
			}
		}
	}
	return false
}
