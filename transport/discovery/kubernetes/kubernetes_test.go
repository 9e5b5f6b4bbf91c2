package kubernetes

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

const ns = "llm"

// runtimeFor is the configuration the tests run: prefill pods on their container port named
// http, decode pods on port 8200, and every other vllm pod as both (the last entry selects
// every pod; earlier entries keep theirs).
func runtimeFor(kubeconfig string) config.KubernetesDiscovery {
	tmpl := config.EngineTemplate{MaxInflight: 16, Models: []string{"m"}, KV: config.TemplateKV{Connector: "nixl", TransferModes: []string{"pull"},
		AllowedEndpoints: []string{"10.1.0.0/16"}}}
	return config.KubernetesDiscovery{Kubeconfig: kubeconfig, Annotations: config.KubernetesAnnotations{
		EngineID: config.DefaultEngineIDAnnotation, Endpoint: config.DefaultEndpointAnnotation}, Roles: []config.KubernetesRole{
		{Role: config.RolePrefill, Selector: "app=vllm,role=prefill", Port: "http", Scheme: "http", Template: tmpl},
		{Role: config.RoleDecode, Selector: "app=vllm,role=decode", Port: "8200", Scheme: "http", Template: tmpl},
		{Role: config.RoleBoth, Selector: "app=vllm", Port: "8300", Scheme: "https", Template: tmpl},
	}}
}

func newSource(t *testing.T, cfg config.KubernetesDiscovery, log *sourcetest.LogBuffer) *Source {
	t.Helper()
	s, err := New(cfg, 100*time.Millisecond, 500*time.Millisecond, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pod creates a pod, bound to a node (so that a deletion waits for a kubelet that never comes:
// the pod stays terminating), not yet Ready.
func (a *apiServer) pod(name string, labels, annotations map[string]string) *corev1.Pod {
	a.t.Helper()
	p, err := a.Admin.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8100}, {Name: "metrics", ContainerPort: 9100}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	return p
}

// ready sets what a kubelet would: the pod's IP and its Ready condition.
func (a *apiServer) ready(p *corev1.Pod, ip string, ready bool) *corev1.Pod {
	a.t.Helper()
	ctx := context.Background()
	cur, err := a.Admin.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	cur.Status.Phase = corev1.PodRunning
	cur.Status.PodIP, cur.Status.PodIPs = ip, nil
	if ip != "" {
		cur.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	cur.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	out, err := a.Admin.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	return out
}

func (a *apiServer) delete(name string, grace int64) {
	a.t.Helper()
	if err := a.Admin.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		a.t.Fatal(err)
	}
}

func names(pods ...*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, EngineName(p.Name, p.UID))
	}
	return out
}

var (
	prefill = map[string]string{"app": "vllm", "role": "prefill"}
	decode  = map[string]string{"app": "vllm", "role": "decode"}
)

// What an operator sees as pods come, turn Ready, lose readiness, terminate and are recreated:
// the source, with exactly the permissions of deploy/kubernetes/rbac.yaml, reports each set in
// order; ports by name and by number, the KV identity from annotations, a pod several entries
// select under the first; a recreated pod and a reused IP are new engines.
func TestPodsBecomeEngines(t *testing.T) {
	a := startAPIServer(t)
	a.namespace(ns)
	kubeconfig := a.applyRBAC(ns)
	var log sourcetest.LogBuffer
	rec := sourcetest.Start(t, newSource(t, runtimeFor(kubeconfig), &log))
	rec.WaitNames(t, 10*time.Second) // no pods yet: an empty set, reported

	pa := a.pod("p-a", prefill, map[string]string{config.DefaultEngineIDAnnotation: "eid-a", config.DefaultEndpointAnnotation: "10.1.0.1:5600"})
	pa = a.ready(pa, "10.1.0.1", true)
	rep := rec.WaitNames(t, 10*time.Second, names(pa)...)
	e := sourcetest.Engine(t, rep, names(pa)[0])
	if e.URL != "http://10.1.0.1:8100" || e.Role != config.RolePrefill || e.KV.EngineID != "eid-a" || e.KV.Endpoint != "10.1.0.1:5600" ||
		e.MaxInflight != 16 || e.Models[0] != "m" || e.KV.AllowedEndpoints[0] != "10.1.0.0/16" {
		t.Fatalf("engine %+v", e)
	}
	if !strings.HasPrefix(e.Name, "p-a-") || len(e.Name) != len("p-a-")+8 {
		t.Fatalf("name %q, want p-a-<8 hex digits of the UID>", e.Name)
	}

	// A pod without an IP or not Ready is no engine; one that is, is.
	da := a.pod("d-a", decode, nil)
	a.ready(da, "", false)
	dOther := a.pod("d-other", map[string]string{"app": "vllm"}, nil) // only the last entry selects it
	dOther = a.ready(dOther, "10.1.0.9", true)
	rec.WaitNames(t, 10*time.Second, names(dOther, pa)...)
	da = a.ready(da, "10.1.0.2", true)
	rep = rec.WaitNames(t, 10*time.Second, names(da, dOther, pa)...)
	if e := sourcetest.Engine(t, rep, names(da)[0]); e.URL != "http://10.1.0.2:8200" || e.Role != config.RoleDecode || e.KV.EngineID != "" {
		t.Fatalf("decode engine %+v", e)
	}
	if e := sourcetest.Engine(t, rep, names(dOther)[0]); e.URL != "https://10.1.0.9:8300" || e.Role != config.RoleBoth {
		t.Fatalf("both engine %+v", e)
	}

	// Readiness lost and back.
	a.ready(da, "10.1.0.2", false)
	rec.WaitNames(t, 10*time.Second, names(dOther, pa)...)
	a.ready(da, "10.1.0.2", true)
	rec.WaitNames(t, 10*time.Second, names(da, dOther, pa)...)

	// A terminating pod leaves at once (its kubelet would still be draining it).
	a.delete("d-other", 30)
	rec.WaitNames(t, 10*time.Second, names(da, pa)...)
	a.delete("d-other", 0)

	// p-a is deleted and recreated under the same name with a new IP: a new engine; a new pod
	// given p-a's old IP is not the old engine either.
	a.delete("p-a", 0)
	rec.WaitNames(t, 10*time.Second, names(da)...)
	pa2 := a.ready(a.pod("p-a", prefill, nil), "10.1.0.3", true)
	pb := a.ready(a.pod("p-b", prefill, nil), "10.1.0.1", true)
	rep = rec.WaitNames(t, 10*time.Second, names(da, pa2, pb)...)
	if names(pa2)[0] == names(pa)[0] || sourcetest.Engine(t, rep, names(pb)[0]).URL != "http://10.1.0.1:8100" {
		t.Fatalf("recreated p-a %s (was %s), p-b %+v", names(pa2)[0], names(pa)[0], rep.Engines)
	}

	// A pod that cannot be an engine is left out and logged once: a bad KV endpoint annotation.
	bad := a.ready(a.pod("p-bad", prefill, map[string]string{config.DefaultEndpointAnnotation: "not-an-address"}), "10.1.0.7", true)
	a.ready(a.pod("p-c", prefill, nil), "10.1.0.8", true)
	rep = rec.Wait(t, 10*time.Second, "p-c's engine", func(r sourcetest.Report) bool { return r.Err == nil && len(r.Engines) == 4 })
	for _, e := range rep.Engines {
		if strings.HasPrefix(e.Name, "p-bad-") {
			t.Fatalf("p-bad reported: %+v", e)
		}
	}
	if want := `pod left out" source=kubernetes namespace=llm pod=p-bad uid=` + string(bad.UID); !strings.Contains(log.String(), want) ||
		!strings.Contains(log.String(), `kv.endpoint: \"not-an-address\" is not an address`) {
		t.Errorf("the log does not say why p-bad is left out:\n%s", log.String())
	}

	// Stopped, the source leaves nothing running (the test's own connections closed first).
	a.adminHTTP.CloseIdleConnections()
	rec.Stop(t)
}

