package transport_test

// The scripted engine answers of testdata/contract/faults.json ("cases"), run against the
// engine client: a hostile test engine answers one leg as a case says, and the client must yield
// the case's events and then finish or raise the case's fault exactly.
// python/tests/test_contract.py runs the same file against the Python client, so the two
// cannot drift. The rest of the vectors run where their code lives: descriptors in
// transport/kv, leg bodies in transport/wire, the fault table in transport/fault.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/internal/contract"
	"github.com/narwhal-router/narwhal/transport/wire"
)

type contractEngineCase struct {
	Name, Leg, Endpoint string
	Response            struct {
		Status      int
		ContentType string `json:"content_type"`
		RetryAfter  string `json:"retry_after"`
		Body        string
		BodyFixture string `json:"body_fixture"`
		Then        string
	}
	Want struct {
		Events             []string
		Raised, Kind       string
		Status             int
		Message, Reason    string
		RetryAfter         string `json:"retry_after"`
		Envelope           *string
		EnvelopeFixture    string `json:"envelope_fixture"`
		DescriptorFromBody bool   `json:"descriptor_from_body"`
	}
}

// TestContractEngineAnswers runs each case against a hostile test engine that answers with the
// case's scripted response.
func TestContractEngineAnswers(t *testing.T) {
	var doc struct {
		Timeouts struct {
			Prefill    float64 `json:"prefill_timeout_s"`
			FirstToken float64 `json:"first_token_timeout_s"`
			DecodeRead float64 `json:"decode_read_timeout_s"`
		}
		Cases []contractEngineCase
	}
	contract.Load(t, "faults.json", &doc)
	if len(doc.Cases) == 0 {
		t.Fatal("faults.json has no engine cases")
	}
	var current atomic.Pointer[contractEngineCase]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		c := current.Load()
		resp := c.Response
		if resp.Then != "hang_headers" {
			body := []byte(resp.Body)
			if resp.BodyFixture != "" { // JSON files are served trimmed, SSE files as they are
				body = contract.RepoFile(t, resp.BodyFixture, !strings.HasSuffix(resp.BodyFixture, ".sse"))
			}
			w.Header().Set("Content-Type", resp.ContentType)
			if resp.RetryAfter != "" {
				w.Header().Set("Retry-After", resp.RetryAfter)
			}
			w.WriteHeader(resp.Status)
			_, _ = w.Write(body)
			w.(http.Flusher).Flush()
		}
		if resp.Then != "end" {
			select { // silent until the client hangs up
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
	}))
	defer srv.Close()
	c := transport.ClientFor(t, config.Engine{Name: "hostile", URL: srv.URL, Role: config.RoleBoth}, func(cfg *config.Config) {
		cfg.Engine.PrefillTimeoutS = config.Seconds(doc.Timeouts.Prefill)
		cfg.Engine.FirstTokenTimeoutS = config.Seconds(doc.Timeouts.FirstToken)
		cfg.Engine.DecodeReadTimeoutS = config.Seconds(doc.Timeouts.DecodeRead)
	})

	for i := range doc.Cases {
		tc := &doc.Cases[i]
		t.Run(tc.Name, func(t *testing.T) {
			current.Store(tc)
			ctx := context.Background()
			prompt := `"prompt":"x"`
			if tc.Endpoint == "chat" {
				prompt = `"messages":[{"role":"user","content":"x"}]`
			}
			body, err := wire.ParseClientBody(contract.Endpoint(tc.Endpoint), []byte(`{"model":"m",`+prompt+`,"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			req := &transport.Request{Body: body, BackendRequestID: "contract-1"}
			events := []string{}
			var failure error
			raised := ""
			if tc.Leg == "prefill" {
				res, err := c.Prefill(ctx, req)
				if err != nil {
					failure, raised = err, "prefill"
				} else if tc.Want.DescriptorFromBody {
					if want := contract.KVOf(t, contract.RepoFile(t, tc.Response.BodyFixture, true)); !bytes.Equal(res.Descriptor(), want) {
						t.Fatalf("descriptor = %s, want %s", res.Descriptor(), want)
					}
				} else if res.HasDescriptor() {
					t.Fatalf("descriptor = %s, want none", res.Descriptor())
				}
			} else {
				stream, err := c.Decode(ctx, transport.PrefillResult{}, req)
				if err != nil {
					failure, raised = err, "decode"
				} else {
					for {
						ev, err := stream.Next()
						if err == io.EOF { // the stream's own end, after [DONE]
							break
						}
						if err != nil {
							failure, raised = err, "stream"
							break
						}
						events = append(events, [...]string{"meta", "token", "usage", "done", "error"}[ev.Kind])
					}
					stream.Close()
				}
			}
			want := tc.Want
			if want.Events == nil {
				want.Events = []string{}
			}
			if strings.Join(events, ",") != strings.Join(want.Events, ",") || raised != want.Raised {
				t.Fatalf("events %v, raised at %q (%v); want %v, raised at %q", events, raised, failure, want.Events, want.Raised)
			}
			if failure == nil {
				return
			}
			f, ok := fault.As(failure)
			if !ok {
				t.Fatalf("%v is not a Fault", failure)
			}
			if f.Kind.String() != want.Kind || f.ClientStatus() != want.Status || f.Detail != want.Message ||
				f.Reason != want.Reason || f.RetryAfter != want.RetryAfter {
				t.Fatalf("fault %s %d %q reason %q retry-after %q; want %s %d %q reason %q retry-after %q",
					f.Kind, f.ClientStatus(), f.Detail, f.Reason, f.RetryAfter, want.Kind, want.Status, want.Message, want.Reason, want.RetryAfter)
			}
			env := fault.ClientBody(f, true)
			switch {
			case want.Envelope != nil:
				if string(env) != *want.Envelope {
					t.Fatalf("envelope %s\nwant %s", env, *want.Envelope)
				}
			case want.EnvelopeFixture != "":
				if w := contract.RepoFile(t, want.EnvelopeFixture, true); !bytes.Equal(env, w) {
					t.Fatalf("envelope %s\nwant %s", env, w)
				}
			default:
				var e struct {
					Error struct {
						Message, Type, Code string
						Param               *string
					}
				}
				if err := json.Unmarshal(env, &e); err != nil || e.Error.Message != want.Message || e.Error.Code != want.Kind ||
					e.Error.Type != fault.ErrorType(want.Status) || e.Error.Param != nil {
					t.Fatalf("envelope %s (%v)", env, err)
				}
			}
		})
	}
}
