package wire

import (
	"strings"
	"testing"
)

func TestResponsesLegRewrites(t *testing.T) {
	raw := []byte(`{"model":"m","input":"hi","max_output_tokens":9,"min_tokens":2,"stream":true,"stream_options":{"include_obfuscation":false},"store":false}`)
	b, err := ParseClientBody(EndpointResponses, raw)
	if err != nil {
		t.Fatal(err)
	}
	kv := []byte(`{"do_remote_decode":true}`)
	pre := string(b.AppendPrefillBody(nil, kv))
	for _, want := range []string{`"max_output_tokens":1`, `"stream":false`, `"store":false`, `"kv_transfer_params":{"do_remote_decode":true}`} {
		if !strings.Contains(pre, want) {
			t.Errorf("prefill %s lacks %s", pre, want)
		}
	}
	if strings.Contains(pre, "min_tokens") || strings.Contains(pre, "stream_options") {
		t.Errorf("prefill keeps a minimum or stream options: %s", pre)
	}
	dec := string(b.AppendDecodeBody(nil, []byte(`{"do_remote_prefill":true}`)))
	for _, want := range []string{`"max_output_tokens":9`, `"min_tokens":2`, `"stream":true`, `"kv_transfer_params":{"do_remote_prefill":true}`} {
		if !strings.Contains(dec, want) {
			t.Errorf("decode %s lacks %s", dec, want)
		}
	}
	if _, err := ParseClientBody(EndpointResponses, []byte(`{"model":"m","input":"hi","max_output_tokens":2,"min_tokens":3}`)); err == nil ||
		!strings.Contains(err.Error(), "max_output_tokens") {
		t.Fatalf("min_tokens above max_output_tokens: %v", err)
	}
}

func TestResponsesEventClassification(t *testing.T) {
	cases := []struct {
		data string
		want EventKind
	}{
		{`{"type":"response.created","sequence_number":0,"response":{"id":"r","usage":null}}`, EventMeta},
		{`{"type":"response.in_progress","sequence_number":1,"response":{}}`, EventMeta},
		{`{"type":"response.output_item.added","sequence_number":2,"item":{}}`, EventMeta},
		{`{"type":"response.output_text.delta","sequence_number":3,"delta":""}`, EventMeta},
		{`{"type":"response.output_text.delta","sequence_number":3,"delta":" alpha"}`, EventToken},
		{`{"type":"response.reasoning_text.delta","sequence_number":3,"delta":"hm"}`, EventToken},
		{`{"type":"response.output_item.done","sequence_number":4,"item":{}}`, EventToken},
		{`{"type":"response.completed","sequence_number":5,"response":{"usage":{"output_tokens":3}}}`, EventDone},
		{`{"type":"response.incomplete","sequence_number":5,"response":{}}`, EventDone},
		{`{"type":"response.failed","sequence_number":5,"response":{"error":{"code":"server_error","message":"x"}}}`, EventError},
		{`{"type":"error","sequence_number":5,"code":"500","message":"boom","param":null}`, EventError},
	}
	for _, tc := range cases {
		if got := Classify([]byte(tc.data)); got != tc.want {
			t.Errorf("Classify(%s) = %d, want %d", tc.data, got, tc.want)
		}
		if got := ClassifyFast([]byte(tc.data)); got != tc.want {
			t.Errorf("ClassifyFast(%s) = %d, want %d", tc.data, got, tc.want)
		}
	}
	se := ParseStreamError([]byte(`{"type":"error","sequence_number":5,"code":"503","message":"busy","param":null}`))
	if se.Status != 503 || se.Message != "busy" {
		t.Errorf("error event: %+v", se)
	}
	se = ParseStreamError([]byte(`{"type":"response.failed","response":{"error":{"code":"server_error","message":"x"}}}`))
	if se.Status != 500 || se.Message != "x" || !strings.Contains(string(se.Body), `"code":"server_error"`) {
		t.Errorf("response.failed: %+v %s", se, se.Body)
	}
	if u, ok := TokensOf([]byte(`{"type":"response.completed","response":{"usage":{"output_tokens":3}}}`)); !ok || u.Completion != 3 {
		t.Errorf("output tokens %+v %v", u, ok)
	}
}
