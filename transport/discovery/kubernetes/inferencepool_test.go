package kubernetes

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

// installInferencePoolCRD creates the InferencePool CRD (testdata) and waits until the API
// server serves the resource; it returns a client of it in ns as the admin.
func (a *apiServer) installInferencePoolCRD() dynamic.ResourceInterface {
	a.t.Helper()
	crd, err := os.ReadFile("testdata/inferencepool-crd.yaml")
	if err != nil {
		a.t.Fatal(err)
	}
	resp, err := a.adminHTTP.Post(a.URL+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/yaml", bytes.NewReader(crd))
	if err != nil {
		a.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		a.t.Fatalf("create the InferencePool CRD: %d %s", resp.StatusCode, body)
	}
	dc, err := dynamic.NewForConfigAndClient(a.adminConfig, a.adminHTTP)
	if err != nil {
		a.t.Fatal(err)
	}
	pools := dc.Resource(inferencePools).Namespace(ns)
	sourcetest.WaitUntil(a.t, 30*time.Second, "the InferencePool resource served", func() bool {
		_, err := pools.List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
	return pools
}

// inferencePool is an InferencePool of ns as kubectl would apply it: the pods labelled match,
// on port, with an endpoint picker the source ignores.
func inferencePool(name string, match map[string]any, port int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": match},
			"targetPorts":       []any{map[string]any{"number": port}},
			"endpointPickerRef": map[string]any{"name": name + "-epp", "portNumber": int64(9002)},
		},
	}}
}

// A role that names an InferencePool takes the pods the pool selects (and the role's own
// selector narrows), on the pool's target port, its role from the entry: nothing while the pool
// does not exist (logged), the pool's pods once it does, and, when the pool is edited, the pods
// and port it says then. The source runs with exactly deploy/kubernetes/rbac.yaml's permissions.
func TestInferencePoolPicksPods(t *testing.T) {
	a := startAPIServer(t)
	a.namespace(ns)
	pools := a.installInferencePoolCRD()
	kubeconfig := a.applyRBAC(ns)
	tmpl := config.EngineTemplate{Models: []string{"m"}, KV: config.TemplateKV{Connector: "nixl", TransferModes: []string{"pull"}}}
	cfg := config.KubernetesDiscovery{Kubeconfig: kubeconfig, WatchTimeoutS: 60, Annotations: config.KubernetesAnnotations{
		EngineID: config.DefaultEngineIDAnnotation, Endpoint: config.DefaultEndpointAnnotation}, Roles: []config.KubernetesRole{
		{Role: config.RolePrefill, InferencePool: "qwen", Selector: "llm-d.ai/role=prefill", Scheme: "http", Template: tmpl},
		{Role: config.RoleDecode, InferencePool: "qwen", Selector: "llm-d.ai/role=decode", Scheme: "http", Template: tmpl},
	}}
	var log sourcetest.LogBuffer
	rec := sourcetest.Start(t, newSource(t, cfg, &log))
	pa := a.ready(a.pod("p-a", map[string]string{"app": "qwen", "llm-d.ai/role": "prefill"}, nil), "10.1.0.1", true)
	da := a.ready(a.pod("d-a", map[string]string{"app": "qwen", "llm-d.ai/role": "decode"}, nil), "10.1.0.2", true)
	dx := a.ready(a.pod("d-x", map[string]string{"app": "other", "llm-d.ai/role": "decode"}, nil), "10.1.0.3", true)
	rec.WaitNames(t, 10*time.Second) // no pool yet: no engines
	sourcetest.WaitUntil(t, 10*time.Second, "the missing pool logged", func() bool {
		return strings.Contains(log.String(), `msg="inferencepool unusable" source=kubernetes namespace=llm inferencepool=qwen err="no such InferencePool in the namespace`)
	})

	ctx := context.Background()
	if _, err := pools.Create(ctx, inferencePool("qwen", map[string]any{"app": "qwen"}, 8200), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rep := rec.WaitNames(t, 10*time.Second, names(da, pa)...)
	if e := sourcetest.Engine(t, rep, names(pa)[0]); e.URL != "http://10.1.0.1:8200" || e.Role != config.RolePrefill {
		t.Fatalf("prefill engine %+v", e)
	}
	if e := sourcetest.Engine(t, rep, names(da)[0]); e.URL != "http://10.1.0.2:8200" || e.Role != config.RoleDecode {
		t.Fatalf("decode engine %+v", e)
	}

	// The pool edited: another app's pods, another port.
	p := inferencePool("qwen", map[string]any{"app": "other"}, 8300)
	cur, err := pools.Get(ctx, "qwen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.SetResourceVersion(cur.GetResourceVersion())
	if _, err := pools.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rep = rec.WaitNames(t, 10*time.Second, names(dx)...)
	if e := sourcetest.Engine(t, rep, names(dx)[0]); e.URL != "http://10.1.0.3:8300" || e.Role != config.RoleDecode {
		t.Fatalf("decode engine of the edited pool %+v", e)
	}

	// The pool deleted: its roles select nothing.
	if err := pools.Delete(ctx, "qwen", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.WaitNames(t, 10*time.Second)
	rec.Stop(t)

	// deploy/kubernetes/vllm/inferencepool.yaml: the API server takes its pool, and the router
	// configuration beside it, loaded as `narwhal serve` loads it, finds the pods labelled as
	// that directory's Deployments label theirs, on the pool's port.
	example, routerYAML := deployExample(t)
	if _, err := pools.Create(ctx, example, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	routerCfg, err := config.Parse([]byte(routerYAML), func(string) (string, bool) { return "x", true })
	if err != nil {
		t.Fatal(err)
	}
	k := *routerCfg.Discovery.Kubernetes
	k.Kubeconfig = kubeconfig
	rec = sourcetest.Start(t, newSource(t, k, &log))
	vp := a.ready(a.pod("vllm-prefill-0", map[string]string{"app.kubernetes.io/name": "vllm", "narwhal.io/role": "prefill"}, nil), "10.1.0.4", true)
	vd := a.ready(a.pod("vllm-decode-0", map[string]string{"app.kubernetes.io/name": "vllm", "narwhal.io/role": "decode"}, nil), "10.1.0.5", true)
	rep = rec.WaitNames(t, 10*time.Second, names(vd, vp)...)
	if e := sourcetest.Engine(t, rep, names(vp)[0]); e.URL != "http://10.1.0.4:8000" || e.Role != config.RolePrefill {
		t.Fatalf("the example's prefill engine %+v", e)
	}
	if e := sourcetest.Engine(t, rep, names(vd)[0]); e.URL != "http://10.1.0.5:8000" || e.Role != config.RoleDecode {
		t.Fatalf("the example's decode engine %+v", e)
	}
	a.adminHTTP.CloseIdleConnections()
	rec.Stop(t)
}

// deployExample reads deploy/kubernetes/vllm/inferencepool.yaml: its InferencePool (moved to
// the test's namespace) and its ConfigMap's router configuration.
func deployExample(t *testing.T) (*unstructured.Unstructured, string) {
	t.Helper()
	b, err := os.ReadFile("../../../deploy/kubernetes/vllm/inferencepool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pool *unstructured.Unstructured
	var router string
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatal(err)
		}
		switch obj.GetKind() {
		case "InferencePool":
			obj.SetNamespace(ns)
			pool = obj
		case "ConfigMap":
			router, _, _ = unstructured.NestedString(obj.Object, "data", "narwhal.yaml")
		}
	}
	if pool == nil || router == "" {
		t.Fatal("deploy/kubernetes/vllm/inferencepool.yaml holds no InferencePool or no router configuration")
	}
	return pool, router
}
