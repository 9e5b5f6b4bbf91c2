package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
)

// configMapVolume is a directory laid out as the kubelet lays out a mounted ConfigMap: each
// key is a symlink through `..data`, itself a symlink to a timestamped directory holding the
// files; an update writes a new timestamped directory and renames a new `..data` link over the
// old one (one atomic swap), then removes the old directory (the kubelet's AtomicWriter, in
// kubernetes/pkg/volume/util/atomic_writer.go).
type configMapVolume struct {
	t   *testing.T
	dir string
	gen int
	cur string
}

func newConfigMapVolume(t *testing.T, key, content string) (*configMapVolume, string) {
	v := &configMapVolume{t: t, dir: t.TempDir()}
	v.update(key, content)
	if err := os.Symlink(filepath.Join("..data", key), filepath.Join(v.dir, key)); err != nil {
		t.Fatal(err)
	}
	return v, filepath.Join(v.dir, key)
}

// update swaps the volume to hold key with content.
func (v *configMapVolume) update(key, content string) {
	v.t.Helper()
	v.gen++
	ts := fmt.Sprintf("..2026_12_05_09_%02d_00.%09d", v.gen, v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.dir, ts, key), []byte(content), 0o644); err != nil {
		v.t.Fatal(err)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	if v.cur != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.cur)); err != nil {
			v.t.Fatal(err)
		}
	}
	v.cur = ts
}

// Kubernetes updates a mounted ConfigMap by swapping its `..data` symlink and sends no
// signal: serve notices the swap and reloads through the SIGHUP path, each change once. A file
// that no longer loads is refused, the log naming the error, and the running fleet is kept; a
// file that changes a setting fixed for the process's life is refused by name, as on SIGHUP.
func TestServeReloadsAConfigMapSwap(t *testing.T) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 2, Engine: sim.Options{Models: []string{"m"}, Tokens: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	server := `listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0", shutdown_grace_s: 1, drain_delay_s: 0`
	file := func(server string, engines ...string) string {
		return fmt.Sprintf("server: {%s}\nlog: {format: text}\nengines:\n%s", server, engineLines(fleet, engines...))
	}
	vol, path := newConfigMapVolume(t, "narwhal.yaml", file(server, "p0", "d0"))
	p := startServe(t, path)
	waitFor(t, 10*time.Second, func() bool { code, _ := p.get("/readyz"); return code == 200 }, func() string { return "never ready" })
	reloads := &reloadWatch{p: p}
	waitReload := func(result string) map[string]any {
		t.Helper()
		return reloads.next(t, 10*time.Second, "the reload after the swap", result)
	}

	// d1 joins through a swap alone.
	swapped := time.Now()
	vol.update("narwhal.yaml", file(server, "p0", "d0", "d1"))
	if st := waitReload("applied"); fmt.Sprint(st["changed"]) != "[engines]" {
		t.Fatalf("reload after the swap: %v", st)
	}
	t.Logf("the swap was applied %v after it was made", time.Since(swapped).Round(time.Millisecond))
	waitFor(t, 10*time.Second, func() bool { return p.engines()["d1"]["state"] == "admitted" }, func() string {
		return fmt.Sprintf("d1 not admitted: %v", p.engines()["d1"])
	})

	// A file that does not parse: refused, its error in the log, the fleet as it was.
	vol.update("narwhal.yaml", "server: {listen: [\n")
	if st := waitReload("invalid"); !strings.Contains(fmt.Sprint(st["error"]), "not valid YAML") {
		t.Fatalf("reload of a broken file: %v", st)
	}
	if !regexp.MustCompile(`level=ERROR msg="configuration reload refused: the file is not valid; the running configuration is unchanged" error=".*not valid YAML`).
		MatchString(p.log.String()) {
		t.Fatalf("no refusal naming the error in the log:\n%s", p.log)
	}
	if _, in := p.engines()["d1"]; !in {
		t.Fatal("d1 left the fleet on an invalid reload")
	}

	// A listener changed, d0 gone: refused by name, d0 kept.
	vol.update("narwhal.yaml", file(`listen: "127.0.0.1:1", admin_listen: "127.0.0.1:0", shutdown_grace_s: 1, drain_delay_s: 0`, "p0", "d1")) // testports: not bound (a listener change the reload refuses)
	if st := waitReload("refused"); fmt.Sprint(st["refused"]) != "[server.listen]" {
		t.Fatalf("reload of a listener change: %v", st)
	}
	if _, in := p.engines()["d0"]; !in {
		t.Fatal("a refused reload removed d0")
	}

	// Back to a valid file: d0 leaves. Every swap was reloaded once, none twice.
	vol.update("narwhal.yaml", file(server, "p0", "d1"))
	waitReload("applied")
	waitFor(t, 10*time.Second, func() bool { _, in := p.engines()["d0"]; return !in }, func() string { return "d0 never left" })
	for _, want := range []string{`narwhal_config_reloads_total{result="applied"} 2`, `narwhal_config_reloads_total{result="invalid"} 1`,
		`narwhal_config_reloads_total{result="refused"} 1`} {
		var metrics string
		waitFor(t, 3*time.Second, func() bool { _, metrics = p.get("/metrics"); return strings.Contains(metrics, want) }, func() string {
			return "no " + want + " in /metrics:\n" + grepLines(metrics, "config_reload")
		})
	}
	if n := strings.Count(p.log.String(), `msg="the configuration file changed: reloading it"`); n != 4 {
		t.Errorf("%d reloads for 4 swaps:\n%s", n, grepLines(p.log.String(), "configuration"))
	}
}

// engineLines are the engines list entries of the fleet's engines named (model m, KV identity
// pinned).
func engineLines(fleet *sim.Fleet, names ...string) string {
	var b strings.Builder
	for _, name := range names {
		e := fleet.Engine(name)
		fmt.Fprintf(&b, "  - {name: %s, url: %q, role: %s, models: [m], kv: {engine_id: %q, endpoint: %q}}\n",
			e.Name(), e.URL(), e.Role(), e.EngineID(), e.KVEndpoint())
	}
	return b.String()
}

// reloadWatch follows a serve process's reloads through /discovery.
type reloadWatch struct {
	p      *serveProc
	lastAt any
}

// next waits up to within for a reload newer than the last one next returned, whose result is
// result, and returns it (what names the awaited reload in a failure).
func (w *reloadWatch) next(t *testing.T, within time.Duration, what, result string) map[string]any {
	t.Helper()
	var last map[string]any
	waitFor(t, within, func() bool {
		var st struct {
			Reload map[string]any `json:"reload"`
		}
		_, body := w.p.get("/discovery")
		json.Unmarshal([]byte(body), &st)
		last = st.Reload
		return last != nil && last["at"] != w.lastAt && last["result"] == result
	}, func() string { return fmt.Sprintf("%s: no %s reload; last %v", what, result, last) })
	w.lastAt = last["at"]
	return last
}
