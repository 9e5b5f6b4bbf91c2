package wire

import "testing"

// classifyEvents are the events whose classification runs on every request: the ones before a
// stream's first token (the chat role delta, then the first token of chat, completions and the
// Responses API) and the usage chunk, which ClassifyFast hands to Classify at the end.
var classifyEvents = []struct {
	name string
	data string
	want EventKind
}{
	{"chat-role", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`, EventMeta},
	{"chat-token", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Dis"},"logprobs":null,"finish_reason":null}]}`, EventToken},
	{"completions-text", `{"id":"cmpl-6f1c2d3e-0000-4000-8000-000000000002","object":"text_completion","created":1760000001,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,"text":" token","logprobs":null,"finish_reason":null,"stop_reason":null}]}`, EventToken},
	{"usage", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}`, EventUsage},
	{"responses-created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"m","output":[],"usage":null}}`, EventMeta},
	{"responses-delta", `{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" alpha","logprobs":[]}`, EventToken},
	{"responses-arguments-delta", `{"type":"response.function_call_arguments.delta","sequence_number":5,"item_id":"fc_1","output_index":0,"delta":"{\"city\":"}`, EventToken},
}

// BenchmarkClassify is the full classification of each of classifyEvents.
func BenchmarkClassify(b *testing.B) {
	for _, ev := range classifyEvents {
		data := []byte(ev.data)
		b.Run(ev.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if Classify(data) != ev.want {
					b.Fatal("wrong kind")
				}
			}
		})
	}
}
