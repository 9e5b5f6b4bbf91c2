package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/transport/wire"
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
				f.CountsAgainstEngine() != row.Counts.holds(status) ||
				f.Shuns() != row.Shun || f.RouterSide() != row.RouterSide || f.Replans() != row.Replan {
				t.Fatalf("%s with engine status %d: predicates disagree with the row %+v", k, status, row)
			}
		}
		if row.RouterSide && (row.Retry != Never || row.Counts != Never) {
			t.Fatalf("%s: a router-side fault is retried or counted", k)
		}
		if row.Replan && (row.Retry != Always || row.Counts != Never) {
			t.Fatalf("%s: a replanned fault must be retried and counted by no breaker", k)
		}
		if (row.Body != RouterEnvelope) != (row.Status == PassThrough) {
			t.Fatalf("%s: the engine's body without the engine's status, or the other way round", k)
		}
	}
	if len(names) != int(StaleEngineID) {
		t.Fatalf("%d kinds in the table, want %d", len(names), StaleEngineID)
	}
	if Kind(200).String() != "fault(200)" || (&Fault{Kind: 200}).ClientStatus() != 502 {
		t.Fatal("an unknown kind is not an unreadable engine failure")
	}
}

// The failure policy in the table's words: the rows a client and an operator depend on.
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
		// A producer that restarted between attempts is neither engine's failure: the retry is
		// planned on its new engine id, and no breaker counts it.
		{StaleEngineID, 0, 502, true, false},
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
// when exposed. The engine's 4xx bodies pass through either way; other kinds get the router's
// envelope.
func TestClientBodyWithholdsOnlyTheEngineMessage(t *testing.T) {
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
		if got := string(ClientBody(f, false)); got != tc.want {
			t.Errorf("%s: withheld\n got %s\nwant %s", tc.name, got, tc.want)
		}
		if got, want := string(ClientBody(f, true)), `{"error":`+tc.obj+`}`; got != want {
			t.Errorf("%s: exposed %s, want the engine's own %s", tc.name, got, want)
		}
	}
	rejected := &Fault{Kind: Rejected, Status: 400, Body: []byte(`{"error":{"message":"This model's maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}}`)}
	for _, expose := range []bool{false, true} {
		if got := ClientBody(rejected, expose); string(got) != string(rejected.Body) {
			t.Errorf("an engine 4xx body does not pass through (expose %v): %s", expose, got)
		}
	}
	bare := &Fault{Kind: Rejected, Status: 404, Body: []byte(`{"message":"no such model","type":"NotFoundError","code":404}`)}
	if got, want := string(ClientBody(bare, false)), `{"error":`+string(bare.Body)+`}`; got != want {
		t.Errorf("a bare engine error object is %s, want it wrapped: %s", got, want)
	}
	for _, body := range []string{"", "Bad Gateway", `{"error":`} {
		f := &Fault{Kind: Rejected, Status: 400, Body: []byte(body), Detail: "engine rejected the request (400)"}
		want := `{"error":{"message":"engine rejected the request (400)","type":"invalid_request_error","param":null,"code":"rejected"}}`
		if got := string(ClientBody(f, true)); got != want {
			t.Errorf("engine body %q: %s, want the router's envelope %s", body, got, want)
		}
	}
	silence := &Fault{Kind: Silence, Detail: "engine went silent between tokens"}
	want := `{"error":{"message":"engine went silent between tokens","type":"gateway_timeout","param":null,"code":"silence"}}`
	for _, expose := range []bool{false, true} {
		if got := string(ClientBody(silence, expose)); got != want {
			t.Errorf("router fault %s, want %s", got, want)
		}
	}
}

// The terminal event of a committed stream, in both stream shapes: the engine's own error event
// when exposed, else the redacted error (built from its pieces: the engine's scalar code or the
// status, and the redacted message), else the router's error for every other kind.
func TestTerminalEventFollowsTheBodyColumn(t *testing.T) {
	engineEvent := []byte("data: {\"error\":{\"message\":\"KV pull from 10.0.0.9:5600 failed\",\"type\":\"InternalServerError\",\"param\":null,\"code\":500}}\n\n")
	stream := &Fault{Kind: StreamError, Status: 500, Detail: "KV pull from 10.0.0.9:5600 failed",
		Body: []byte(`{"error":{"message":"KV pull from 10.0.0.9:5600 failed","type":"InternalServerError","param":null,"code":500}}`)}
	named := &Fault{Kind: StreamError, Status: 503, Detail: "x", Body: []byte(`{"error":{"message":"x","code":"kv_\u0066ailed"}}`)}
	silence := &Fault{Kind: Silence, Detail: "engine went silent between tokens (nothing for 30s)"}
	responses := func(code, msg string, seq int) string {
		return string(wire.AppendResponsesErrorEvent(nil, code, msg, seq))
	}
	for _, tc := range []struct {
		name   string
		f      *Fault
		ep     wire.Endpoint
		expose bool
		event  []byte
		want   string
	}{
		{"redacted, chat", stream, wire.EndpointChat, false, engineEvent, "data: " + string(ClientBody(stream, false)) + "\n\n"},
		{"redacted, responses", stream, wire.EndpointResponses, false, engineEvent,
			responses("500", "engine reported an error (stream_error, status 500)", 7)},
		{"redacted string code, responses", named, wire.EndpointResponses, false, nil,
			responses("kv_failed", "engine reported an error (stream_error, status 503)", 7)},
		{"exposed, chat", stream, wire.EndpointChat, true, engineEvent, string(engineEvent)},
		{"exposed, responses", stream, wire.EndpointResponses, true, engineEvent, string(engineEvent)},
		{"exposed without an event", stream, wire.EndpointCompletions, true, nil, "data: " + string(ClientBody(stream, false)) + "\n\n"},
		{"router's, completions", silence, wire.EndpointCompletions, true, nil, "data: " + string(ClientBody(silence, false)) + "\n\n"},
		{"router's, responses", silence, wire.EndpointResponses, false, nil, responses("silence", silence.Detail, 7)},
	} {
		got := string(AppendTerminalEvent([]byte("x"), tc.f, tc.ep, 7, tc.expose, tc.event))
		if got != "x"+tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, "x"+tc.want)
		}
	}
}
