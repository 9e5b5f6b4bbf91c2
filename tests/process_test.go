package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// routerProcess starts one real `narwhal serve` process (the binary the cluster tests build)
// with cfg, its listeners on free loopback ports, and waits until it is ready. Memory figures
// (rss, peakRSS) are the process's own, read from /proc.
func routerProcess(t *testing.T, cfg config.Config, env ...string) *narwhalNode {
	t.Helper()
	bin := buildNarwhal(t)
	if cfg.Server.Listen == config.Default().Server.Listen {
		cfg.Server.Listen = freeTCPAddr(t)
	}
	if cfg.Server.AdminListen == config.Default().Server.AdminListen {
		cfg.Server.AdminListen = freeTCPAddr(t)
	}
	path := filepath.Join(t.TempDir(), "narwhal.yaml")
	writeConfig(t, path, cfg)
	n := &narwhalNode{t: t, name: "router", bin: bin, cfg: path, env: env, token: cfg.Server.AdminToken,
		api: "http://" + cfg.Server.Listen, admin: "http://" + cfg.Server.AdminListen, client: &http.Client{Timeout: 60 * time.Second}}
	n.start()
	n.waitReady()
	return n
}

// writeConfig validates cfg and writes it to path as the YAML narwhal serve reads.
func writeConfig(t *testing.T, path string, cfg config.Config) {
	t.Helper()
	if err := cfg.Validate(kv.Builtin()); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// procField reads a field of /proc/<pid>/status as the file has it ("T (stopped)", "1234 kB").
func procField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return ""
}

// procStatus reads a size field of /proc/<pid>/status in bytes (VmRSS, VmHWM: kB in the file).
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	kb, err := strconv.ParseInt(strings.TrimSuffix(procField(t, pid, field), " kB"), 10, 64)
	if err != nil {
		t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
	}
	return kb << 10
}

// signalStopped says the process is stopped by a signal (SIGSTOP), as the kernel reports it.
func signalStopped(t *testing.T, pid int) bool {
	return strings.HasPrefix(procField(t, pid, "State"), "T")
}

// rss is the process's resident set now; peakRSS its high-water mark since it started.
func (n *narwhalNode) rss() int64     { return procStatus(n.t, n.cmd.Process.Pid, "VmRSS") }
func (n *narwhalNode) peakRSS() int64 { return procStatus(n.t, n.cmd.Process.Pid, "VmHWM") }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// stop ends the process as SIGTERM does and waits for it, so its output is complete.
func (n *narwhalNode) stop() {
	n.t.Helper()
	if exited, _ := stopProcess(n.cmd, 15*time.Second); !exited {
		n.t.Fatal("the router did not stop within 15s of SIGTERM")
	}
}
