package tokenize

import (
	"context"
	"slices"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/blockkey"
	"github.com/narwhal-router/narwhal/transport/telemetry"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// TestPromptOfDiscoveredAdapter: a model the fleet lists as an adapter, not named in
// placement.tokens.models, takes its base model's source, and its name enters every key: its
// blocks never match the base model's.
func TestPromptOfDiscoveredAdapter(t *testing.T) {
	tk, err := New(config.Tokens{Default: config.TokenSource{Source: config.TokensEstimate, BlockSize: 2},
		RenderTimeoutS: 0.2, Models: []config.ModelTokens{{Name: "base", Tokens: config.TokenSource{Source: config.TokensRender, BlockSize: 2, RenderAPI: config.RenderAPIRender}}}},
		telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	noEngine := func() string { return "" }
	base, ok := tk.PromptOf(context.Background(), body(t, wire.EndpointCompletions, `{"model":"base","prompt":[1,2,3,4,5]}`), "", noEngine)
	if !ok || len(base.Keys) != 2 {
		t.Fatalf("base: %+v %v", base, ok)
	}
	if _, ok := tk.PromptOf(context.Background(), body(t, wire.EndpointCompletions, `{"model":"sql","prompt":[1,2,3,4,5]}`), "", noEngine); ok {
		t.Fatal("an unknown model not listed as an adapter took the base's source")
	}
	ad, ok := tk.PromptOf(context.Background(), body(t, wire.EndpointCompletions, `{"model":"sql","prompt":[1,2,3,4,5]}`), "base", noEngine)
	want := blockkey.Keys(nil, []uint32{1, 2, 3, 4}, 2, blockkey.Extra{Adapter: "sql"})
	if !ok || !slices.Equal(ad.Keys, want) {
		t.Fatalf("the adapter: %+v %v, want keys %v", ad, ok, want)
	}
	for i := range ad.Keys {
		if ad.Keys[i] == base.Keys[i] {
			t.Errorf("block %d of the adapter's prompt has the base model's key", i)
		}
	}
}
