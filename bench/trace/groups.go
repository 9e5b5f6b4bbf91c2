package trace

import "math/rand/v2"

// PrefixGroups is a synthetic workload of shared prefixes, the shape of llm-d's precise-prefix
// benchmark (groups of requests sharing a long system prompt or document, each with a short
// question of its own): n records, each of a group drawn uniformly from groups (seeded, so
// every arm replays the same), whose prompt is the group's prefixBlocks trace blocks followed
// by suffixBlocks blocks of its own, outputLength tokens out, arriving every 100 ms (the
// goodput scenario rescales arrivals to each offered rate).
func PrefixGroups(groups, prefixBlocks, suffixBlocks, n, outputLength int, seed uint64) []Record {
	rng := rand.New(rand.NewPCG(seed, seed))
	out := make([]Record, n)
	next := groups * prefixBlocks // the first id no prefix uses
	for i := range out {
		g := rng.IntN(groups)
		ids := make([]int, 0, prefixBlocks+suffixBlocks)
		for b := range prefixBlocks {
			ids = append(ids, g*prefixBlocks+b)
		}
		for range suffixBlocks {
			ids = append(ids, next)
			next++
		}
		out[i] = Record{Timestamp: int64(i) * 100, InputLength: len(ids) * TraceBlockTokens, OutputLength: outputLength, HashIDs: ids}
	}
	return out
}
