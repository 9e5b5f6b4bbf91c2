package wire

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// A leg body built by reference has exactly the bytes of the copied rewrite, for every endpoint
// and both legs, and references (not copies) the client's large values.
func TestLegBodyMatchesTheCopiedRewrite(t *testing.T) {
	long := strings.Repeat("word ", 4000)
	bodies := map[Endpoint]string{
		EndpointCompletions: `{"model":"m", "prompt":"` + long + `","stream":true,"stream_options":{"include_usage":false,"x":1},"max_tokens":9,"min_tokens":2}`,
		EndpointChat:        `{"model":"m","messages":[{"role":"user","content":"` + long + `"}],"max_completion_tokens":5,"kv_transfer_params":{"a":1}}`,
		EndpointResponses:   `{"model":"m","input":"` + long + `","store":false,"stream":false}`,
	}
	kv := []byte(`{"remote_block_ids":[1,2],"remote_host":"10.0.0.5","remote_port":5600,"pad":"` + strings.Repeat("p", 2000) + `"}`)
	for ep, raw := range bodies {
		b, err := ParseClientBody(ep, []byte(raw))
		if err != nil {
			t.Fatalf("%s: %v", ep, err)
		}
		for _, params := range [][]byte{nil, []byte(`{"do_remote_decode":true}`), kv} {
			for leg, pair := range map[string][2][]byte{
				"prefill": {b.AppendPrefillBody(nil, params), b.PrefillLegBody(params).Bytes()},
				"decode":  {b.AppendDecodeBody(nil, params), b.DecodeLegBody(params).Bytes()},
			} {
				if !bytes.Equal(pair[0], pair[1]) {
					t.Fatalf("%s %s: by reference\n%.300s\ncopied\n%.300s", ep, leg, pair[1], pair[0])
				}
			}
			lb := b.PrefillLegBody(params)
			var viaRead bytes.Buffer
			if _, err := io.Copy(&viaRead, struct{ io.Reader }{lb.Reader()}); err != nil || !bytes.Equal(viaRead.Bytes(), lb.Bytes()) || lb.Len() != viaRead.Len() {
				t.Fatalf("%s: Read gives %d bytes, Len %d, err %v", ep, viaRead.Len(), lb.Len(), err)
			}
			var viaWriteTo bytes.Buffer
			if _, err := lb.Reader().WriteTo(&viaWriteTo); err != nil || !bytes.Equal(viaWriteTo.Bytes(), lb.Bytes()) {
				t.Fatalf("%s: WriteTo differs", ep)
			}
			copied := 0
			for _, s := range lb.segs {
				if len(s) < refMin {
					copied += len(s)
				}
			}
			if copied > 4096 {
				t.Fatalf("%s: %d bytes copied for a %d-byte body", ep, copied, len(raw))
			}
		}
	}
}
