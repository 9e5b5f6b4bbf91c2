// Package trace replays request traces in the Mooncake format against Narwhal's
// benchmark fleets. It owns three things: loading a trace (one JSON object per line:
// timestamp in milliseconds, input and output lengths in tokens, and hash_ids, the ids of
// the prompt's 512-token prefix blocks), scaling it to fit a test machine (arrival times
// compressed, lengths shrunk, both printed by Scale.String), and building prompt text
// whose leading blocks are shared exactly as the hash ids say, so that an engine's or a
// router's prefix hashing sees the sharing the trace records.
//
// A prompt token is a word the simulator's default tokenizer takes as one token (bench/sim).
// Trace block h becomes BlockTokens words that depend on h alone; a request's prompt is
// the words of its blocks in order, cut to its scaled input length. Two requests whose
// hash ids agree on the first k blocks therefore have identical first k·BlockTokens
// words, and differ right after.
package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"

	json "github.com/goccy/go-json"
)

// TraceBlockTokens is the number of tokens one hash id stands for in Mooncake traces.
const TraceBlockTokens = 512

// Record is one request of a trace, as written.
type Record struct {
	// Timestamp is the arrival time in milliseconds from the start of the trace.
	Timestamp int64 `json:"timestamp"`
	// InputLength and OutputLength are in tokens.
	InputLength  int `json:"input_length"`
	OutputLength int `json:"output_length"`
	// HashIDs are the prompt's prefix blocks, TraceBlockTokens tokens each (the last
	// one partial).
	HashIDs []int `json:"hash_ids"`
}

// DefaultPath is the public Mooncake conversation trace vendored in this repository
// (bench/traces/README.md), relative to the repository's root, where `make bench` runs.
const DefaultPath = "bench/traces/mooncake-conversation.jsonl.gz"

// Load reads the trace file at path, gzip-compressed or not (told by its first bytes).
func Load(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("trace %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	recs, err := Read(r)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return recs, nil
}

// maxLine bounds one trace line (a 128k-token prompt has 250 hash ids: a few KB).
const maxLine = 4 << 20

// Read parses a trace, one JSON object per line (blank lines skipped), and checks every
// record: lengths of at least one token, hash ids that are non-negative and cover the
// input (ceil(input_length / 512) of them), timestamps that never go back.
func Read(r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var recs []Record
	var last int64
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if err := rec.check(last); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		last = rec.Timestamp
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("after %d records: %w", len(recs), err)
	}
	if len(recs) == 0 {
		return nil, errors.New("no records")
	}
	return recs, nil
}

func (r Record) check(prev int64) error {
	switch {
	case r.Timestamp < prev:
		return fmt.Errorf("timestamp %d is before the previous record's %d", r.Timestamp, prev)
	case r.InputLength < 1:
		return fmt.Errorf("input_length %d: want at least 1", r.InputLength)
	case r.OutputLength < 1:
		return fmt.Errorf("output_length %d: want at least 1", r.OutputLength)
	case len(r.HashIDs) != (r.InputLength+TraceBlockTokens-1)/TraceBlockTokens:
		return fmt.Errorf("%d hash_ids for input_length %d: want ceil(%d / %d) = %d",
			len(r.HashIDs), r.InputLength, r.InputLength, TraceBlockTokens,
			(r.InputLength+TraceBlockTokens-1)/TraceBlockTokens)
	}
	for _, h := range r.HashIDs {
		if h < 0 {
			return fmt.Errorf("hash id %d: want non-negative", h)
		}
	}
	return nil
}
