// Package kubernetes is the engine source of Kubernetes pods: for each configured role, the
// pods of one namespace that a label selector, a Gateway API Inference Extension InferencePool,
// or both pick, watched through client-go informers. A pod
// is an engine while it is Ready, has an IP and is not being deleted; its name comes from the
// pod's name and UID, so that every Narwhal node names it alike and a recreated pod is a new
// engine. The engine's port is a container port's number or name, its KV identity comes from
// the pod's annotations, and the rest of it from the role's template. An API server that
// cannot be reached, or that keeps a watch open past its timeout (stall.go), is an error
// report; the informers then start afresh, after a backoff, from a new list.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery"
)

// The fixed bounds of the source's calls to the API server.
const (
	// dialTimeout bounds a TCP connection to the API server.
	dialTimeout = 5 * time.Second
	// listTimeout bounds one list of a role's pods.
	listTimeout = 30 * time.Second
)

// namespaceFile is where a pod's service account says which namespace the pod runs in.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Source watches the pods of every configured role.
type Source struct {
	cfg config.KubernetesDiscovery
	// roles are cfg.Roles as the source uses them, in their order.
	roles  []role
	client *rest.RESTClient
	params runtime.ParameterCodec
	// pools reads InferencePools; nil when no role names one.
	pools     dynamic.Interface
	conns     *connections
	namespace string
	selectors []string
	// watchTimeout is every watch's timeoutSeconds; watchGrace how much longer one may stay
	// open before it is a stall.
	watchTimeout, watchGrace time.Duration
	retry                    discovery.Backoff
	log                      *slog.Logger
	// warned remembers the pods whose problem was logged (by UID and problem), so a pod that
	// cannot be an engine is logged once, not at every change; poolWarned the same of pools.
	warned     map[types.UID]string
	poolWarned map[string]string
}

// New returns the source of cfg, with the in-cluster configuration or cfg.Kubeconfig's; a
// failing API server is retried after retryInitial, doubling up to retryMax.
func New(cfg config.KubernetesDiscovery, retryInitial, retryMax time.Duration, log *slog.Logger) (*Source, error) {
	rc, namespace, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "narwhal"
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	conns := &connections{open: map[*trackedConn]struct{}{}}
	rc.Dial = conns.dial
	var pools dynamic.Interface
	for _, r := range cfg.Roles {
		if r.InferencePool != "" && pools == nil {
			// InferencePools are custom resources: JSON only, through a client of their own.
			if pools, err = dynamic.NewForConfig(rest.CopyConfig(rc)); err != nil {
				return nil, fmt.Errorf("discovery.kubernetes: %w", err)
			}
		}
	}
	// A REST client that knows pods alone: client-go's typed clients would link in every API
	// group Kubernetes has.
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("discovery.kubernetes: %w", err)
	}
	rc.APIPath, rc.GroupVersion = "/api", &corev1.SchemeGroupVersion
	rc.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	client, err := rest.RESTClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("discovery.kubernetes: %w", err)
	}
	s := &Source{cfg: cfg, client: client, params: runtime.NewParameterCodec(scheme), pools: pools, conns: conns, namespace: namespace,
		watchTimeout: cfg.WatchTimeoutS.Duration(), watchGrace: config.KubernetesWatchGrace * time.Second,
		retry: discovery.Backoff{Initial: retryInitial, Max: retryMax},
		log:   log.With("source", "kubernetes", "namespace", namespace), warned: map[types.UID]string{}, poolWarned: map[string]string{}}
	if s.watchTimeout < time.Second { // a configuration built in code, without defaults
		s.watchTimeout = 60 * time.Second
	}
	for i, r := range cfg.Roles {
		sel, err := labels.Parse(r.Selector)
		if err != nil { // validated by config
			return nil, fmt.Errorf("discovery.kubernetes.roles[%d].selector: %w", i, err)
		}
		s.selectors = append(s.selectors, sel.String())
		s.roles = append(s.roles, newRole(r))
	}
	return s, nil
}

// role is one discovery.kubernetes.roles entry as the source uses it.
type role struct {
	role   config.Role
	scheme string
	// pool is the InferencePool whose pods (and port) the role takes, if any.
	pool string
	// portNumber is the port when it was given as a number, else portName is the container
	// port's name.
	portNumber int
	portName   string
	// template is every engine of the role before its name, URL, role and KV identity.
	template config.Engine
}

func newRole(r config.KubernetesRole) role {
	out := role{role: r.Role, scheme: r.Scheme, pool: r.InferencePool, template: r.Template.Engine()}
	if n, err := strconv.Atoi(r.Port); err == nil {
		out.portNumber = n
	} else {
		out.portName = r.Port
	}
	return out
}

