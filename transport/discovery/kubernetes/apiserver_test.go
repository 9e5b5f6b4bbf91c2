package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

// kubeVersion is the Kubernetes release `make kube-apiserver` builds: the Makefile's
// KUBE_VERSION, read so that the two never disagree.
func kubeVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KUBE_VERSION\s*:=\s*(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile sets no KUBE_VERSION")
	}
	return string(m[1])
}

// apiServerBinary finds the kube-apiserver `make kube-apiserver` built (or
// $NARWHAL_KUBE_APISERVER). Without it the test fails, naming the target, unless
// NARWHAL_SKIP_KUBE=1 allows a skip.
func apiServerBinary(t *testing.T) string {
	t.Helper()
	path := os.Getenv("NARWHAL_KUBE_APISERVER")
	if path == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatal(err)
			}
			cache = filepath.Join(home, ".cache")
		}
		path = filepath.Join(cache, "narwhal", "kube-apiserver-"+kubeVersion(t))
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("NARWHAL_SKIP_KUBE") == "1" {
			t.Skipf("no kube-apiserver at %s and NARWHAL_SKIP_KUBE=1", path)
		}
		t.Fatalf("no kube-apiserver at %s: run `make kube-apiserver` (.ci/run does; about 3 minutes, once per machine), point NARWHAL_KUBE_APISERVER at one, or set NARWHAL_SKIP_KUBE=1 to skip", path)
	}
	return path
}

// apiServer is a real Kubernetes API server (no controller manager, no kubelet) on a free
// loopback port, over a real etcd, authorizing with RBAC; a test may stop and start it again.
type apiServer struct {
	*sourcetest.Process
	URL    string
	CAFile string
	// Admin is a client in system:masters; its connections are the test's own.
	Admin       *kubernetes.Clientset
	adminHTTP   *http.Client
	adminConfig *rest.Config
	t           *testing.T
}

func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	bin := apiServerBinary(t)
	etcd := sourcetest.StartEtcd(t)
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	write(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	token := randomHex(t)
	tokens := filepath.Join(dir, "tokens.csv")
	write(t, tokens, []byte(token+",admin,admin,system:masters\n"))
	port := sourcetest.FreePort(t)
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	// The readiness probe skips verification: the serving certificate appears with the server.
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ready := func() bool {
		req, _ := http.NewRequest(http.MethodGet, url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := probe.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	a := &apiServer{URL: url, CAFile: filepath.Join(dir, "certs", "apiserver.crt"), t: t,
		Process: sourcetest.NewProcess(t, "kube-apiserver", bin, []string{
			"--etcd-servers=" + etcd.URL,
			fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1",
			"--cert-dir=" + filepath.Join(dir, "certs"), // self-signed serving certificates, kept for a restart
			"--service-account-key-file=" + keyFile, "--service-account-signing-key-file=" + keyFile,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--token-auth-file=" + tokens, "--authorization-mode=RBAC",
			"--service-cluster-ip-range=10.0.0.0/24",
			"--enable-priority-and-fairness=false", "--profiling=false",
		}, ready)}
	a.Start()
	rc := &rest.Config{Host: a.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: a.CAFile}}
	a.adminConfig = rc
	if a.adminHTTP, err = rest.HTTPClientFor(rc); err != nil {
		t.Fatal(err)
	}
	if a.Admin, err = kubernetes.NewForConfigAndClient(rc, a.adminHTTP); err != nil {
		t.Fatal(err)
	}
	return a
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// namespace creates a namespace with its default ServiceAccount (which the ServiceAccount
// admission plugin wants for every pod; no controller manager is there to make it).
func (a *apiServer) namespace(name string) {
	a.t.Helper()
	ctx := context.Background()
	if _, err := a.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.Admin.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

// applyRBAC creates deploy/kubernetes/rbac.yaml's ServiceAccount, Role and RoleBinding in ns
// (the binding's subject moved to ns) and returns a kubeconfig file that authenticates as that
// ServiceAccount, with ns as its context's namespace: the source then has exactly the
// permissions the manifest grants.
func (a *apiServer) applyRBAC(ns string) string {
	a.t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile("../../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		a.t.Fatal(err)
	}
	var sa string
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			a.t.Fatalf("deploy/kubernetes/rbac.yaml: %v", err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			sa = o.Name
			_, err = a.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = a.Admin.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			for i := range o.Subjects {
				o.Subjects[i].Namespace = ns
			}
			_, err = a.Admin.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			a.t.Fatalf("deploy/kubernetes/rbac.yaml: unexpected %T", obj)
		}
		if err != nil {
			a.t.Fatal(err)
		}
	}
	return a.kubeconfig(ns, sa)
}

// kubeconfig writes a kubeconfig file that authenticates as the ServiceAccount sa of ns, with
// ns as its context's namespace.
func (a *apiServer) kubeconfig(ns, sa string) string {
	a.t.Helper()
	tok, err := a.Admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	path := filepath.Join(a.t.TempDir(), "kubeconfig")
	write(a.t, path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: narwhal, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: narwhal, namespace: %q}}]
current-context: test
`, a.URL, a.CAFile, tok.Status.Token, ns)))
	return path
}

func ptr[T any](v T) *T { return &v }
