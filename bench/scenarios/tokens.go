package scenarios

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/report"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/bench/trace"
	"github.com/narwhal-router/narwhal/config"
)

// tokenArms are the tokens scenario's arms (issue #34): prefix placement on the estimate
// (word blocks, no events), on the engines' KV events with prompt tokens from the engines'
// render endpoints or from the router's own tokenizer (the simulator's tokenizer.json), and no
// prefix preference at all.
var tokenArms = []fleetPolicy{
	{Name: "estimate", Disaggregation: config.DisaggAuto, Placement: config.PlacePrefix, ScrapeS: 0.25},
	{Name: "events+tokens", Disaggregation: config.DisaggAuto, Placement: config.PlacePrefix, ScrapeS: 0.25, KVEvents: true,
		Tokens: config.TokensRender},
	{Name: "events+local", Disaggregation: config.DisaggAuto, Placement: config.PlacePrefix, ScrapeS: 0.25, KVEvents: true,
		Tokens: config.TokensLocal},
	{Name: "none", Disaggregation: config.DisaggAuto, Placement: config.PlaceP2C, ScrapeS: 0.25},
}

// Tokens replays the public trace against the fleet scenario's rig, paced, once with the
// engines' usual caches and once with caches of a quarter of the replay's working set (so
// they evict what the trace reuses), under each of tokenArms, and reports the prefix hit
// rate, the router's prediction error, the time to first token and the output rate.
func Tokens(env harness.Env) (*report.Section, error) {
	sec := report.NewSection("tokens", "prefix placement on the engines' tokens and events against the estimate (issue #34)")
	rep, err := fleetReplay(env, sec)
	if rep == nil || err != nil {
		return sec, err
	}
	working, small := overflowingCache(rep, fleetEngine())
	sec.Printf("workload: %s; working set %d blocks of 16 tokens; the overflowing caches hold %d", rep.Summary(), working, small)
	for _, w := range []struct {
		name     string
		kvBlocks int
	}{{"trace", 0}, {"overflowing caches", small}} {
		t := report.NewTable("arm", "ok", "TTFT p50 ms", "TTFT p99 ms", "out tok/s", "prefix hit %", "prediction error (tokens, mean)",
			"tokenize p50 / p99 ms (≤ bucket)")
		for _, p := range tokenArms {
			p.KVBlocks = w.kvBlocks
			harness.Logf("tokens: %s, %s", w.name, p.Name)
			r, err := runFleetArm(p, rep, fleetMode{Name: "paced"})
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", w.name, p.Name, err)
			}
			ttft, _ := r.sorted()
			t.Row(p.Name, fmt.Sprintf("%d/%d", r.ok, len(rep.Requests)), msInt(pct(ttft, 0.5)), msInt(pct(ttft, 0.99)),
				fmt.Sprintf("%.0f", r.tokensPerS()), fmt.Sprintf("%.1f", 100*r.hitRate()), fmt.Sprintf("%.0f", r.predictionError),
				fmt.Sprintf("%g / %g", r.tokenizeP50, r.tokenizeP99))
			key := fmt.Sprintf("tokens_%s_%s_", slug(w.name), slug(p.Name))
			sec.Figure(key+"ttft_p99_ms", ms1(pct(ttft, 0.99)))
			sec.Figure(key+"prefix_hit_pct", report.Round(100*r.hitRate(), 1))
			sec.Figure(key+"prediction_error_tokens", report.Round(r.predictionError, 0))
		}
		sec.Printf("%s, paced:", w.name)
		sec.Add(t.String())
	}
	return sec, nil
}

// overflowingCache is rep's working set (every distinct trace block's tokens) in e's blocks,
// and a cache size of a quarter of it, but never less than one prompt of e's longest.
func overflowingCache(rep *trace.Replay, e sim.Options) (working, cache int) {
	seen := map[int]bool{}
	for _, q := range rep.Requests {
		for _, h := range q.HashIDs {
			seen[h] = true
		}
	}
	working = len(seen) * rep.Scale.BlockTokens / e.BlockSize
	return working, max(e.MaxModelLen/e.BlockSize, working/4)
}

// predictionError is the mean absolute difference between predicted_cached_tokens and
// cached_tokens over the access log's lines that have both.
func (l *lockedBuffer) predictionError() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sum, n float64
	for _, line := range bytes.Split(l.b.Bytes(), []byte("\n")) {
		var a struct {
			Predicted *int `json:"predicted_cached_tokens"`
			Cached    int  `json:"cached_tokens"`
		}
		if json.Unmarshal(line, &a) != nil || a.Predicted == nil {
			continue
		}
		sum += float64(max(*a.Predicted-a.Cached, a.Cached-*a.Predicted))
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

// tokenizeTimes reads the router's narwhal_prompt_tokenization_seconds histogram for source
// and returns the upper bounds, in milliseconds, of the buckets holding its p50 and p99.
func (r *fleetRig) tokenizeTimes(source string) (p50, p99 float64) {
	resp, err := r.client.Get(r.admin + "/metrics")
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	type bucket struct{ le, n float64 }
	var buckets []bucket
	prefix := `narwhal_prompt_tokenization_seconds_bucket{`
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, prefix) || !strings.Contains(line, `source="`+source+`"`) {
			continue
		}
		i := strings.Index(line, `le="`)
		j := strings.LastIndexByte(line, ' ')
		if i < 0 || j < 0 {
			continue
		}
		le, err1 := strconv.ParseFloat(line[i+4:i+4+strings.IndexByte(line[i+4:], '"')], 64)
		n, err2 := strconv.ParseFloat(line[j+1:], 64)
		if err1 == nil && err2 == nil {
			buckets = append(buckets, bucket{le, n})
		}
	}
	if len(buckets) == 0 || buckets[len(buckets)-1].n == 0 {
		return 0, 0
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	total := buckets[len(buckets)-1].n
	at := func(q float64) float64 {
		for _, b := range buckets {
			if b.n >= q*total {
				return 1000 * b.le
			}
		}
		return math.Inf(1)
	}
	return at(0.5), at(0.99)
}
