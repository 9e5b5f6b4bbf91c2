package node

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// The discovery section becomes one source per configured source (one per DNS name), in the
// order Kubernetes, DNS, etcd; none configured, none.
func TestDiscoverySourcesFromTheConfiguration(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: llm}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := `
discovery:
  kubernetes: {kubeconfig: "` + kubeconfig + `", roles: [{role: both, selector: app=vllm}]}
  dns:
    - {name: prefill.llm.svc.cluster.local, role: prefill, port: 8000}
    - {name: decode.llm.svc.cluster.local, role: decode, port: 8000}
  etcd: {endpoints: ["http://127.0.0.1:2379"]}
`
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(kv.Builtin()); err != nil {
		t.Fatal(err)
	}
	sources, err := discoverySources(cfg.Discovery, log)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range sources {
		names = append(names, s.Name())
	}
	want := []string{"kubernetes llm", "dns prefill.llm.svc.cluster.local", "dns decode.llm.svc.cluster.local", "etcd /narwhal/engines/"}
	if !slices.Equal(names, want) {
		t.Fatalf("sources %q, want %q", names, want)
	}

	cfg.Discovery.Kubernetes.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	if _, err := discoverySources(cfg.Discovery, log); err == nil || !strings.Contains(err.Error(), "discovery.kubernetes.kubeconfig") {
		t.Fatalf("a missing kubeconfig: %v", err)
	}

	if sources, err := discoverySources(config.Default().Discovery, log); err != nil || len(sources) != 0 {
		t.Fatalf("without discovery: %v, %v", sources, err)
	}
}
