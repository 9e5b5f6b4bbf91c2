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
	"runtime"
	"runtime/pprof"
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
}

type line struct {
	Heard  *Verdict  `json:"heard,omitempty"`
	At     time.Time `json:"at"`
	Status *Status   `json:"status,omitempty"`
	Probe  *bool     `json:"probe,omitempty"`
	OK     bool      `json:"ok,omitempty"`
	Err    string    `json:"err,omitempty"`
	// Heap is the live heap after a collection, Goroutines the goroutine count, Running
	// the goroutines that are not protoactor's log-throttle timers ("heap").
	Heap       uint64 `json:"heap,omitempty"`
	Goroutines int    `json:"goroutines,omitempty"`
	Running    int    `json:"running,omitempty"`
	Stacks     string `json:"stacks,omitempty"` // of the Running goroutines
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
	n, err := Start(provisioned(cfg), Options{
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
		case "rejoin":
			// What a peer's "you were dropped" heartbeat or the watchdog asks for.
			emit(rejoinNow(n))
		case "heap":
			emit(heapNow())
		}
	}
	return 0
}

// heapNow measures the node's live heap and goroutines. protoactor starts a timer goroutine
// per log throttle (actor/throttler.go) that ends after its period (60 s for gossip's), and
// holds its actor system until then: those are counted apart.
func heapNow() line {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	l := line{Heap: ms.HeapAlloc, Goroutines: runtime.NumGoroutine()}
	var others []string
	for _, g := range strings.Split(b.String(), "\n\n")[1:] {
		if strings.Contains(g, "protoactor-go") && strings.Contains(g, "/actor/throttler.go") {
			continue
		}
		var n int
		fmt.Sscanf(g, "%d @", &n)
		l.Running += n
		others = append(others, g)
	}
	l.Stacks = strings.Join(others, "\n\n")
	return l
}

// rejoinNow has the node rejoin under a new identity and waits until it has.
func rejoinNow(n *Node) line {
	gen := n.Status().Generation
	n.rejoin(n.memberID(), "asked by the test")
	if !pollUntil(20*time.Second, func() bool { st := n.Status(); return st.Generation != gen && st.Joined }) {
		return line{Err: "no new incarnation within 20s"}
	}
	return line{OK: true}
}

// proc is a test node seen from the test.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	in      io.WriteCloser
	cmdMu   sync.Mutex
	replies chan line
	// stderr is the node's log file; exited is closed once the process has ended, and
	// exitErr says how.
	stderr  string
	exited  chan struct{}
	exitErr error
	// cutFile partitions the node from its peers while it exists (FaultFileEnv).
	cutFile string

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
	cutFile := filepath.Join(raceDir, "cut")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec), FaultFileEnv+"="+cutFile,
		"GORACE=halt_on_error=0 log_path="+filepath.Join(raceDir, "race"))
	// The node's log goes to a file, not to a pipe this process must keep draining: a node
	// that dies says why there, and the test prints it.
	logPath := filepath.Join(raceDir, "stderr")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{t: t, name: provisioned(cfg).Node(), cmd: cmd, in: in, replies: make(chan line, 4), stderr: logPath, exited: make(chan struct{}), cutFile: cutFile}
	go func() {
		dec := json.NewDecoder(out)
		for {
			var l line
			if dec.Decode(&l) != nil {
				// Wait only after stdout is drained (it closes the pipe).
				p.exitErr = cmd.Wait()
				close(p.exited)
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
		if t.Failed() {
			p.dumpLog()
		}
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
		p.t.Fatalf("node %s: %v (%s)", p.name, err, p.exitState())
	}
	select {
	case l, ok := <-p.replies:
		if !ok {
			p.t.Fatalf("node %s ended (%s)", p.name, p.exitState())
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

// cut partitions the node from its peers (on) or heals the partition, through the fault hook.
func (p *proc) cut(on bool) {
	p.t.Helper()
	if !FaultHookCompiled {
		p.t.Skip("the partition hook is compiled only with -tags clusterfaults (make test sets it)")
	}
	var err error
	if on {
		err = os.WriteFile(p.cutFile, nil, 0o600)
	} else {
		err = os.Remove(p.cutFile)
	}
	if err != nil {
		p.t.Fatal(err)
	}
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

// exitState says whether and how the node's process ended.
func (p *proc) exitState() string {
	select {
	case <-p.exited:
		return fmt.Sprintf("process ended: %v", p.exitErr)
	case <-time.After(2 * time.Second):
		return "process still running"
	}
}

// dumpLog prints the end of the node's log.
func (p *proc) dumpLog() {
	b, _ := os.ReadFile(p.stderr)
	const most = 64 << 10
	if len(b) > most {
		b = b[len(b)-most:]
	}
	p.t.Logf("node %s log (%s):\n%s", p.name, p.exitState(), b)
}

// stop ends the node as SIGTERM would: it leaves the cluster (stdin closed), then exits.
func (p *proc) stop() {
	p.in.Close()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
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
