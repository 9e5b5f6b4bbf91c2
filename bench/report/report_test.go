package report

import (
	"strings"
	"testing"

	json "github.com/goccy/go-json"
)

func TestJSONLineHoldsEverySummaryKeyInOrder(t *testing.T) {
	s := NewSection("overhead", "x")
	s.Figure("added_first_byte_p99_ms", 0.12345)
	s.Figure("direct_rps", 300.0)
	s.Target(Target{Name: "p99", Value: 0.12, Limit: 1})
	line, err := JSONLine([]*Section{s}, map[string]any{"wall_s": 1.5})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	for _, k := range SummaryKeys {
		if _, ok := m[k]; !ok {
			t.Errorf("missing %s", k)
		}
	}
	if m["added_first_byte_p99_ms"] != 0.123 || m["saturation_rps"] != nil || m["overhead.direct_rps"] != 300.0 {
		t.Fatalf("%s", line)
	}
	if !strings.HasPrefix(string(line), `{"added_first_byte_p50_ms":null,"added_first_byte_p99_ms":0.123,`) {
		t.Fatalf("headline keys must come first, in order: %s", line)
	}
	if m["targets_met"].(map[string]any)["overhead: p99"] != true {
		t.Fatalf("targets: %s", line)
	}
}

func TestTargetVerdicts(t *testing.T) {
	for _, tc := range []struct {
		t    Target
		want bool
	}{
		{Target{Value: 1, Limit: 1}, true},
		{Target{Value: 1.1, Limit: 1}, false},
		{Target{Value: 99.5, Limit: 99, AtLeast: true}, true},
		{Target{Value: 0, Boolean: true}, false},
		{Target{Value: 1, Boolean: true}, true},
	} {
		if got := tc.t.Met(); got != tc.want {
			t.Errorf("%+v: met %v", tc.t, got)
		}
	}
}

func TestTableAlignsColumns(t *testing.T) {
	tb := NewTable("name", "value")
	tb.Row("a", "1")
	tb.Row("longer", "1,000")
	lines := strings.Split(strings.TrimRight(tb.String(), "\n"), "\n")
	if len(lines) != 4 || len(lines[0]) != len(lines[2]) || len(lines[2]) != len(lines[3]) {
		t.Fatalf("%q", lines)
	}
	if Num(1234567) != "1,234,567" || Num(0.5) != "0.500" || Signed(2) != "+2.000" {
		t.Fatal(Num(1234567), Num(0.5), Signed(2))
	}
}
