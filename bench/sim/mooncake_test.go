package sim

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// mooncakeDecode is a decode leg's body in the shape vLLM's Mooncake proxy sends.
func mooncakeDecode(prompt, bootstrap, engineID, transferID string) string {
	return `{"model":"sim-model","prompt":` + quote(prompt) + `,"max_tokens":2,"stream":false,"kv_transfer_params":` +
		`{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":` + quote(bootstrap) +
		`,"remote_engine_id":` + quote(engineID) + `,"transfer_id":` + quote(transferID) + `}}`
}

func mooncakePrefill(prompt, transferID string) string {
	return `{"model":"sim-model","prompt":` + quote(prompt) + `,"max_tokens":1,"stream":false,"kv_transfer_params":` +
		`{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":` + quote(transferID) + `}}`
}

// The bootstrap server answers /query in vLLM's shape; a decode sent before its prefill waits
// for the blocks registered under its transfer id and pulls exactly them; a wrong transfer id or
// engine id gets no KV until the lease ends, then the load fails (500 under the fail policy).
func TestMooncakeTransfer(t *testing.T) {
	t.Parallel()
	f, err := StartFleet(FleetOptions{Prefill: 1, Decode: 1, Engine: Options{KVLease: 400 * time.Millisecond,
		PrefillPerToken: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	p, d := f.Engine("p0"), f.Engine("d0")
	boot := "http://" + p.KVEndpoint()

	code, _, body := get(t, boot+"/query")
	if code != 200 || !strings.Contains(string(body), `"0":{"engine_id":"`+p.EngineID()+`"`) || !strings.Contains(string(body), `"worker_addr"`) {
		t.Fatalf("/query: %d %s", code, body)
	}

	decoded := make(chan int, 1)
	go func() {
		code, _, _ := post(t, d.URL(), "/v1/completions", mooncakeDecode(fortyWords, boot, p.EngineID(), "xfer-1"))
		decoded <- code
	}()
	eventually(t, 2*time.Second, "the decode leg to arrive", func() bool { return d.Stats().DecodeRequests == 1 })
	if code, _, body := post(t, p.URL(), "/v1/completions", mooncakePrefill(fortyWords, "xfer-1")); code != 200 ||
		string(descriptorOf(t, body)) != "null" {
		t.Fatalf("prefill: %d %s", code, body)
	}
	if code := <-decoded; code != 200 {
		t.Fatalf("decode: %d", code)
	}
	if ps, ds := p.Stats(), d.Stats(); ps.BlocksRead != 3 || ds.BlocksLoaded != 3 || ds.KVLoads != 1 || ps.BlocksPinned != 0 {
		t.Fatalf("producer read %d (pinned %d), consumer loaded %d in %d loads; want the prompt's 3 blocks moved once",
			ps.BlocksRead, ps.BlocksPinned, ds.BlocksLoaded, ds.KVLoads)
	}

	for _, tc := range []struct{ name, engineID, transferID string }{
		{"wrong transfer id", p.EngineID(), "xfer-never"},
		{"wrong engine id", "not-the-producer", "xfer-2"},
	} {
		start := time.Now()
		code, _, body := post(t, d.URL(), "/v1/completions", mooncakeDecode(fortyWords, boot, tc.engineID, tc.transferID))
		if took := time.Since(start); code != http.StatusInternalServerError || took < 400*time.Millisecond ||
			!strings.Contains(string(body), "KV transfer failed") {
			t.Fatalf("%s: %d after %v: %s; want 500 once the lease ended", tc.name, code, took, body)
		}
	}
	if n := d.Stats().KVLoadFailures; n != 2 {
		t.Fatalf("%d load failures, want 2", n)
	}
}
