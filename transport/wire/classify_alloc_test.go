package wire

import "testing"

// Classifying the events before the first token (a chat role delta, then a token) is an
// allocation budget (issue #17): it runs on every request. Classify scans the event in place, so
// it allocates nothing (it allocated 9 for these two while it decoded them).
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
	if n != 0 {
		t.Fatalf("%.0f allocations for a role delta and a token, want none", n)
	}
}

// The other events every request's classification sees allocate nothing either: a completions
// token, the usage chunk (also through ClassifyFast, which hands it to Classify after the first
// token) and the Responses API's typed events.
func TestClassifyEventsAllocateNothing(t *testing.T) {
	for _, ev := range classifyEvents {
		data := []byte(ev.data)
		if got := Classify(data); got != ev.want {
			t.Fatalf("%s: kind %d, want %d", ev.name, got, ev.want)
		}
		if raceEnabled {
			continue
		}
		if n := testing.AllocsPerRun(200, func() { Classify(data) }); n != 0 {
			t.Errorf("%s: %.0f allocations, want none", ev.name, n)
		}
		if n := testing.AllocsPerRun(200, func() { ClassifyFast(data) }); n != 0 {
			t.Errorf("%s: ClassifyFast makes %.0f allocations, want none", ev.name, n)
		}
	}
	if raceEnabled {
		t.Skip("allocation budgets do not hold under the race detector (sync.Pool drops items at random)")
	}
}
