package deploy

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/narwhal-router/narwhal/config"
)

// unit parses a systemd unit file into section → key → values (a key may repeat).
func unit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestSystemdUnitIsHardened(t *testing.T) {
	u := unit(t, "narwhal.service")
	svc := u["Service"]
	for k, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "Restart": "always", "KillSignal": "SIGTERM", "CapabilityBoundingSet": "",
	} {
		if got := svc[k]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s = %q, want %q", k, got, want)
		}
	}
	if n, err := strconv.Atoi(strings.Join(svc["LimitNOFILE"], "")); err != nil || n < 65536 {
		t.Errorf("LimitNOFILE = %v, want at least 65536", svc["LimitNOFILE"])
	}
	// Reload is in place: check the file, then SIGHUP to the main process (never SIGTERM: that
	// is a restart). The check comes first, so a file that fails it is never signalled.
	reload := svc["ExecReload"]
	if len(reload) != 2 || !strings.Contains(reload[0], "serve --check") || !strings.HasSuffix(reload[1], "kill -HUP $MAINPID") ||
		strings.Contains(strings.Join(reload, " "), "TERM") {
		t.Errorf("ExecReload = %q, want a configuration check, then SIGHUP to $MAINPID", reload)
	}
	// The running process holds its ports while a reload checks the new file: binding them
	// would fail every reload. Before a start they must be free, so that check binds them.
	if !strings.Contains(strings.Join(reload, " "), "--skip-bind-check") || strings.Contains(strings.Join(svc["ExecStartPre"], ""), "--skip-bind-check") {
		t.Errorf("ExecReload %q / ExecStartPre %q: the reload check must skip binding the listeners, the start check must not",
			svc["ExecReload"], svc["ExecStartPre"])
	}
	start := strings.Join(svc["ExecStart"], "")
	if !strings.Contains(start, " serve --config ") || !strings.Contains(strings.Join(svc["ExecStartPre"], ""), "serve --check") {
		t.Errorf("ExecStart %q / ExecStartPre %q", start, svc["ExecStartPre"])
	}
	// A graceful stop (server.drain_delay_s, then server.shutdown_grace_s) must fit in the stop
	// timeout.
	d := config.Default().Server
	if n, err := strconv.Atoi(strings.Join(svc["TimeoutStopSec"], "")); err != nil || float64(n) <= float64(d.DrainDelayS+d.ShutdownGraceS) {
		t.Errorf("TimeoutStopSec = %v, want more than the default drain delay and shutdown grace %v s", svc["TimeoutStopSec"], d.DrainDelayS+d.ShutdownGraceS)
	}
	if len(u["Install"]["WantedBy"]) == 0 {
		t.Error("no [Install] WantedBy")
	}
}

// TestSystemdAnalyzeVerifiesTheUnit runs systemd-analyze verify (it needs no running systemd)
// on the unit, with the binary path pointed at an executable that exists here, and requires it
// to print nothing: it exits 0 even on unknown keys, which it only warns about.
func TestSystemdAnalyzeVerifiesTheUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd; .ci/run does it): only the parse-level check ran")
	}
	b, err := os.ReadFile("narwhal.service")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "narwhal.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(b, []byte("/usr/local/bin/narwhal"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// containerfile returns the instructions of a container recipe, each as its keyword and the
// rest, continuation lines joined.
func containerfile(t *testing.T, name string) [][2]string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for _, line := range strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		out = append(out, [2]string{strings.ToUpper(k), strings.TrimSpace(v)})
	}
	return out
}

// runtimeStage is what a recipe's final stage gives the image: its base, user, entrypoint,
// command, exposed ports and the label keys it sets.
type runtimeStage struct {
	From, User, Entrypoint, Cmd, Expose string
	Labels                              []string
}

func finalStage(t *testing.T, name string) runtimeStage {
	t.Helper()
	var st runtimeStage
	for _, in := range containerfile(t, name) {
		switch in[0] {
		case "FROM":
			st = runtimeStage{From: in[1]}
		case "USER":
			st.User = in[1]
		case "ENTRYPOINT":
			st.Entrypoint = in[1]
		case "CMD":
			st.Cmd = in[1]
		case "EXPOSE":
			st.Expose = in[1]
		case "LABEL":
			for _, kv := range strings.Fields(in[1]) {
				if k, _, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "org.opencontainers.") {
					st.Labels = append(st.Labels, k)
				}
			}
		}
	}
	return st
}

