package fault

import (
	"context"
	"errors"
	"testing"
)

// The table is the policy: every kind has a named row, and the predicates say what the row says
// (the conditional rows follow the engine's own status).
func TestEveryKindHasARowAndThePredicatesReadIt(t *testing.T) {
	names := map[string]Kind{}
	for _, k := range Kinds() {
		row := k.Policy()
		if row.Name == "" || k.String() != row.Name {
			t.Fatalf("kind %d: name %q, String %q", k, row.Name, k.String())
		}
		if other, dup := names[row.Name]; dup {
			t.Fatalf("kinds %d and %d share the name %q", other, k, row.Name)
		}
		names[row.Name] = k
		for _, status := range []int{0, 422, 500} {
			f := &Fault{Kind: k, Status: status}
			wantStatus := row.Status
			if wantStatus == PassThrough {
				wantStatus = status
			}
			if f.ClientStatus() != wantStatus || f.Retriable() != row.Retry.holds(status) ||
				f.CountsAgainstEngine() != row.Counts.holds(status) || f.StreamFailure() != row.StreamFailure ||
				f.Shuns() != row.Shun || f.RouterSide() != row.RouterSide {
				t.Fatalf("%s with engine status %d: predicates disagree with the row %+v", k, status, row)
			}
		}
		if row.RouterSide && (row.Retry != Never || row.Counts != Never) {
			t.Fatalf("%s: a router-side fault is retried or counted", k)
		}
	}
	if len(names) != int(Overloaded) {
		t.Fatalf("%d kinds in the table, want %d", len(names), Overloaded)
	}
	if Kind(200).String() != "fault(200)" || (&Fault{Kind: 200}).ClientStatus() != 502 {
		t.Fatal("an unknown kind is not an unreadable engine failure")
	}
}

// SPEC §8 in the table's words: the rows a client and an operator depend on.
func TestTableMatchesTheSpec(t *testing.T) {
	cases := []struct {
		kind           Kind
		engineStatus   int
		status         int
		retried, count bool
	}{
		{Timeout, 0, 504, true, true},
		{FirstTokenTimeout, 0, 504, true, true},
		{Silence, 0, 504, true, true},
		{Unreachable, 0, 502, true, true},
		{ClosedEarly, 0, 502, true, true},
		{DoneBeforeToken, 0, 502, true, true},
		{Status, 500, 502, true, true},
		{Descriptor, 0, 502, true, true},
		{StreamError, 500, 500, true, true},
		{StreamError, 422, 422, false, false},
		{Rejected, 400, 400, false, false},
		{Backpressure, 429, 503, true, false},
		{Deadline, 0, 504, false, false},
		{Aborted, 0, 503, false, false},
		{Overloaded, 0, 503, false, false},
	}
	for _, tc := range cases {
		f := &Fault{Kind: tc.kind, Status: tc.engineStatus}
		if f.ClientStatus() != tc.status || f.Retriable() != tc.retried || f.CountsAgainstEngine() != tc.count {
			t.Errorf("%s (%d): status %d retried %v counted %v, want %d %v %v", tc.kind, tc.engineStatus,
				f.ClientStatus(), f.Retriable(), f.CountsAgainstEngine(), tc.status, tc.retried, tc.count)
		}
	}
}

func TestFromContextTellsAHangUpFromAnAbort(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrClientGone)
	if f := FromContext(ctx, "e", PhaseDecode); f.Kind != Canceled || !errors.Is(f, ErrClientGone) {
		t.Fatalf("hang-up: %v", f)
	}
	ctx, cancel = context.WithCancelCause(context.Background())
	cancel(errors.New("shutting down"))
	if f := FromContext(ctx, "e", PhasePrefill); f.Kind != Aborted || f.Detail != "shutting down" {
		t.Fatalf("abort: %v", f)
	}
}

var sink bool

// BenchmarkFaultPolicy is the table lookup every failed leg pays (status, retry, breaker).
func BenchmarkFaultPolicy(b *testing.B) {
	b.ReportAllocs()
	kinds := Kinds()
	for i := 0; i < b.N; i++ {
		f := Fault{Kind: kinds[i%len(kinds)], Status: 500}
		sink = f.ClientStatus() > 0 && f.Retriable() != f.CountsAgainstEngine()
	}
}
