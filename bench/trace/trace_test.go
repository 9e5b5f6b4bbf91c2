package trace

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"go.uber.org/goleak"

	"github.com/narwhal-router/narwhal/bench/sim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const excerpt = "testdata/mooncake-head200.jsonl" // the first 200 lines of the shared trace

// fullTrace is the vendored public trace (bench/traces/README.md), gzip-compressed.
const fullTrace = "../traces/mooncake-conversation.jsonl.gz"

func TestLoadExcerpt(t *testing.T) {
	recs, err := Load(excerpt)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 200 {
		t.Fatalf("%d records, want 200", len(recs))
	}
	first := recs[0]
	if first.Timestamp != 0 || first.InputLength != 6758 || first.OutputLength != 500 || len(first.HashIDs) != 14 ||
		first.HashIDs[0] != 0 || first.HashIDs[13] != 13 {
		t.Errorf("first record %+v", first)
	}
	if recs[10].Timestamp != 3000 {
		t.Errorf("record 10 at %d ms, want 3000", recs[10].Timestamp)
	}
}

func TestReadRejectsBadRecords(t *testing.T) {
	good := `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}`
	for _, tc := range []struct{ name, text, want string }{
		{"not JSON", good + "\n{", "line 2"},
		{"time goes back", good + "\n" + strings.Replace(good, `"timestamp": 5`, `"timestamp": 4`, 1), "line 2: timestamp 4 is before"},
		{"no input", strings.Replace(good, `"input_length": 600`, `"input_length": 0`, 1), "line 1: input_length 0"},
		{"no output", strings.Replace(good, `"output_length": 3`, `"output_length": 0`, 1), "line 1: output_length 0"},
		{"hash ids short", strings.Replace(good, `[0, 1]`, `[0]`, 1), "1 hash_ids for input_length 600: want ceil(600 / 512) = 2"},
		{"negative hash id", strings.Replace(good, `[0, 1]`, `[0, -1]`, 1), "hash id -1"},
		{"empty", "\n\n", "no records"},
	} {
		if _, err := Read(strings.NewReader(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := Load("testdata/nope.jsonl"); err == nil || !strings.Contains(err.Error(), "nope.jsonl") {
		t.Errorf("missing file: %v", err)
	}
}

func TestScaling(t *testing.T) {
	recs, err := Load(excerpt)
	if err != nil {
		t.Fatal(err)
	}
	s := Scale{TimeScale: 0.01, BlockTokens: 64, MaxInputTokens: 2048, MaxOutputTokens: 50, Skip: 1, Limit: 20}
	r, err := NewReplay(recs, s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Scale.String(), "time ×0.01 (100× faster), prompt lengths ×0.125 (a 512-token trace block = 64 tokens), "+
		"output lengths ×0.125, prompts capped at 2048 tokens, outputs capped at 50 tokens, records from #1, at most 20"; got != want {
		t.Errorf("scale printed as\n%s\nwant\n%s", got, want)
	}
	if len(r.Requests) != 20 || r.Requests[0].Index != 1 {
		t.Fatalf("%d requests from #%d", len(r.Requests), r.Requests[0].Index)
	}
	// Record 1: input 7322 → 915.25 → 915 tokens over ceil(915/64) = 15 blocks; output
	// 490 → 61.25 → capped at 50. Record 10 (3000 ms) arrives 30 ms in.
	q := r.Requests[0]
	if q.InputTokens != 915 || len(strings.Fields(q.Prompt)) != 915 || q.OutputTokens != 50 || len(q.HashIDs) != 15 || q.At != 0 {
		t.Errorf("record 1 scaled to %d tokens (%d words), output %d, %d blocks, at %v",
			q.InputTokens, len(strings.Fields(q.Prompt)), q.OutputTokens, len(q.HashIDs), q.At)
	}
	if q := r.Requests[9]; q.Index != 10 || q.At != 30*time.Millisecond {
		t.Errorf("record 10 at %v, want 30ms", q.At)
	}
	// Record 6 has 23141 tokens: 2892.6 scaled, capped at 2048 = 32 whole blocks.
	if q := r.Requests[5]; q.InputTokens != 2048 || len(q.HashIDs) != 32 {
		t.Errorf("record 6: %d tokens, %d blocks; want the cap of 2048 over 32 blocks", q.InputTokens, len(q.HashIDs))
	}
	if sum := r.Summary(); sum.Requests != 20 || sum.Span != r.Requests[19].At || sum.MaxInput != 2048 {
		t.Errorf("summary %v", sum)
	}

	var body struct {
		Model     string `json:"model"`
		Prompt    string `json:"prompt"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
	}
	if err := json.Unmarshal(q.CompletionsBody("m \"x\""), &body); err != nil || body.Model != `m "x"` ||
		body.Prompt != q.Prompt || body.MaxTokens != 50 || !body.Stream {
		t.Errorf("completions body: %v %+v", err, body)
	}

	var chat struct {
		Messages []struct{ Role, Content string } `json:"messages"`
		Max      int                              `json:"max_completion_tokens"`
	}
	if err := json.Unmarshal(q.ChatBody("m"), &chat); err != nil || len(chat.Messages) != 1 ||
		chat.Messages[0].Content != q.Prompt || chat.Max != 50 {
		t.Errorf("chat body: %v %+v", err, chat)
	}

	// The control workload keeps arrivals and lengths and shares nothing.
	control, err := NewReplay(WithoutSharing(recs), s)
	if err != nil {
		t.Fatal(err)
	}
	if sum := control.Summary(); sum.BlockReuse != 0 || control.Requests[5].InputTokens != 2048 ||
		control.Requests[9].At != 30*time.Millisecond {
		t.Errorf("control summary %v", sum)
	}
	if a, b := control.Requests[0].Prompt, control.Requests[1].Prompt; strings.Fields(a)[0] == strings.Fields(b)[0] {
		t.Errorf("control prompts share their first word %q", strings.Fields(a)[0])
	}

	for _, bad := range []Scale{{TimeScale: -1}, {BlockTokens: -1}, {OutputScale: -2}, {MaxInputTokens: -1}, {Skip: 200}} {
		if _, err := NewReplay(recs, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// Requests whose hash ids agree on their first k blocks have identical first k blocks of
// words and differ right after, and the simulator's prefix-cache hashes see exactly that
// sharing.
func TestSharedPrefixesGiveIdenticalLeadingText(t *testing.T) {
	recs, err := Load(excerpt)
	if err != nil {
		t.Fatal(err)
	}
	const blockTokens, simBlock = 32, 16
	r, err := NewReplay(recs, Scale{BlockTokens: blockTokens})
	if err != nil {
		t.Fatal(err)
	}
	fields := make([][]string, len(r.Requests))
	hashes := make([][]uint64, len(r.Requests))
	for i, q := range r.Requests {
		fields[i], hashes[i] = strings.Fields(q.Prompt), sim.BlockHashes(q.Prompt, simBlock)
	}
	shared, pairs := 0, 0
	for i, a := range r.Requests {
		wa, ha := fields[i], hashes[i]
		for j, b := range r.Requests[i+1:] {
			k := 0
			for k < len(a.HashIDs) && k < len(b.HashIDs) && a.HashIDs[k] == b.HashIDs[k] {
				k++
			}
			wb, hb := fields[i+1+j], hashes[i+1+j]
			same := 0
			for same < len(wa) && same < len(wb) && wa[same] == wb[same] {
				same++
			}
			// The shared blocks' words agree; after them the next blocks differ within
			// their first idDigits words, which spell their ids (unless one prompt ends).
			want := min(k*blockTokens, len(wa), len(wb))
			if same < want || same >= want+idDigits && same < min(len(wa), len(wb)) {
				t.Fatalf("records %d and %d share %d hash ids but %d leading words, want %d", a.Index, b.Index, k, same, want)
			}
			common := 0
			for common < len(ha) && common < len(hb) && ha[common] == hb[common] {
				common++
			}
			if common != want/simBlock {
				t.Fatalf("records %d and %d: %d prefix-cache blocks in common, want %d", a.Index, b.Index, common, want/simBlock)
			}
			pairs++
			if k > 1 {
				shared++
			}
		}
	}
	if shared == 0 {
		t.Fatalf("none of %d pairs share more than the first block: the excerpt does not exercise sharing", pairs)
	}
	t.Logf("%d of %d pairs share more than one block", shared, pairs)
}

func TestFullTraceSummary(t *testing.T) {
	recs, err := Load(fullTrace)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReplay(recs, Scale{TimeScale: 0.1, BlockTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Summary()
	// The trace's README: 12,031 requests in one hour, 36.6% of blocks repeat.
	if s.Requests != 12031 || s.Span < 5*time.Minute || s.Span > 6*time.Minute || s.BlockReuse < 0.36 || s.BlockReuse > 0.37 {
		t.Errorf("summary %v", s)
	}
	t.Logf("%s: %v", r.Scale, s)
}

// Replayed one after the other against a simulated engine with the capacity model on
// (and a cache too large to evict), the trace's prompts hit the prefix cache exactly as
// much as their shared leading blocks allow.
func TestReplayHitsTheSimulatorsPrefixCache(t *testing.T) {
	recs, err := Load(excerpt)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReplay(recs, Scale{BlockTokens: 32, MaxInputTokens: 1024, MaxOutputTokens: 2, Limit: 140})
	if err != nil {
		t.Fatal(err)
	}
	e, err := sim.Start(sim.Options{MaxNumSeqs: 4, KVBlocks: 1 << 14, MaxModelLen: 2048, PromptTokensDetails: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	seen := map[uint64]bool{}
	var wantHits int
	for _, q := range r.Requests {
		resp, err := client.Post(e.URL()+"/v1/completions", "application/json", bytes.NewReader(q.CompletionsBody("sim-model")))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("record %d: %d %s", q.Index, resp.StatusCode, body)
		}
		hs := sim.BlockHashes(q.Prompt, 16)
		hit := 0
		for hit < len(hs) && hit < (q.InputTokens-1)/16 && seen[hs[hit]] {
			hit++
		}
		wantHits += 16 * hit
		for _, h := range hs {
			seen[h] = true
		}
	}
	if s := e.Stats(); s.PrefixCacheHits != int64(wantHits) || wantHits == 0 {
		t.Errorf("engine hit %d prompt tokens of %d queried; want %d", s.PrefixCacheHits, s.PrefixCacheQueries, wantHits)
	}
}