// The two recipes — FROM scratch around the binary `make build` made (what `make image` builds)
// and from source on distroless (for a machine with a registry) — make the same image: the same
// numeric non-root user, `narwhal serve` as the entrypoint in exec form, the configuration path
// the manifests mount, the same ports and labels. The source build is static.
func TestContainerfilesMakeTheSameStaticNonRootImage(t *testing.T) {
	prebuilt, source := finalStage(t, "Containerfile.prebuilt"), finalStage(t, "Containerfile")
	if prebuilt.From != "scratch" {
		t.Errorf("Containerfile.prebuilt is FROM %q: want scratch (nothing to pull)", prebuilt.From)
	}
	if !strings.Contains(source.From, "static") {
		t.Errorf("the source recipe's runtime image %q is not a static (libc-free) base", source.From)
	}
	for name, st := range map[string]runtimeStage{"Containerfile.prebuilt": prebuilt, "Containerfile": source} {
		uid, _, _ := strings.Cut(st.User, ":")
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			t.Errorf("%s: USER %q: want a numeric non-root user (runAsNonRoot can only verify a number)", name, st.User)
		}
		var entry, cmd []string
		if err := json.Unmarshal([]byte(st.Entrypoint), &entry); err != nil || strings.Join(entry, " ") != "/usr/local/bin/narwhal serve" {
			t.Errorf("%s: ENTRYPOINT %q: want [\"/usr/local/bin/narwhal\", \"serve\"] (exec form)", name, st.Entrypoint)
		}
		if err := json.Unmarshal([]byte(st.Cmd), &cmd); err != nil || strings.Join(cmd, " ") != "--config /etc/narwhal/narwhal.yaml" {
			t.Errorf("%s: CMD %q: want the configuration the manifests mount, in exec form", name, st.Cmd)
		}
		if st.Expose != "8000 8001" {
			t.Errorf("%s: EXPOSE %q: want the API and admin ports 8000 8001", name, st.Expose)
		}
		for _, l := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision"} {
			if !slices.Contains(st.Labels, l) {
				t.Errorf("%s: no label %s (labels: %v)", name, l, st.Labels)
			}
		}
	}
	if !reflect.DeepEqual(prebuilt.Labels, source.Labels) || prebuilt.User != source.User {
		t.Errorf("the recipes differ: labels %v / %v, user %q / %q", prebuilt.Labels, source.Labels, prebuilt.User, source.User)
	}
	build := ""
	for _, in := range containerfile(t, "Containerfile") {
		if in[0] == "RUN" && strings.Contains(in[1], "go build") {
			build = in[1]
		}
	}
	if !strings.Contains(build, "CGO_ENABLED=0") {
		t.Errorf("the build %q does not make a static binary (CGO_ENABLED=0)", build)
	}
}

// TestStaticBuildHasNoDynamicDependencies checks the binary `make image` packages (make build
// with CGO_ENABLED=0) asks for no interpreter and no shared library, so it runs on an image
// without libc.
func TestStaticBuildHasNoDynamicDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := staticBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary needs a dynamic loader")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary needs shared libraries: %v", libs)
	}
	if out, err := exec.Command(bin, "version").Output(); err != nil || !strings.HasPrefix(string(out), "narwhal ") {
		t.Fatalf("narwhal version: %q, %v", out, err)
	}
}

// manifests returns every document of deploy/kubernetes/*.yaml by kind.
func manifests(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no manifests in deploy/kubernetes")
	}
	out := map[string]map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if doc == nil {
				continue
			}
			kind, _ := doc["kind"].(string)
			if _, dup := out[kind]; dup || kind == "" || doc["apiVersion"] == nil {
				t.Fatalf("%s: a document without kind/apiVersion or a second %q", f, kind)
			}
			out[kind] = doc
		}
	}
	return out
}

