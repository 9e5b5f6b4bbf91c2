package wire

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/goccy/go-json"
)

// FuzzEventReader feeds an engine's stream body, whatever it is, through the SSE reader and
// both classifiers. They must never panic; every event must be bytes of the input in order,
// end with its blank line and stay within the event bound.
func FuzzEventReader(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n",
		": keep-alive\n\n: keep-alive\n\n",
		"data: {\"error\":{\"message\":\"x\",\"code\":500}}\r\n\r\n",
		"data: a\ndata: b\n\nevent: x\n\n\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}\n\n",
		"data: {\"usage\":{\"completion_tokens\":3}}\n\n",
		"data: {\"choices\":[{\"text\":\"unterminated",
		"data: not json\n\n",
	} {
		f.Add([]byte(s), uint8(16))
	}
	f.Fuzz(func(t *testing.T, in []byte, bufSize uint8) {
		br := bufio.NewReaderSize(bytes.NewReader(in), 16+int(bufSize))
		r := NewEventReader(br)
		rest := in
		for {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if len(ev) > maxEventBytes+2 || !bytes.HasSuffix(ev, []byte("\n")) {
				t.Fatalf("event %q does not end with its blank line or is too large", ev)
			}
			i := bytes.Index(rest, ev)
			if i < 0 {
				t.Fatalf("event %q is not bytes of the input in order", ev)
			}
			rest = rest[i+len(ev):]
			data := EventData(ev)
			k, fast := Classify(data), ClassifyFast(data)
			if (k == EventDone) != (fast == EventDone) || (k == EventError) != (fast == EventError) {
				t.Fatalf("%q: Classify %d and ClassifyFast %d disagree on [DONE] or an error", data, k, fast)
			}
			_ = ParseStreamError(data)
			_, _ = TokensOf(data)
		}
	})
}

// FuzzParseClientBody checks client body validation against anything a client may send: it must
// never panic, and a body it accepts must give both engine legs valid JSON.
func FuzzParseClientBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hi","stream":true,"stream_options":{"include_usage":false}}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`,
		`{"model":"m","prompt":"hi","kv_transfer_params":{"do_remote_decode":true},"kv_transfer_\u0070arams":1}`,
		`{"model":"m","prompt":["a","b"],"n":2,"max_tokens":1e300}`,
		`{"model":1}`, `[]`, `{"model":"m","prompt":"\ud800"}`, `{"model":"m","prompt":"x","max_tokens":NaN}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, chat bool) {
		ep := EndpointCompletions
		if chat {
			ep = EndpointChat
		}
		b, err := ParseClientBody(ep, in)
		if err != nil {
			return
		}
		params := []byte(`{"do_remote_decode":true}`)
		if p := b.AppendPrefillBody(nil, params); !json.Valid(p) {
			t.Fatalf("prefill body of %q is not JSON: %q", in, p)
		}
		if d := b.AppendDecodeBody(nil, params); !json.Valid(d) {
			t.Fatalf("decode body of %q is not JSON: %q", in, d)
		}
		b.Release()
	})
}

// FuzzAssembler folds arbitrary event data into a non-streaming response: it must never panic,
// and a body it produces must be JSON.
func FuzzAssembler(f *testing.F) {
	for _, s := range []string{
		"{\"id\":\"c\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n{\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":\"length\"}],\"usage\":{\"completion_tokens\":2}}",
		"{\"choices\":[{\"index\":7,\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"{\"}}]}}]}",
		"{\"choices\":[{\"index\":-1,\"delta\":{\"content\":\"x\"}}]}\n[DONE]",
		"not json\n{}\n{\"choices\":null}",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, chat bool) {
		ep := EndpointCompletions
		if chat {
			ep = EndpointChat
		}
		a := NewAssembler(ep)
		for _, line := range bytes.Split(in, []byte("\n")) {
			a.Add(line)
		}
		out, err := a.Body()
		if err == nil && !json.Valid(out) {
			t.Fatalf("assembled %q from %q", out, in)
		}
	})
}
