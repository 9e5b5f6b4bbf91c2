package kubernetes

import (
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

// A pod's KV endpoint annotation is a registrant's pin: through the real path (the API server,
// the source, the catalog, the router's provisioner) one naming a router port, a metadata
// address or a host outside the template's allowed_endpoints is skipped, its reason shown; one
// within the policy joins.
func TestAnnotationPinsPassTheProvisioner(t *testing.T) {
	a := startAPIServer(t)
	a.namespace(ns)
	kubeconfig := a.applyRBAC(ns)
	var log sourcetest.LogBuffer
	cat := sourcetest.Catalog(t, newSource(t, runtimeFor(kubeconfig), &log), &log, 8000, 8001)
	want := map[string]string{}
	for i, tc := range []struct{ pin, why string }{
		{"10.1.0.1:8001", "router's own listeners"},
		{"169.254.169.254:80", "metadata"},
		{"10.2.0.1:5600", "allowed_endpoints do not include"},
		{"10.1.0.4:5600", ""},
	} {
		ip := "10.1.0." + string(rune('1'+i))
		pod := a.ready(a.pod("p-"+string(rune('a'+i)), prefill, map[string]string{config.DefaultEndpointAnnotation: tc.pin}), ip, true)
		want[names(pod)[0]] = tc.why
	}
	sourcetest.WaitUntil(t, 10*time.Second, "every pod reported", func() bool {
		st := cat.Status().Sources[0]
		return len(st.Skipped)+len(st.Engines) == len(want)
	})
	st := cat.Status().Sources[0]
	for _, s := range st.Skipped {
		if why := want[s.Name]; why == "" || !strings.Contains(s.Error, why) {
			t.Errorf("%s skipped for %q; want %q", s.Name, s.Error, why)
		}
	}
	if len(st.Engines) != 1 || want[st.Engines[0]] != "" {
		t.Fatalf("engines %v, skipped %+v", st.Engines, st.Skipped)
	}
	a.adminHTTP.CloseIdleConnections()
}
