package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/narwhal-router/narwhal/config"
)

// object is one document of a manifest file: its kind, its source and, for the kinds Kubernetes
// itself defines, the typed object.
type object struct {
	file, kind string
	raw        []byte
	typed      runtime.Object
}

// allManifests parses every document of every YAML file under deploy/kubernetes: the kinds the
// API server defines strictly (an unknown or duplicated field fails, as `kubectl apply
// --validate=strict` would), the others (Kustomization, InferencePool) as YAML with kind and
// apiVersion.
func allManifests(t *testing.T) []object {
	t.Helper()
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []object
	err := filepath.WalkDir("kubernetes", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			kind, _ := doc["kind"].(string)
			if kind == "" || doc["apiVersion"] == nil {
				t.Fatalf("%s: a document without kind or apiVersion", path)
			}
			raw, err := json.Marshal(doc)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			o := object{file: path, kind: kind, raw: raw}
			if gv, _ := doc["apiVersion"].(string); scheme.Scheme.Recognizes(schema.FromAPIVersionAndKind(gv, kind)) {
				if o.typed, _, err = strict.Decode(raw, nil, nil); err != nil {
					t.Fatalf("%s: %s: %v", path, kind, err)
				}
			}
			out = append(out, o)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The vLLM engines deploy/kubernetes/vllm runs are the ones the router's configuration finds,
// started as it needs them: every manifest parses strictly; each Deployment's pods are selected
// by a discovery role of that role, on a port they name; they run the NIXL connector with the
// matching kv_role, the side channel on the pod IP and on a port the default KV endpoint rule
// allows, usage details, KV events on a port they declare, readiness on /health, and a preStop
// drain whose whole bound fits in the grace period.
func TestVLLMEnginesMatchTheRouter(t *testing.T) {
	objs := allManifests(t)
	router := routerConfig(t, objs, "narwhal")
	var seen []config.Role
	for _, o := range objs {
		d, ok := o.typed.(*appsv1.Deployment)
		if !ok || d.Name == "narwhal" {
			continue
		}
		role := checkEngineDeployment(t, d, router)
		seen = append(seen, role)
	}
	if !slices.Contains(seen, config.RolePrefill) || !slices.Contains(seen, config.RoleDecode) {
		t.Fatalf("engine Deployments of roles %v; want a producer and a consumer", seen)
	}
	k := kustomization(t, "kubernetes/vllm/kustomization.yaml")
	if !strings.Contains(k, "name: vllm-drain") || !strings.Contains(k, "files: [drain.py]") {
		t.Errorf("kubernetes/vllm/kustomization.yaml does not generate the vllm-drain ConfigMap from drain.py:\n%s", k)
	}
}

func kustomization(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkEngineDeployment checks one vLLM Deployment against the router's configuration and
// returns the role the router gives its pods.
func checkEngineDeployment(t *testing.T, d *appsv1.Deployment, router config.Config) config.Role {
	t.Helper()
	pod := d.Spec.Template
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(pod.Labels)) {
		t.Errorf("%s: its selector does not select its own pods", d.Name)
	}
	var role config.KubernetesRole
	for _, r := range router.Discovery.Kubernetes.Roles {
		sel, err := labels.Parse(r.Selector)
		if err != nil {
			t.Fatal(err)
		}
		if sel.Matches(labels.Set(pod.Labels)) {
			role = r
			break
		}
	}
	if role.Role == "" {
		t.Fatalf("%s: no discovery role of the router's ConfigMap selects its pods %v", d.Name, pod.Labels)
	}
	c := pod.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name], ports[strconv.Itoa(int(p.ContainerPort))] = p.ContainerPort, p.ContainerPort
	}
	if ports[role.Port] == 0 {
		t.Errorf("%s: the router reaches it on port %q, which it does not declare", d.Name, role.Port)
	}
	args := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	var kv struct {
		KVConnector string `json:"kv_connector"`
		KVRole      string `json:"kv_role"`
	}
	if err := json.Unmarshal([]byte(args["--kv-transfer-config"]), &kv); err != nil {
		t.Errorf("%s: --kv-transfer-config %q: %v", d.Name, args["--kv-transfer-config"], err)
	}
	wantRole := map[config.Role]string{config.RolePrefill: "kv_producer", config.RoleDecode: "kv_consumer", config.RoleBoth: "kv_both"}[role.Role]
	if kv.KVConnector != "NixlConnector" || kv.KVRole != wantRole {
		t.Errorf("%s: --kv-transfer-config %+v; want NixlConnector as %s", d.Name, kv, wantRole)
	}
	if _, ok := args["--enable-prompt-tokens-details"]; !ok {
		t.Errorf("%s: no --enable-prompt-tokens-details (cached tokens in usage)", d.Name)
	}
	var ev struct {
		Enable    bool   `json:"enable_kv_cache_events"`
		Publisher string `json:"publisher"`
		Endpoint  string `json:"endpoint"`
	}
	if err := json.Unmarshal([]byte(args["--kv-events-config"]), &ev); err != nil || !ev.Enable || ev.Publisher != "zmq" ||
		ports[ev.Endpoint[strings.LastIndex(ev.Endpoint, ":")+1:]] == 0 {
		t.Errorf("%s: --kv-events-config %q (%v): want ZeroMQ events on a declared port", d.Name, args["--kv-events-config"], err)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if h := env["VLLM_NIXL_SIDE_CHANNEL_HOST"]; h.ValueFrom == nil || h.ValueFrom.FieldRef == nil || h.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("%s: VLLM_NIXL_SIDE_CHANNEL_HOST %+v; want the pod IP (the engine URL's host)", d.Name, h)
	}
	if p, err := strconv.Atoi(env["VLLM_NIXL_SIDE_CHANNEL_PORT"].Value); err != nil || p < 5600 || p > 5663 || ports[strconv.Itoa(p)] == 0 {
		t.Errorf("%s: VLLM_NIXL_SIDE_CHANNEL_PORT %q; want a declared port the default allowed_ports (5600-5663) cover", d.Name, env["VLLM_NIXL_SIDE_CHANNEL_PORT"].Value)
	}
	if r := c.ReadinessProbe; r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/health" || ports[r.HTTPGet.Port.String()] == 0 {
		t.Errorf("%s: readinessProbe %+v; want /health on a declared port", d.Name, r)
	}
	checkDrain(t, d, env)
	return role.Role
}

