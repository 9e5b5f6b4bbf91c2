package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// checkScanMatchesValid holds ScanObject and SkipValue to json.Valid's verdict on data: the scan
// accepts exactly the valid documents whose value is an object, tells valid non-objects apart
// (ErrNotObject), and lists members whose keys and values are each valid JSON, in order and
// without whitespace around them.
func checkScanMatchesValid(t *testing.T, data []byte) {
	t.Helper()
	valid := json.Valid(data)
	start := SkipSpace(data, 0)
	object := start < len(data) && data[start] == '{'
	fields, err := ScanObject(data, nil)
	switch {
	case valid && object && err != nil:
		t.Fatalf("ScanObject(%q) = %v, but it is a valid object", data, err)
	case valid && !object && !errors.Is(err, ErrNotObject):
		t.Fatalf("ScanObject(%q) = %v, want ErrNotObject", data, err)
	case !valid && !errors.Is(err, ErrSyntax):
		t.Fatalf("ScanObject(%q) = %v, want ErrSyntax: json.Valid refuses it", data, err)
	}
	if end, err := SkipValue(data, start); (err == nil && SkipSpace(data, end) == len(data)) != valid {
		t.Fatalf("SkipValue(%q) = %d, %v; json.Valid says %v", data, end, err, valid)
	}
	if err != nil {
		if len(fields) != 0 {
			t.Fatalf("ScanObject(%q) failed with %d fields", data, len(fields))
		}
		return
	}
	prev := start
	for _, f := range fields {
		key, val := data[f.keyStart:f.keyEnd], data[f.valStart:f.valEnd]
		var s string
		if f.keyStart <= prev || json.Unmarshal(key, &s) != nil || !json.Valid(val) ||
			SkipSpace(val, 0) != 0 || strings.TrimRight(string(val), " \t\r\n") != string(val) {
			t.Fatalf("ScanObject(%q): field %q: %q is out of order or not JSON", data, key, val)
		}
		prev = f.valEnd
	}
}

// scanCases are documents on which a validating scan could part from json.Valid.
var scanCases = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1}x`, `{"a":1}}`, `{"a":1} {}`, "{\"a\":1}\x00", `{"a":1,}`, `{,}`, `{"a"}`,
	`{"a":}`, `{"a" 1}`, `{a:1}`, `{"a":1 "b":2}`, `{"a":[1,]}`, `{"a":[,]}`, `{"a":[1 2]}`, `{"a":{"b":1]}`,
	`{"a":[1}}`, `{"a":tru}`, `{"a":nul}`, `{"a":falsey}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":.5}`,
	`{"a":+1}`, `{"a":1e}`, `{"a":1e+}`, `{"a":-0.0e-0}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u00G0"}`,
	"{\"a\":\"\x01\"}", "{\"a\":\"\x7f\xc3\x28\xed\xa0\x80\xff\"}", `{"a":"\uD800\/\""}`, `{"a":"abc`,
	`{"a":"0123456789abcdef\`, `{"\u0061":1,"a":2}`, "\ufeff{}", "{}\u00a0", `{"a":[[]],"b":{"c":{"d":[{}]}}}`,
	``, ` `, `null`, ` null `, `[]`, `[{}]`, `"s"`, `12`, `-0`, `true`, `[1,]`, `"\u12"`, `nul`, `{`, `[`, `"`,
	`{"a":[` + strings.Repeat(`{"b":[1,2,{"c":"d"}],"e":null},`, 20) + `0]}`,
}

func TestScanObjectMatchesValid(t *testing.T) {
	for _, s := range scanCases {
		checkScanMatchesValid(t, []byte(s))
	}
	// nesting around the word of levels skipValue keeps, and around json.Valid's bound
	for _, n := range []int{62, 63, 64, 65, 66, 127, 128, 129, 9998, 9999, 10000, 10001} {
		for _, v := range []string{strings.Repeat("[", n) + strings.Repeat("]", n),
			strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n),
			strings.Repeat(`[{"a":`, n/2) + "1" + strings.Repeat("}]", n/2),
			strings.Repeat("[", n) + strings.Repeat("]", n-1) + "}"} {
			checkScanMatchesValid(t, []byte(v))
			checkScanMatchesValid(t, []byte(`{"x":`+v+`}`))
		}
	}
}

// FuzzScanObjectMatchesValid: for any data, ScanObject's verdict is json.Valid's (the contract
// that lets callers drop json.Valid before it).
func FuzzScanObjectMatchesValid(f *testing.F) {
	for _, s := range scanCases {
		f.Add([]byte(s))
	}
	for _, s := range classifySeeds(f) {
		f.Add(s)
	}
	f.Add([]byte(fixtureClientBody))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScanMatchesValid(t, data)
	})
}
