package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
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
	if len(names) != int(ResponseTooLarge) {
		t.Fatalf("%d kinds in the table, want %d", len(names), ResponseTooLarge)
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
		// server.max_response_bytes is the operator's bound: a healthy engine's large answer
		// is neither retried elsewhere (it would be as large) nor counted toward its breaker.
		{ResponseTooLarge, 0, 502, false, false},
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

// io.EOF means a stream ended well; a fault whose cause is an orderly end of input (a decode
// body that ended before [DONE]) must not read as one, while its other causes still unwrap.
func TestAFaultNeverReadsAsEndOfStream(t *testing.T) {
	for _, cause := range []error{io.EOF, fmt.Errorf("reading the body: %w", io.EOF)} {
		f := &Fault{Kind: ClosedEarly, Phase: PhaseDecode, Engine: "d0", Detail: "stream closed before [DONE]", Err: cause}
		var err error = f
		if errors.Is(err, io.EOF) {
			t.Fatalf("fault with cause %q satisfies errors.Is(err, io.EOF)", cause)
		}
		if got, ok := As(err); !ok || got != f {
			t.Fatal("the fault is no longer found by As")
		}
		if !strings.Contains(err.Error(), "EOF") {
			t.Fatalf("the cause is lost from the text: %s", err)
		}
	}
	gone := &Fault{Kind: Canceled, Err: ErrClientGone}
	if !errors.Is(gone, ErrClientGone) {
		t.Fatal("a fault's other causes no longer unwrap")
	}
}

// An in-stream engine error keeps its status, type, param and code for clients; its message only
// when exposed. Other kinds, the engine's 4xx bodies among them, are what FaultEnvelope says.
func TestClientEnvelopeWithholdsOnlyTheEngineMessage(t *testing.T) {
	stream := func(obj string) *Fault {
		return &Fault{Kind: StreamError, Status: 500, Body: AppendEnvelope(nil, []byte(obj)), Detail: "KV pull from 10.0.0.9:5600 failed"}
	}
	for _, tc := range []struct{ name, obj, want string }{
		{"vLLM's object", `{"message":"KV pull from 10.0.0.9:5600 failed","type":"InternalServerError","param":null,"code":500}`,
			`{"error":{"message":"engine reported an error (stream_error, status 500)","type":"InternalServerError","param":null,"code":500}}`},
		{"string param and code", `{"message":"x","type":"T","param":"prompt","code":"kv_failed"}`,
			`{"error":{"message":"engine reported an error (stream_error, status 500)","type":"T","param":"prompt","code":"kv_failed"}}`},
		{"structured members are dropped", `{"message":"x","param":{"host":"10.0.0.9"},"code":[1]}`,
			`{"error":{"message":"engine reported an error (stream_error, status 500)","type":"server_error","param":null,"code":500}}`},
	} {
		f := stream(tc.obj)
		if got := string(ClientEnvelope(f, false)); got != tc.want {
			t.Errorf("%s: withheld\n got %s\nwant %s", tc.name, got, tc.want)
		}
		if got, want := string(ClientEnvelope(f, true)), `{"error":`+tc.obj+`}`; got != want {
			t.Errorf("%s: exposed %s, want the engine's own %s", tc.name, got, want)
		}
	}
	rejected := &Fault{Kind: Rejected, Status: 400, Body: []byte(`{"error":{"message":"This model's maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}}`)}
	if got := ClientEnvelope(rejected, false); string(got) != string(rejected.Body) {
		t.Errorf("an engine 4xx body does not pass through: %s", got)
	}
	silence := &Fault{Kind: Silence, Detail: "engine went silent between tokens"}
	if got, want := ClientEnvelope(silence, false), FaultEnvelope(silence); string(got) != string(want) {
		t.Errorf("router fault %s, want %s", got, want)
	}
}
