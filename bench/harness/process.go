package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process in its own process group. Its stderr (and its stdout, unless the
// caller reads it) goes to a log file that is quoted when it dies unexpectedly.
type Proc struct {
	Name    string
	LogPath string
	// Stdin and Stdout are set when the spec asks for pipes.
	Stdin  io.WriteCloser
	Stdout io.Reader

	cmd      *exec.Cmd
	log      *os.File
	exited   chan struct{}
	waitErr  error
	mu       sync.Mutex
	stopping bool
}

// Spec describes a process to start.
type Spec struct {
	Name string
	Path string
	Args []string
	// Log is the file that receives stderr (and stdout unless PipeStdout).
	Log        string
	PipeStdin  bool
	PipeStdout bool
	Env        []string
}

var live = struct {
	sync.Mutex
	procs map[*Proc]struct{}
}{procs: map[*Proc]struct{}{}}

// Start starts the process. It dies with the harness: its process group is killed by Stop,
// by KillAll, and by the kernel if the harness itself dies (parent-death signal).
func Start(s Spec) (*Proc, error) {
	logf, err := os.Create(s.Log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Stderr = logf
	if s.Env != nil {
		cmd.Env = append(os.Environ(), s.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Proc{Name: s.Name, LogPath: s.Log, cmd: cmd, log: logf, exited: make(chan struct{})}
	if s.PipeStdin {
		if p.Stdin, err = cmd.StdinPipe(); err != nil {
			logf.Close()
			return nil, err
		}
	}
	if s.PipeStdout {
		if p.Stdout, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return nil, err
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", s.Name, s.Path, err)
	}
	live.Lock()
	live.procs[p] = struct{}{}
	live.Unlock()
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		live.Lock()
		delete(live.procs, p)
		live.Unlock()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Died returns an error describing an unexpected exit, or nil while it runs (or when it was
// stopped on purpose).
func (p *Proc) Died() error {
	select {
	case <-p.exited:
	default:
		return nil
	}
	p.mu.Lock()
	stopping := p.stopping
	p.mu.Unlock()
	if stopping {
		return nil
	}
	status := "exit status 0"
	if p.waitErr != nil {
		status = p.waitErr.Error()
	}
	return fmt.Errorf("%s (pid %d) died unexpectedly (%s); last lines of %s:\n%s",
		p.Name, p.Pid(), status, p.LogPath, indent(p.Tail(15)))
}

// Stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs the group.
func (p *Proc) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	// A second SIGTERM ends a router's drain delay (server.drain_delay_s): a benchmark has no
	// load balancer to wait for. Processes that stop on the first take no notice.
	again := time.AfterFunc(100*time.Millisecond, func() { _ = syscall.Kill(-p.Pid(), syscall.SIGTERM) })
	defer again.Stop()
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.exited
	}
}

// Tail returns the last n lines of the process's log.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return "(empty)"
	}
	return strings.Join(lines, "\n")
}

// KillAll SIGKILLs the process group of every live child (the harness is exiting).
func KillAll() {
	live.Lock()
	defer live.Unlock()
	for p := range live.procs {
		p.mu.Lock()
		p.stopping = true
		p.mu.Unlock()
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	}
}

// firstDeath returns the first unexpected exit among procs.
func firstDeath(procs ...*Proc) error {
	var errs []error
	for _, p := range procs {
		if p != nil {
			if err := p.Died(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
