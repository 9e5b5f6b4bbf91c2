package deploy

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
)

// drain runs kubernetes/vllm/drain.py, the engines' preStop hook, against metrics with env,
// and returns when it exits, with what it printed and when.
func drain(t *testing.T, metrics string, env ...string) (out string, exited time.Time) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 (the vLLM image's interpreter runs the hook): Debian package python3")
	}
	cmd := exec.Command(python, "kubernetes/vllm/drain.py")
	cmd.Env = append([]string{"DRAIN_METRICS_URL=" + metrics}, env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); exited = time.Now(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("drain.py did not exit within 60 s:\n%s", buf.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("drain.py exited %d:\n%s", code, buf.String())
	}
	return buf.String(), exited
}

// The preStop hook holds the engine's SIGTERM back while a stream is open on it, on the
// engine's own metrics (a simulated vLLM: vllm:num_requests_running), returns once the stream
// has ended, and returns at once when the engine does not answer.
func TestDrainWaitsForOpenStreams(t *testing.T) {
	e, err := sim.Start(sim.Options{Models: []string{"m"}, Tokens: 40, ITL: 25 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	resp, err := http.Post(e.URL()+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hello","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil { // the stream is open and running
		t.Fatal(err)
	}
	ended := make(chan time.Time, 1)
	go func() {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ended <- time.Now()
	}()
	out, exited := drain(t, e.URL()+"/metrics", "DRAIN_MIN_S=0", "DRAIN_MAX_S=30", "DRAIN_HOLD_S=0")
	streamEnd := <-ended
	if exited.Before(streamEnd) {
		t.Fatalf("drain.py returned %v before the open stream ended:\n%s", streamEnd.Sub(exited), out)
	}
	if !strings.Contains(out, "drain: idle after") {
		t.Errorf("drain.py did not say it saw the engine idle:\n%s", out)
	}

	e.Close()
	out, _ = drain(t, e.URL()+"/metrics", "DRAIN_MIN_S=0", "DRAIN_MAX_S=30")
	if !strings.Contains(out, "the engine does not answer") {
		t.Errorf("drain.py against a stopped engine:\n%s", out)
	}
}
