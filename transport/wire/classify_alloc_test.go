package wire

import "testing"

// Classifying the events before the first token (a chat role delta, then a token) is an
// allocation budget (issue #17): it runs on every request. Members Classify never reads (a
// choice's logprobs, an error member) are skipped, not copied.
func TestClassifyAllocations(t *testing.T) {
	role := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`)
	token := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Dis"},"logprobs":null,"finish_reason":null}]}`)
	if Classify(role) != EventMeta || Classify(token) != EventToken {
		t.Fatalf("role delta %v, token %v", Classify(role), Classify(token))
	}
	if raceEnabled {
		t.Skip("allocation budgets do not hold under the race detector (sync.Pool drops items at random)")
	}
	n := testing.AllocsPerRun(200, func() {
		Classify(role)
		Classify(token)
	})
	t.Logf("%.0f allocations for a role delta and a token", n)
	if n > 9 { // 11 while logprobs was copied
		t.Fatalf("%.0f allocations for a role delta and a token, want at most 9", n)
	}
}
