package harness

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// StartCPUProfile asks the router for a CPU profile of the next seconds and saves it to
// file; the returned channel delivers the outcome once the profile is written.
func (r *Router) StartCPUProfile(seconds int, file string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Save("/debug/pprof/profile?seconds="+strconv.Itoa(seconds), file) }()
	return done
}

// HeapProfile saves the router's heap profile, right after a garbage collection so that in-use
// figures are current (a plain profile shows the heap as of the last cycle, maybe long ago).
func (r *Router) HeapProfile(file string) error { return r.Save("/debug/pprof/heap?gc=1", file) }

// Goroutines returns the router's live goroutine count.
func (r *Router) Goroutines() (int, error) {
	b, err := r.Get("/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	// "goroutine profile: total N"
	first, _, _ := strings.Cut(string(b), "\n")
	_, n, ok := strings.Cut(first, "total ")
	if !ok {
		return 0, fmt.Errorf("unexpected goroutine profile header %q", first)
	}
	return strconv.Atoi(strings.TrimSpace(n))
}

// PprofTop runs `go tool pprof -top` on a saved profile and returns its first lines.
func PprofTop(binary, file string, lines int, flags ...string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go tool on PATH to read %s", file)
	}
	args := append([]string{"tool", "pprof", "-top", "-nodecount", strconv.Itoa(lines)}, flags...)
	args = append(args, binary, file)
	out, err := exec.Command(goTool, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof %s: %v: %s", file, err, out)
	}
	return strings.TrimRight(string(out), "\n"), nil
}
