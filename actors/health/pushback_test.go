package health

import (
	"net/http"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1", time.Second, true},
		{" 2.5 ", 2500 * time.Millisecond, true},
		{"0", 0, true},
		{now.Add(7 * time.Second).Format(http.TimeFormat), 7 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"NaN", 0, false},
		{"soon", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// An engine is passed over only once it has pushed back for longer than the bound, for its
// Retry-After capped at max_pass_s (pass_s without one), and a commit ends the spell.
func TestPushbackBound(t *testing.T) {
	cfg := config.BackpressureRuntime{Bound: time.Second, Pass: 2 * time.Second, MaxPass: 5 * time.Second}
	var p Pushback
	t0 := time.Now()
	p.PushedBack(t0, "", cfg, "d0", nil)
	p.PushedBack(t0.Add(900*time.Millisecond), "", cfg, "d0", nil)
	if p.PassedOver(t0.Add(950 * time.Millisecond)) {
		t.Fatal("passed over within the bound")
	}
	at := t0.Add(1100 * time.Millisecond)
	p.PushedBack(at, "", cfg, "d0", nil)
	if !p.PassedOver(at.Add(1900*time.Millisecond)) || p.PassedOver(at.Add(2100*time.Millisecond)) {
		t.Fatal("want passed over for pass_s after the bound")
	}
	p.PushedBack(at, "60", cfg, "d0", nil)
	if !p.PassedOver(at.Add(4900*time.Millisecond)) || p.PassedOver(at.Add(5100*time.Millisecond)) {
		t.Fatal("want a Retry-After honoured up to max_pass_s")
	}
	p.Served()
	if p.PassedOver(at.Add(time.Second)) {
		t.Fatal("still passed over after a commit")
	}
	p.PushedBack(at.Add(time.Second), "", cfg, "d0", nil)
	if p.PassedOver(at.Add(time.Second)) {
		t.Fatal("a commit restarts the bound")
	}
}
