package wire

import (
	"bufio"
	"bytes"
	"io"
	"testing"
)

// tokenEvent is one of vLLM's completion chunks, as a decode stream carries it.
const tokenEvent = "data: {\"id\":\"cmpl-6f1c2d3e-0000-4000-8000-000000000002\",\"object\":\"text_completion\",\"created\":1760000001,\"model\":\"Qwen/Qwen3-0.6B\",\"choices\":[{\"index\":0,\"text\":\" token\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n"

// BenchmarkEventReader is the per-event cost of reading a decode stream after commit: split the
// next event off the engine's bytes, find its data and classify it (ns/op is one event).
func BenchmarkEventReader(b *testing.B) {
	body := bytes.Repeat([]byte(tokenEvent), 256)
	src := bytes.NewReader(body)
	br := bufio.NewReaderSize(src, 2048)
	r := NewEventReader(br)
	b.ReportAllocs()
	b.SetBytes(int64(len(tokenEvent)))
	for i := 0; i < b.N; i++ {
		ev, err := r.Next()
		if err == io.EOF {
			src.Reset(body)
			br.Reset(src)
			ev, err = r.Next()
		}
		if err != nil {
			b.Fatal(err)
		}
		if ClassifyFast(EventData(ev)) != EventToken {
			b.Fatal("not a token")
		}
	}
}

// BenchmarkClassifyFirstToken is the full classification the events before the first token get.
func BenchmarkClassifyFirstToken(b *testing.B) {
	data := EventData([]byte(tokenEvent))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if Classify(data) != EventToken {
			b.Fatal("not a token")
		}
	}
}

// BenchmarkParseClientBody is the admission-time validation of a client body.
func BenchmarkParseClientBody(b *testing.B) {
	raw := []byte(fixtureClientBody)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := ParseClientBody(EndpointCompletions, raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPrefillBody and BenchmarkDecodeBody are the per-attempt rewrites of the client body
// into each leg's body, into a reused buffer as the engine client does.
func BenchmarkPrefillBody(b *testing.B) {
	body, err := ParseClientBody(EndpointCompletions, []byte(fixtureClientBody))
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = body.AppendPrefillBody(buf[:0], nixlPrefillParams)
	}
}

func BenchmarkDecodeBody(b *testing.B) {
	body, err := ParseClientBody(EndpointCompletions, []byte(fixtureClientBody))
	if err != nil {
		b.Fatal(err)
	}
	desc := []byte(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[0,1,2],"remote_engine_id":"e1","remote_request_id":"cmpl-x-0-1a2b3c4d","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}`)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = body.AppendDecodeBody(buf[:0], desc)
	}
}

// scanBenchBodies are the objects ScanObject indexes on every request: a client body, an engine's
// prefill answer and the chat answer a non-streaming request assembles.
func scanBenchBodies(b *testing.B) []struct {
	name string
	data []byte
} {
	return []struct {
		name string
		data []byte
	}{
		{"client-body", []byte(fixtureClientBody)},
		{"prefill-response", fixture(b, "prefill-response-newest.json")},
		{"chat-response", fixture(b, "chat-response.json")},
	}
}

// BenchmarkScanObject is the validating member scan (what json.Valid and a lenient scan after it
// used to do in two passes) of each of scanBenchBodies.
func BenchmarkScanObject(b *testing.B) {
	for _, tc := range scanBenchBodies(b) {
		b.Run(tc.name, func(b *testing.B) {
			fields := make([]Field, 0, 16)
			b.SetBytes(int64(len(tc.data)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := ScanObject(tc.data, fields[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
