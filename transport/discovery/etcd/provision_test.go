package etcd

import (
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

// An etcd registrant is held to the checks every engine passes, through the real path (etcd,
// the source, the catalog and the router's provisioner): an engine URL at the router's own
// listener, a pin at it or on another host are skipped and shown; credentials in the URL are
// left out by the source, logged without them;
// a registration within the rules joins.
func TestRegistrantsPassTheProvisioner(t *testing.T) {
	e := sourcetest.StartEtcd(t)
	c := client(t, e.URL)
	var log sourcetest.LogBuffer
	src := newSource(e.URL, &log)
	cat := sourcetest.Catalog(t, src, &log, 8000, 8001)
	put(t, c, prefix+"self", `{"url": "http://127.0.0.1:8000", "role": "both"}`)
	put(t, c, prefix+"pin-admin", `{"url": "http://127.0.0.1:9100", "role": "prefill", "kv": {"endpoint": "127.0.0.1:8001"}}`)
	put(t, c, prefix+"pin-elsewhere", `{"url": "http://10.0.0.6:8000", "role": "prefill", "kv": {"endpoint": "10.0.0.5:5600"}}`)
	put(t, c, prefix+"creds", `{"url": "http://u:s3cretpw@10.0.0.8:8000", "role": "decode"}`)
	put(t, c, prefix+"good", `{"url": "http://10.0.0.9:8000", "role": "prefill", "kv": {"endpoint": "10.0.0.9:5600"}}`)

	want := map[string]string{"self": "own listener", "pin-admin": "own listener", "pin-elsewhere": "own host"}
	sourcetest.WaitUntil(t, 5*time.Second, "every bad registration skipped", func() bool {
		st := cat.Status().Sources[0]
		return len(st.Skipped) == len(want) && len(st.Engines) == 1 && st.Engines[0] == "good"
	})
	for _, s := range cat.Status().Sources[0].Skipped {
		if !strings.Contains(s.Error, want[s.Name]) {
			t.Errorf("%s skipped for %q; want %q", s.Name, s.Error, want[s.Name])
		}
	}
	// A value the source cannot take as an engine is left out by the source itself, logged.
	if !strings.Contains(log.String(), "key="+prefix+"creds") || !strings.Contains(log.String(), "credentials") ||
		strings.Contains(log.String(), "s3cretpw") {
		t.Fatalf("the password reached the log:\n%s", log.String())
	}
}
