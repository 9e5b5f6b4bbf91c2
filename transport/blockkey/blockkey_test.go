package blockkey

import (
	"slices"
	"testing"
)

func ids(n int, from uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}

// The key rules: a chain over full blocks only; the same tokens and extra keys give the same
// keys; a change in block i changes every key from i on and none before; the adapter changes
// every block, the salt (on the first block) every block through the chain; every key is in
// the token domain.
func TestKeysFollowVLLMsChainAndExtraKeys(t *testing.T) {
	base := Keys(nil, ids(40, 1), 16, Extra{})
	if len(base) != 2 {
		t.Fatalf("40 tokens in blocks of 16: %d keys, want the 2 full blocks", len(base))
	}
	changed := ids(40, 1)
	changed[20] = 999
	for _, c := range []struct {
		name   string
		keys   []uint64
		shared int // leading keys equal to base
	}{
		{"the same prompt", Keys(nil, ids(40, 1), 16, Extra{}), 2},
		{"a longer prompt", Keys(nil, ids(64, 1), 16, Extra{}), 2},
		{"block 1 differs", Keys(nil, changed, 16, Extra{}), 1},
		{"another adapter", Keys(nil, ids(40, 1), 16, Extra{Adapter: "lora-a"}), 0},
		{"a salt", Keys(nil, ids(40, 1), 16, Extra{Salt: "s"}), 0},
		{"another block size", Keys(nil, ids(40, 1), 8, Extra{}), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := 0
			for n < min(len(c.keys), len(base)) && c.keys[n] == base[n] {
				n++
			}
			if n != c.shared {
				t.Fatalf("shares %d leading keys with the base prompt, want %d", n, c.shared)
			}
			for _, k := range c.keys {
				if !IsKey(k) {
					t.Fatalf("key %x is outside the token domain", k)
				}
			}
		})
	}
	a := Keys(nil, ids(32, 1), 16, Extra{Adapter: "x", Salt: "ab"})
	b := Keys(nil, ids(32, 1), 16, Extra{Adapter: "xa", Salt: "b"})
	if a[0] == b[0] {
		t.Fatal("extra keys are not length-prefixed: (x, ab) and (xa, b) collide")
	}
	if got := (Extra{Adapter: "l", Salt: "s"}).Of(0, nil); !slices.Equal(got, []string{"l", "s"}) {
		t.Fatalf("block 0's extra keys %v, want the adapter then the salt, as vLLM orders them", got)
	}
	if got := (Extra{Adapter: "l", Salt: "s"}).Of(1, nil); !slices.Equal(got, []string{"l"}) {
		t.Fatalf("block 1's extra keys %v, want the adapter alone", got)
	}
	if Block(0, false, ids(4, 1), nil) == Block(0, true, ids(4, 1), nil) {
		t.Fatal("a first block and a block whose parent key is 0 collide")
	}
}
