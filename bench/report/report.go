// Package report owns how benchmark results are shown: one readable section per scenario
// (aligned tables and notes), the table of targets met and missed, and the final JSON line
// that machines read. It knows nothing about processes or load.
package report

import (
	"fmt"
	"math"
	"sort"
	"strings"

	json "github.com/goccy/go-json"
)

// SummaryKeys are the figures the final JSON line always holds (null when their scenario did
// not run), in order.
var SummaryKeys = []string{
	"added_first_byte_p50_ms", "added_first_byte_p99_ms",
	"cpu_us_per_request", "cpu_us_per_token",
	"saturation_rps", "rss_kib_per_stream",
	"faults_goodput_ratio", "faults_one_outcome_each",
}

// Section is one scenario's part of the report.
type Section struct {
	Scenario string
	Title    string
	lines    []string
	// Figures go into the JSON line; SummaryKeys among them are the headline figures.
	Figures map[string]any
	Targets []Target
}

// NewSection starts a scenario's section.
func NewSection(scenario, title string) *Section {
	return &Section{Scenario: scenario, Title: title, Figures: map[string]any{}}
}

// Printf adds a line.
func (s *Section) Printf(format string, args ...any) {
	s.lines = append(s.lines, fmt.Sprintf(format, args...))
}

// Add appends preformatted text (a table, a profile excerpt).
func (s *Section) Add(text string) {
	s.lines = append(s.lines, strings.Split(strings.TrimRight(text, "\n"), "\n")...)
}

// Figure records a figure for the JSON line, rounded to 3 decimals.
func (s *Section) Figure(key string, v any) {
	if f, ok := v.(float64); ok {
		v = Round(f, 3)
	}
	s.Figures[key] = v
}

// Target records a target and its verdict.
func (s *Section) Target(t Target) { s.Targets = append(s.Targets, t) }

// Text renders the section.
func (s *Section) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s: %s ==\n", s.Scenario, s.Title)
	for _, l := range s.lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// Target is a figure with a limit.
type Target struct {
	Name  string
	Value float64
	Unit  string
	Limit float64
	// AtLeast: the value must be ≥ Limit (else ≤).
	AtLeast bool
	// Boolean targets compare nothing: Value 1 is met.
	Boolean bool
}

// Met reports the verdict.
func (t Target) Met() bool {
	switch {
	case math.IsNaN(t.Value):
		return false
	case t.Boolean:
		return t.Value == 1
	case t.AtLeast:
		return t.Value >= t.Limit
	}
	return t.Value <= t.Limit
}

func (t Target) valueText() string {
	if t.Boolean {
		if t.Value == 1 {
			return "yes"
		}
		return "no"
	}
	if math.IsNaN(t.Value) {
		return "n/a"
	}
	return Num(t.Value) + " " + t.Unit
}

func (t Target) limitText() string {
	switch {
	case t.Boolean:
		return "yes"
	case t.AtLeast:
		return "≥ " + Num(t.Limit) + " " + t.Unit
	}
	return "≤ " + Num(t.Limit) + " " + t.Unit
}

// Targets renders every section's targets as one table.
func Targets(sections []*Section) string {
	t := NewTable("scenario", "target", "measured", "limit", "verdict")
	for _, s := range sections {
		for _, tg := range s.Targets {
			verdict := "met"
			if !tg.Met() {
				verdict = "MISSED"
			}
			t.Row(s.Scenario, tg.Name, tg.valueText(), tg.limitText(), verdict)
		}
	}
	return t.String()
}

// JSONLine renders the final line: the summary keys first (null when their scenario did not
// run), then the targets' verdicts, meta, and every other figure as "<scenario>.<key>".
func JSONLine(sections []*Section, meta map[string]any) ([]byte, error) {
	head := map[string]any{}
	for _, k := range SummaryKeys {
		head[k] = nil
	}
	extra := map[string]any{}
	met := map[string]bool{}
	for _, s := range sections {
		for k, v := range s.Figures {
			if isSummaryKey(k) {
				head[k] = v
			} else {
				extra[s.Scenario+"."+k] = v
			}
		}
		for _, t := range s.Targets {
			met[s.Scenario+": "+t.Name] = t.Met()
		}
	}
	// Build the object by hand so the headline keys come first and in order.
	var b strings.Builder
	b.WriteByte('{')
	write := func(k string, v any) error {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
		return nil
	}
	for _, k := range SummaryKeys {
		if err := write(k, head[k]); err != nil {
			return nil, err
		}
	}
	if err := write("targets_met", met); err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(meta) {
		if err := write(k, meta[k]); err != nil {
			return nil, err
		}
	}
	for _, k := range sortedKeys(extra) {
		if err := write(k, extra[k]); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

func isSummaryKey(k string) bool {
	for _, s := range SummaryKeys {
		if s == k {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Round rounds to the given decimals.
func Round(v float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(v*p) / p
}

// Num formats a number for people: thousands separators for large values, three
// significant decimals for small ones.
func Num(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "n/a"
	case a >= 1000:
		return thousands(int64(math.Round(v)))
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 10:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// Signed is Num with an explicit sign.
func Signed(v float64) string {
	if v >= 0 {
		return "+" + Num(v)
	}
	return Num(v)
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