// checkDrain checks the preStop drain: drain.py from the vllm-drain ConfigMap, and a grace
// period longer than its whole bound.
func checkDrain(t *testing.T, d *appsv1.Deployment, env map[string]corev1.EnvVar) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	if l := c.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Exec == nil || strings.Join(l.PreStop.Exec.Command, " ") != "python3 /narwhal/drain.py" {
		t.Errorf("%s: preStop %+v; want drain.py", d.Name, c.Lifecycle)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			mounted = mounted || (m.Name == v.Name && m.MountPath == "/narwhal" && v.ConfigMap != nil && v.ConfigMap.Name == "vllm-drain")
		}
	}
	if !mounted {
		t.Errorf("%s: the vllm-drain ConfigMap is not mounted at /narwhal", d.Name)
	}
	bound := 0.0
	for _, k := range []string{"DRAIN_MIN_S", "DRAIN_MAX_S", "DRAIN_HOLD_S"} {
		v, err := strconv.ParseFloat(env[k].Value, 64)
		if err != nil {
			t.Errorf("%s: %s %q: %v", d.Name, k, env[k].Value, err)
		}
		bound += v
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) < bound+30 {
		t.Errorf("%s: terminationGracePeriodSeconds %v; want at least the drain's %v s and 30 s for vLLM to stop", d.Name, g, bound)
	}
}

// routerConfig is the configuration in the ConfigMap name, through Narwhal's own loader.
func routerConfig(t *testing.T, objs []object, name string) config.Config {
	t.Helper()
	for _, o := range objs {
		if cm, ok := o.typed.(*corev1.ConfigMap); ok && cm.Name == name {
			cfg, err := config.Parse([]byte(cm.Data["narwhal.yaml"]), func(string) (string, bool) { return "x", true })
			if err != nil {
				t.Fatalf("%s: the ConfigMap %s: %v", o.file, name, err)
			}
			if cfg.Discovery.Kubernetes == nil {
				t.Fatalf("%s: the ConfigMap %s has no Kubernetes discovery", o.file, name)
			}
			return cfg
		}
	}
	t.Fatalf("no ConfigMap %s under deploy/kubernetes", name)
	return config.Config{}
}

// The router reads its configuration from the ConfigMap volume as a whole (a subPath mount is
// never updated by Kubernetes, so no change would reach it), at the path its --config names;
// the InferencePool example's router configuration loads, each role naming the example's pool.
func TestRouterMountsItsConfigMapForReloads(t *testing.T) {
	objs := allManifests(t)
	for _, o := range objs {
		d, ok := o.typed.(*appsv1.Deployment)
		if !ok || d.Name != "narwhal" {
			continue
		}
		c := d.Spec.Template.Spec.Containers[0]
		path := c.Args[slices.Index(c.Args, "--config")+1]
		found := false
		for _, m := range c.VolumeMounts {
			if m.MountPath == filepath.Dir(path) {
				found = true
				if m.SubPath != "" {
					t.Errorf("the config volume is mounted with subPath %q: Kubernetes never updates it", m.SubPath)
				}
			}
		}
		if !found {
			t.Errorf("nothing is mounted at %s, the directory of --config %s", filepath.Dir(path), path)
		}
	}
	pool := routerConfig(t, objs, "narwhal-pool")
	var poolName string
	for _, o := range objs {
		if o.kind == "InferencePool" {
			var p struct {
				Metadata struct{ Name string }
			}
			json.Unmarshal(o.raw, &p)
			poolName = p.Metadata.Name
		}
	}
	for _, r := range pool.Discovery.Kubernetes.Roles {
		if r.InferencePool == "" || r.InferencePool != poolName {
			t.Errorf("the narwhal-pool configuration's role %s reads pool %q; the example pool is %q", r.Role, r.InferencePool, poolName)
		}
	}
}