// at walks a parsed YAML document: keys for mappings, indices for lists.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: %q is not under a mapping", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func TestKubernetesManifests(t *testing.T) {
	docs := manifests(t)
	for _, kind := range []string{"ConfigMap", "Deployment", "Service", "PodDisruptionBudget"} {
		if docs[kind] == nil {
			t.Fatalf("no %s in deploy/kubernetes", kind)
		}
	}
	dep := docs["Deployment"]
	podLabels := at(t, dep, "spec", "template", "metadata", "labels").(map[string]any)
	matches := func(what string, selector any) {
		for k, v := range selector.(map[string]any) {
			if podLabels[k] != v {
				t.Errorf("%s selects %s=%v, which the pods do not carry (%v)", what, k, v, podLabels)
			}
		}
	}
	matches("the Deployment", at(t, dep, "spec", "selector", "matchLabels"))
	matches("the Service", at(t, docs["Service"], "spec", "selector"))
	matches("the PodDisruptionBudget", at(t, docs["PodDisruptionBudget"], "spec", "selector", "matchLabels"))

	c := at(t, dep, "spec", "template", "spec", "containers", 0)
	ports := map[string]int{}
	for _, p := range at(t, c, "ports").([]any) {
		ports[at(t, p, "name").(string)] = at(t, p, "containerPort").(int)
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz", "startupProbe": "/healthz"} {
		if got := at(t, c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %v, want %s", probe, got, path)
		}
		if at(t, c, probe, "httpGet", "port") != "admin" {
			t.Errorf("%s is not on the admin port", probe)
		}
	}
	if at(t, c, "securityContext", "readOnlyRootFilesystem") != true || at(t, c, "securityContext", "allowPrivilegeEscalation") != false ||
		at(t, dep, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true {
		t.Error("the container is not read-only, non-root and without privilege escalation")
	}

	// The ConfigMap's configuration passes the validation `narwhal serve --check` runs, with
	// the environment the Deployment gives the container.
	env := map[string]string{}
	for _, e := range at(t, c, "env").([]any) {
		env[at(t, e, "name").(string)] = "from-the-secret"
	}
	var mount string
	for _, m := range at(t, c, "volumeMounts").([]any) {
		if at(t, m, "name") == "config" {
			mount = at(t, m, "mountPath").(string)
		}
	}
	// The image's entrypoint is `narwhal serve`; the container's args follow it.
	args := at(t, c, "args").([]any)
	var configPath string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--config" {
			configPath = args[i+1].(string)
		}
	}
	if entry := finalStage(t, "Containerfile.prebuilt").Entrypoint; !strings.HasSuffix(entry, `"serve"]`) || filepath.Dir(configPath) != mount {
		t.Fatalf("the container runs %s %v with the configuration mounted at %s", entry, args, mount)
	}
	text, ok := at(t, docs["ConfigMap"], "data", filepath.Base(configPath)).(string)
	if !ok {
		t.Fatalf("the ConfigMap has no key %s", filepath.Base(configPath))
	}
	for _, m := range envRef.FindAllStringSubmatch(text, -1) {
		if _, ok := env[m[1]]; !ok {
			t.Errorf("the configuration needs ${%s}, which the container's env does not set", m[1])
		}
	}
	cfg, err := config.Parse([]byte(text), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the ConfigMap's configuration is refused:\n%v", err)
	}
	for name, addr := range map[string]string{"http": cfg.Server.Listen, "admin": cfg.Server.AdminListen} {
		if !strings.HasSuffix(addr, ":"+strconv.Itoa(ports[name])) {
			t.Errorf("the %s port %d is not where Narwhal listens (%s)", name, ports[name], addr)
		}
	}
	if cfg.Server.AdminToken == "" {
		t.Error("the admin listener is reachable from the pod network and has no token")
	}
	// A termination runs the preStop sleep, then SIGTERM: the drain delay (/readyz 503, the
	// listener still serving), then the shutdown grace. All of it must fit in the pod's grace,
	// or the kubelet kills streams the configuration promised to let finish.
	preStop, ok := at(t, c, "lifecycle", "preStop", "sleep", "seconds").(int)
	if !ok || preStop < 1 {
		t.Errorf("no preStop sleep (a native sleep: the image has no shell): %v", at(t, c, "lifecycle"))
	}
	if cfg.Server.DrainDelayS <= 0 {
		t.Error("server.drain_delay_s is 0: SIGTERM would close the listener while load balancers still send")
	}
	need := float64(preStop) + float64(cfg.Server.DrainDelayS) + float64(cfg.Server.ShutdownGraceS)
	if grace := at(t, dep, "spec", "template", "spec", "terminationGracePeriodSeconds").(int); float64(grace) <= need {
		t.Errorf("terminationGracePeriodSeconds %d does not leave room for the preStop sleep %d s, drain_delay_s %v and shutdown_grace_s %v",
			grace, preStop, cfg.Server.DrainDelayS, cfg.Server.ShutdownGraceS)
	}
	// Readiness must notice a drain well within it: a failing /readyz is seen within
	// periodSeconds × failureThreshold.
	period, _ := at(t, c, "readinessProbe", "periodSeconds").(int)
	threshold, _ := at(t, c, "readinessProbe", "failureThreshold").(int)
	if period == 0 || threshold == 0 || float64(period*threshold) >= float64(cfg.Server.DrainDelayS) {
		t.Errorf("readiness notices a drain after up to %d × %d s, not within drain_delay_s %v", period, threshold, cfg.Server.DrainDelayS)
	}
	// The liveness probe waits for the start (the startup probe), not a fixed delay.
	if d, set := at(t, c, "livenessProbe").(map[string]any)["initialDelaySeconds"]; set {
		t.Errorf("livenessProbe.initialDelaySeconds %v: the startup probe holds liveness back instead", d)
	}
	if tp := at(t, docs["Service"], "spec", "ports", 0, "targetPort"); tp != "http" {
		t.Errorf("the Service targets %v, not the http port", tp)
	}
}

