package sim

import (
	"fmt"
	"strings"
	"testing"

	json "github.com/goccy/go-json"

	routerwire "github.com/narwhal-router/narwhal/transport/wire"
)

// The simulator's block hashes (what its KV events publish) and the router's prefix-index
// blocks are one scheme: wherever a router block of 64 words ends, a simulator block of 16
// tokens ends too, with the same hash — for completions text, token ids, chat messages and
// text with escapes and non-ASCII words.
func TestBlockHashesAgreeWithTheRoutersPromptBlocks(t *testing.T) {
	var words []string
	for i := range 200 {
		words = append(words, fmt.Sprintf("w%d", i%37))
	}
	words[5], words[77] = "café", "\"quoted\""
	text := strings.Join(words, " \n ")
	ids := make([]int, 150)
	for i := range ids {
		ids[i] = 1000 + i
	}
	idsJSON, _ := json.Marshal(ids)
	textJSON, _ := json.Marshal(text)
	chatJSON, _ := json.Marshal([]map[string]any{{"role": "system", "content": text[:300]}, {"role": "user", "content": text[300:]}})
	cases := []struct {
		name string
		ep   routerwire.Endpoint
		api  endpoint
		body string
	}{
		{"completions text", routerwire.EndpointCompletions, completionsAPI, `{"model":"m","prompt":` + string(textJSON) + `}`},
		{"completions token ids", routerwire.EndpointCompletions, completionsAPI, `{"model":"m","prompt":` + string(idsJSON) + `}`},
		{"chat", routerwire.EndpointChat, chatAPI, `{"model":"m","messages":` + string(chatJSON) + `}`},
	}
	for _, c := range cases {
		body, err := routerwire.ParseClientBody(c.ep, []byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		router := body.Prompt(64).Blocks
		var w wireRequest
		if err := json.Unmarshal([]byte(c.body), &w); err != nil {
			t.Fatal(err)
		}
		sim, _ := promptHashes(c.api, &w, 16, false)
		if len(router) < 2 || len(sim) < 4*len(router) {
			t.Fatalf("%s: %d router blocks, %d simulator blocks", c.name, len(router), len(sim))
		}
		for i, h := range router {
			if sim[4*i+3] != h {
				t.Fatalf("%s: router block %d is %x, the simulator's block %d %x", c.name, i, h, 4*i+3, sim[4*i+3])
			}
		}
	}
}