// restConfig reads the connection settings and the namespace to watch.
func restConfig(cfg config.KubernetesDiscovery) (*rest.Config, string, error) {
	if cfg.Kubeconfig != "" {
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}, &clientcmd.ConfigOverrides{})
		rc, err := cc.ClientConfig()
		if err != nil {
			return nil, "", fmt.Errorf("discovery.kubernetes.kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		ns := cfg.Namespace
		if ns == "" {
			if ns, _, err = cc.Namespace(); err != nil {
				return nil, "", fmt.Errorf("discovery.kubernetes.kubeconfig %s: %w", cfg.Kubeconfig, err)
			}
		}
		return rc, ns, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, "", fmt.Errorf("discovery.kubernetes: no in-cluster configuration (set discovery.kubernetes.kubeconfig when Narwhal runs outside Kubernetes): %w", err)
	}
	ns := cfg.Namespace
	if ns == "" {
		b, err := os.ReadFile(namespaceFile)
		if err != nil {
			return nil, "", fmt.Errorf("discovery.kubernetes.namespace is not set and the pod's own namespace is unknown: %w", err)
		}
		ns = strings.TrimSpace(string(b))
	}
	return rc, ns, nil
}

// Name is "kubernetes <namespace>".
func (s *Source) Name() string { return "kubernetes " + s.namespace }

// Run reports the selected pods' engines until ctx ends.
func (s *Source) Run(ctx context.Context, report func(discovery.Report)) {
	report = discovery.Changes(report)
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(s.log.Handler()))
	discovery.Retry(ctx, &s.retry, s.log, report, func() error { return s.session(ctx, report) })
}

// session runs one informer per role until the API server fails or ctx ends.
func (s *Source) session(ctx context.Context, report func(discovery.Report)) error {
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		// The next session (or none, once stopped) starts on fresh connections.
		s.conns.closeAll()
	}()
	failed := make(chan error, 1)
	fail := func(err error) {
		if sctx.Err() == nil {
			select {
			case failed <- err:
			default:
			}
		}
	}
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(_, _ any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	var synced []cache.InformerSynced
	start := func(lw cache.ListerWatcher, obj runtime.Object, what string) (cache.SharedIndexInformer, error) {
		inf := cache.NewSharedIndexInformerWithOptions(lw, obj, cache.SharedIndexInformerOptions{ObjectDescription: what})
		if err := errors.Join(inf.SetTransform(trim), inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			fail(fmt.Errorf("watch %s in %s: %w", what, s.namespace, err))
		})); err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
		synced = append(synced, inf.HasSynced)
		wg.Go(func() { inf.RunWithContext(sctx) })
		return inf, nil
	}
	informers := make([]cache.SharedIndexInformer, len(s.selectors))
	for i, sel := range s.selectors {
		inf, err := start(s.listWatch(sel, fail), &corev1.Pod{}, "pods ("+sel+")")
		if err != nil {
			return err
		}
		informers[i] = inf
	}
	pools := map[string]cache.SharedIndexInformer{}
	for _, r := range s.roles {
		if r.pool == "" || pools[r.pool] != nil {
			continue
		}
		inf, err := start(s.poolListWatch(r.pool, fail), &unstructured.Unstructured{}, "inferencepool "+r.pool)
		if err != nil {
			return err
		}
		pools[r.pool] = inf
	}
	ready := make(chan bool, 1)
	wg.Go(func() { ready <- cache.WaitForCacheSync(sctx.Done(), synced...) })
	select {
	case <-ctx.Done():
		return nil
	case err := <-failed:
		return err
	case ok := <-ready:
		if !ok {
			return nil // ended before the first list
		}
	}
	report(discovery.Report{Engines: s.engines(informers, s.poolsNow(pools))})
	s.retry.Reset()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case <-changed:
			report(discovery.Report{Engines: s.engines(informers, s.poolsNow(pools))})
		}
	}
}

// listWatch lists and watches the namespace's pods that sel selects, telling fail of every
// call the API server refused or did not answer: the informer alone retries a refused watch in
// silence.
func (s *Source) listWatch(sel string, fail func(error)) plainListWatch {
	pods := func(o metav1.ListOptions) *rest.Request {
		o.LabelSelector = sel
		return s.client.Get().Namespace(s.namespace).Resource("pods").VersionedParams(&o, s.params)
	}
	return plainListWatch{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := &corev1.PodList{}
			err := pods(o).Timeout(listTimeout).Do(ctx).Into(list)
			if err != nil {
				fail(fmt.Errorf("list pods (%s) in %s: %w", sel, s.namespace, err))
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			dog := s.watchdog("pods ("+sel+")", fail)
			w, err := pods(s.watchOptions(o)).Timeout(s.watchTimeout).Watch(ctx)
			if err != nil {
				dog.stop()
				fail(fmt.Errorf("watch pods (%s) in %s: %w", sel, s.namespace, err))
				return nil, err
			}
			return dog.wrap(w), nil
		},
	}}
}