// The Deployment runs as rbac.yaml's ServiceAccount, which the RoleBinding gives the Role that
// lets the Kubernetes engine source read pods and InferencePools (get, list, watch) and nothing
// more; the
// ConfigMap's configuration uses that source. (transport/discovery/kubernetes applies rbac.yaml
// to a real API server and runs the source with exactly these permissions.)
func TestKubernetesRBACCoversDiscovery(t *testing.T) {
	docs := manifests(t)
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding"} {
		if docs[kind] == nil {
			t.Fatalf("no %s in deploy/kubernetes", kind)
		}
	}
	sa := at(t, docs["ServiceAccount"], "metadata", "name")
	if got := at(t, docs["Deployment"], "spec", "template", "spec", "serviceAccountName"); got != sa {
		t.Errorf("the Deployment runs as %v, not the ServiceAccount %v", got, sa)
	}
	rb := docs["RoleBinding"]
	if at(t, rb, "roleRef", "kind") != "Role" || at(t, rb, "roleRef", "name") != at(t, docs["Role"], "metadata", "name") {
		t.Errorf("the RoleBinding binds %v, not the Role", at(t, rb, "roleRef"))
	}
	if at(t, rb, "subjects", 0, "kind") != "ServiceAccount" || at(t, rb, "subjects", 0, "name") != sa {
		t.Errorf("the RoleBinding's subject is %v, not the ServiceAccount", at(t, rb, "subjects", 0))
	}
	rules := at(t, docs["Role"], "rules").([]any)
	want := []string{`{"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch"]}`,
		`{"apiGroups":["inference.networking.k8s.io"],"resources":["inferencepools"],"verbs":["get","list","watch"]}`}
	if len(rules) != len(want) {
		t.Fatalf("the Role has %d rules, want the ones on pods and inferencepools", len(rules))
	}
	for i, r := range rules {
		if got, _ := json.Marshal(r); string(got) != want[i] {
			t.Errorf("the Role's rule %d grants %s, want exactly %s", i, got, want[i])
		}
	}
	text := at(t, docs["ConfigMap"], "data", "narwhal.yaml").(string)
	cfg, err := config.Parse([]byte(text), func(string) (string, bool) { return "x", true })
	if err != nil {
		t.Fatal(err)
	}
	if k := cfg.Discovery.Kubernetes; k == nil || len(k.Roles) == 0 {
		t.Fatal("the ConfigMap's configuration has no Kubernetes discovery")
	}
}