// A ServiceAccount without the Role is told so; a named port the pod lacks leaves it out; the
// API server going away is an error report (the catalog keeps the last set) and, back, the set
// is reported again and followed.
func TestAPIServerOutage(t *testing.T) {
	a := startAPIServer(t)
	a.namespace(ns)
	unbound := a.kubeconfig(ns, "default") // no RoleBinding names it
	var denied sourcetest.LogBuffer
	rec := sourcetest.Start(t, newSource(t, runtimeFor(unbound), &denied))
	rec.WaitErr(t, 10*time.Second, `list pods (app=vllm,role=prefill) in llm: pods is forbidden: User "system:serviceaccount:llm:default" cannot list resource "pods"`)
	rec.Stop(t)

	kubeconfig := a.applyRBAC(ns)
	cfg := runtimeFor(kubeconfig)
	cfg.Roles[0].Port = "vllm" // the pods' ports are named http and metrics
	var log sourcetest.LogBuffer
	rec = sourcetest.Start(t, newSource(t, cfg, &log))
	rec.WaitNames(t, 10*time.Second)
	pa := a.ready(a.pod("p-a", prefill, nil), "10.1.0.1", true)
	da := a.ready(a.pod("d-a", decode, nil), "10.1.0.2", true)
	rec.WaitNames(t, 10*time.Second, names(da)...)
	if !strings.Contains(log.String(), `no container port named \"vllm\"`) {
		t.Errorf("the log does not say p-a lacks the port:\n%s", log.String())
	}
	_ = pa

	a.Stop()
	start := time.Now()
	rec.WaitErr(t, 10*time.Second, "connection refused")
	t.Logf("outage reported after %v", time.Since(start).Round(time.Millisecond))
	rec.WaitErr(t, 10*time.Second, "pods") // retried, still failing

	a.Start()
	start = time.Now()
	rec.WaitNames(t, 20*time.Second, names(da)...)
	t.Logf("set reported again %v after the API server was ready", time.Since(start).Round(time.Millisecond))
	db := a.ready(a.pod("d-b", decode, nil), "10.1.0.3", true)
	rec.WaitNames(t, 10*time.Second, names(da, db)...)
}

func TestEngineNameOfAPod(t *testing.T) {
	uid := types.UID("1a2b3c4d-0000-4000-8000-000000000000")
	if got := EngineName("vllm-decode-0", uid); got != "vllm-decode-0-1a2b3c4d" {
		t.Errorf("got %q", got)
	}
	long := strings.Repeat("x", 80)
	got := EngineName(long, uid)
	if len(got) != 64 || !strings.HasSuffix(got, "-1a2b3c4d") {
		t.Errorf("got %q (%d)", got, len(got))
	}
	if err := config.CheckEngine(config.Engine{Name: got, URL: "http://10.0.0.1:1", Role: config.RoleDecode}, nil); err != nil {
		t.Error(err)
	}
}

func TestNewNeedsACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := New(config.KubernetesDiscovery{}, time.Second, time.Second, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "no in-cluster configuration (set discovery.kubernetes.kubeconfig") {
		t.Fatalf("New outside a cluster: %v", err)
	}
	_, err = New(config.KubernetesDiscovery{Kubeconfig: "/nonexistent/kubeconfig"}, time.Second, time.Second, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "discovery.kubernetes.kubeconfig /nonexistent/kubeconfig") {
		t.Fatalf("New with a missing kubeconfig: %v", err)
	}
}
