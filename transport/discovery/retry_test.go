package discovery

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

func TestBackoffDoublesToItsBoundAndResets(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: 450 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 450 * time.Millisecond, 450 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("after Reset: %v", d)
	}
}

// Changes passes on sets sorted by name, drops a set equal to the last one, and passes the
// same set again after an error.
func TestChangesPassesOnWhatChanged(t *testing.T) {
	var got []Report
	report := Changes(func(r Report) { got = append(got, r) })
	a, b := config.Engine{Name: "a"}, config.Engine{Name: "b"}
	report(Report{Engines: []config.Engine{b, a}})
	report(Report{Engines: []config.Engine{a, b}})
	report(Report{Err: errors.New("down")})
	report(Report{Engines: []config.Engine{a, b}})
	report(Report{Engines: []config.Engine{a}})
	report(Report{})
	report(Report{})
	if len(got) != 5 || got[0].Engines[0].Name != "a" || got[1].Err == nil || len(got[2].Engines) != 2 || len(got[3].Engines) != 1 || len(got[4].Engines) != 0 {
		t.Fatalf("passed on %+v", got)
	}
}