// connections are the source's connections to the API server, which it closes when a session
// ends: the HTTP/2 transport client-go builds keeps idle connections (and a goroutine reading
// each) that nothing else can close, and a session that failed must not reuse them.
type connections struct {
	mu   sync.Mutex
	open map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	owner *connections
}

func (c *trackedConn) Close() error {
	c.owner.mu.Lock()
	delete(c.owner.open, c)
	c.owner.mu.Unlock()
	return c.Conn.Close()
}

func (c *connections) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, owner: c}
	c.mu.Lock()
	c.open[tc] = struct{}{}
	c.mu.Unlock()
	return tc, nil
}

func (c *connections) closeAll() {
	c.mu.Lock()
	open := c.open
	c.open = map[*trackedConn]struct{}{}
	c.mu.Unlock()
	for tc := range open {
		tc.Conn.Close()
	}
}

// trim drops what the source never reads from a pod or a pool before the informer stores it.
func trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		o.ManagedFields = nil
	case *unstructured.Unstructured:
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// engines is the set the informers hold now: every role's usable pods, a pod several roles
// select under the first. A role of an InferencePool takes the pods its pool (as pools holds
// it now) selects, on the pool's port; one whose pool is missing takes none.
func (s *Source) engines(informers []cache.SharedIndexInformer, pools map[string]pool) []config.Engine {
	var out []config.Engine
	seen := map[types.UID]bool{}
	for i, inf := range informers {
		role := s.roles[i]
		p, pooled := pools[role.pool]
		if role.pool != "" && !pooled {
			continue
		}
		for _, obj := range inf.GetStore().List() {
			pod, ok := obj.(*corev1.Pod)
			if !ok || seen[pod.UID] || (pooled && !p.selector.Matches(labels.Set(pod.Labels))) {
				continue
			}
			seen[pod.UID] = true
			if pooled {
				role.portNumber, role.portName = p.port, ""
			}
			e, err := s.engine(pod, role)
			if err != nil {
				if s.warned[pod.UID] != err.Error() {
					s.warned[pod.UID] = err.Error()
					s.log.Warn("pod left out", "pod", pod.Name, "uid", pod.UID, "err", err)
				}
				continue
			}
			if e.Name != "" {
				out = append(out, e)
			}
		}
	}
	for uid := range s.warned {
		if !seen[uid] {
			delete(s.warned, uid)
		}
	}
	return out
}

// engine is the engine pod is, or none (a zero engine) while it is not Ready, has no IP or is
// being deleted; an error says why a pod that should be an engine cannot be.
func (s *Source) engine(pod *corev1.Pod, role role) (config.Engine, error) {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || !podReady(pod) {
		return config.Engine{}, nil
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return config.Engine{}, fmt.Errorf("pod IP %q: %w", pod.Status.PodIP, err)
	}
	port := role.portNumber
	if role.portName != "" {
		port = containerPort(pod, role.portName)
		if port == 0 {
			return config.Engine{}, fmt.Errorf("no container port named %q", role.portName)
		}
	}
	e := role.template.Clone()
	e.Name = EngineName(pod.Name, pod.UID)
	e.URL = role.scheme + "://" + netip.AddrPortFrom(ip.Unmap(), uint16(port)).String()
	e.Role = role.role
	a := s.cfg.Annotations
	e.KV.EngineID = pod.Annotations[a.EngineID]
	e.KV.Endpoint = pod.Annotations[a.Endpoint]
	if err := config.CheckEngine(e, nil); err != nil {
		return config.Engine{}, fmt.Errorf("annotations %s, %s: %w", a.EngineID, a.Endpoint, err)
	}
	return e, nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func containerPort(pod *corev1.Pod, name string) int {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return int(p.ContainerPort)
			}
		}
	}
	return 0
}

// maxPodName is how much of a pod's name an engine name keeps: 64 characters less the UID's
// eight and a '-'.
const maxPodName = 55

// EngineName is the name of the engine a pod is: <pod name>-<the first 8 hex digits of its
// UID>, the pod name cut to 55 characters. The same on every node; new for a new pod.
func EngineName(pod string, uid types.UID) string {
	short := strings.ReplaceAll(string(uid), "-", "")
	if len(short) > 8 {
		short = short[:8]
	}
	if len(pod) > maxPodName {
		pod = pod[:maxPodName]
	}
	return pod + "-" + short
}
