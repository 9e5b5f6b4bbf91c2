package kv

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/transport/wire"
)

func mooncakePair(producer Side) Pair {
	producer.Engine, producer.Connector = "p0", Mooncake
	return Pair{Producer: producer, Consumer: Side{Engine: "d0", Connector: Mooncake}, Endpoint: wire.EndpointCompletions}
}

// The decode parameters a consumer gets are checked like a NIXL descriptor: a transfer id, the
// producer's identity, a bootstrap address the endpoint policy allows, nothing of NIXL's.
func TestMooncakeValidate(t *testing.T) {
	const good = `{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":"http://10.0.0.11:8998","remote_engine_id":"e1","transfer_id":"xfer-1"}`
	own := Side{Host: "10.0.0.11"}
	for _, tc := range []struct {
		name, params, reason string
		producer             Side
	}{
		{"the producer's own host on 8998", good, "", own},
		{"a rank of the pinned identity", strings.Replace(good, `"e1"`, `"e_dp1"`, 1), "", Side{Host: "10.0.0.11", EngineID: "e"}},
		{"pinned elsewhere", strings.Replace(good, `"e1"`, `"e9"`, 1), ReasonMissingEngineIdentity, Side{Host: "10.0.0.11", EngineID: "e1"}},
		{"no engine id", strings.Replace(good, `,"remote_engine_id":"e1"`, "", 1), ReasonMissingEngineIdentity, own},
		{"no transfer id", strings.Replace(good, `"xfer-1"`, `""`, 1), ReasonMissingEngineIdentity, own},
		{"another host", strings.Replace(good, "10.0.0.11", "10.0.0.99", 1), ReasonEndpointMismatch, own},
		{"NIXL's port range", strings.Replace(good, "8998", "5600", 1), ReasonEndpointMismatch, own},
		{"metadata service", strings.Replace(good, "10.0.0.11:8998", "169.254.169.254:80", 1), ReasonEndpointMismatch, own},
		{"the router's own listener", strings.Replace(good, "8998", "9000", 1), ReasonEndpointMismatch,
			Side{Host: "10.0.0.11", AllowedPorts: []PortRange{{9000, 9000}}, ReservedPorts: []int{9000}}},
		{"not http", strings.Replace(good, "http://", "tcp://", 1), ReasonEndpointMismatch, own},
		{"a pinned bootstrap", strings.Replace(good, "10.0.0.11:8998", "10.9.9.9:7000", 1), "", Side{Host: "10.0.0.11", Endpoint: "10.9.9.9:7000"}},
		{"NIXL members", strings.Replace(good, `}`, `,"remote_block_ids":[1]}`, 1), ReasonConnectorMismatch, own},
		{"not a consumer's", strings.Replace(good, `"do_remote_prefill":true`, `"do_remote_prefill":false`, 1), ReasonConnectorMismatch, own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair := mooncakePair(tc.producer)
			d, rej := ParseDescriptor([]byte(tc.params), pair.Endpoint)
			if rej == nil {
				rej = ValidateDescriptor(newMooncake(), d, pair)
			}
			if got := reasonOf(rej); got != tc.reason {
				t.Fatalf("got %q (%v), want %q", got, rej, tc.reason)
			}
		})
	}
}

func reasonOf(r *Rejection) string {
	if r == nil {
		return ""
	}
	return r.Reason
}

func TestParseBootstrap(t *testing.T) {
	for _, tc := range []struct {
		body string
		want []string
	}{
		{`{"0":{"engine_id":"a","worker_addr":{"0":{"0":"tcp://h:1"}}}}`, []string{"a"}},
		{`{"1":{"engine_id":"b"},"0":{"engine_id":"a"}}`, []string{"a", "b"}},
		{`{}`, nil},
		{`{"1":{"engine_id":"b"}}`, nil},
		{`{"00":{"engine_id":"a"}}`, nil},
		{`{"0":{"engine_id":""}}`, nil},
		{`{"0":{"engine_id":"a\u0000"}}`, nil},
		{`[]`, nil},
	} {
		got, err := parseBootstrap([]byte(tc.body))
		if (err == nil) != (tc.want != nil) || strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: %v, %v; want %v", tc.body, got, err, tc.want)
		}
	}
}

// PlanContext asks the bootstrap server once, plans both legs with the rank's engine id and the
// rank header, and asks again only after Forget; an address the policy refuses is never asked.
func TestMooncakePlanAsksTheBootstrapServerOnce(t *testing.T) {
	var queries atomic.Int32
	id := atomic.Pointer[string]{}
	first := "engine-a"
	id.Store(&first)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/query" {
			http.NotFound(w, r)
			return
		}
		queries.Add(1)
		_, _ = w.Write([]byte(`{"0":{"engine_id":"` + *id.Load() + `"}}`))
	}))
	defer srv.Close()
	m := newMooncake()
	now := time.Unix(1_000_000, 0)
	m.ids.now = func() time.Time { return now } // no recheck: the answer never ages
	a := Attempt{Pair: mooncakePair(Side{Host: "127.0.0.1", Endpoint: srv.Listener.Addr().String()}), BackendRequestID: "r1"}
	for range 3 {
		tr, err := m.PlanContext(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(tr.Decode), `"remote_engine_id":"engine-a"`) || !strings.Contains(string(tr.Prefill), `"transfer_id":"xfer-r1"`) ||
			!tr.Ranked || tr.PrefillRank != 0 {
			t.Fatalf("plan %s / %s", tr.Prefill, tr.Decode)
		}
	}
	if n := queries.Load(); n != 1 {
		t.Fatalf("%d queries for three plans, want 1", n)
	}
	second := "engine-b"
	id.Store(&second)
	m.Forget(a)
	tr, err := m.PlanContext(context.Background(), a)
	if err != nil || !strings.Contains(string(tr.Decode), `"engine-b"`) || queries.Load() != 2 {
		t.Fatalf("after Forget: %s, %v, %d queries", tr.Decode, err, queries.Load())
	}
	a.ProducerRank = 1
	if _, err := m.PlanContext(context.Background(), a); reasonOf(asRejection(err)) != ReasonMissingEngineIdentity {
		t.Fatalf("a rank the server does not list: %v", err)
	}

	// Unpinned, on a port outside the policy: refused before any query.
	b := Attempt{Pair: mooncakePair(Side{Host: "169.254.169.254"}), BackendRequestID: "r2"}
	before := queries.Load()
	if _, err := m.PlanContext(context.Background(), b); reasonOf(asRejection(err)) != ReasonEndpointMismatch || queries.Load() != before {
		t.Fatalf("metadata host: %v", err)
	}
}

func TestMooncakeUnreachableBootstrapIsAnErrorAndNotKept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m := newMooncake()
	a := Attempt{Pair: mooncakePair(Side{Host: "127.0.0.1", Endpoint: addr}), BackendRequestID: "r"}
	_, err = m.PlanContext(context.Background(), a)
	if !errors.Is(err, errBootstrap) || asRejection(err) != nil {
		t.Fatalf("err %v, want a bootstrap failure", err)
	}
	if _, ok := m.ids.cached(addr); ok {
		t.Fatal("a failed query was kept")
	}
}

func asRejection(err error) *Rejection {
	r, _ := errors.AsType[*Rejection](err)
	return r
}
