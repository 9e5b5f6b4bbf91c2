package transport

// The shared contract vectors in testdata/contract, run against the Go router's functions.
// python/tests/test_contract.py runs the same files against the Python client
// (narwhal.engines), so the two cannot drift: descriptor validation, the leg body rewrites and
// the fault mapping (status, message, envelope) are stated once.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

func repoFile(t *testing.T, rel string, trim bool) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	if trim {
		b = bytes.TrimSpace(b)
	}
	return b
}

func loadContract(t *testing.T, name string, v any) {
	t.Helper()
	if err := json.Unmarshal(repoFile(t, "testdata/contract/"+name, false), v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func contractEndpoint(s string) Endpoint {
	if s == "chat" {
		return EndpointChat
	}
	return EndpointCompletions
}

// kvOf returns the kv_transfer_params of a prefill response byte for byte.
func kvOf(t *testing.T, body []byte) []byte {
	t.Helper()
	var r struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.KV
}

type contractSide struct {
	Engine        string   `json:"engine"`
	Connector     string   `json:"connector"`
	EngineID      string   `json:"engine_id"`
	Endpoint      string   `json:"endpoint"`
	TransferModes []string `json:"transfer_modes"`
}

func (s contractSide) with(t *testing.T, override json.RawMessage) KVSide {
	t.Helper()
	if override != nil {
		if err := json.Unmarshal(override, &s); err != nil {
			t.Fatal(err)
		}
	}
	return KVSide(s)
}

func TestContractDescriptors(t *testing.T) {
	var doc struct {
		Producer, Consumer contractSide
		Cases              []struct {
			Name, Descriptor, Fixture string
			BlockIDsRepeat            int `json:"block_ids_repeat"`
			Endpoint                  string
			DecodeEndpoint            string `json:"decode_endpoint"`
			Producer, Consumer        json.RawMessage
			Want                      *struct {
				Reason         string
				DetailContains string `json:"detail_contains"`
			}
		}
	}
	loadContract(t, "descriptors.json", &doc)
	if len(doc.Cases) < 40 {
		t.Fatalf("only %d descriptor cases", len(doc.Cases))
	}
	for _, tc := range doc.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			raw := []byte(tc.Descriptor)
			if tc.Fixture != "" {
				raw = kvOf(t, repoFile(t, tc.Fixture, true))
			}
			if tc.BlockIDsRepeat > 0 {
				blocks := "[" + strings.Repeat("1,", tc.BlockIDsRepeat-1) + "1]"
				raw = bytes.Replace(raw, []byte(`"remote_block_ids":[0,1,2]`), []byte(`"remote_block_ids":`+blocks), 1)
			}
			decodeEP := tc.DecodeEndpoint
			if decodeEP == "" {
				decodeEP = tc.Endpoint
			}
			pair := Pair{Producer: doc.Producer.with(t, tc.Producer), Consumer: doc.Consumer.with(t, tc.Consumer), Endpoint: contractEndpoint(decodeEP)}
			d, rej := ParseDescriptor(raw, contractEndpoint(tc.Endpoint))
			if rej == nil {
				rej = ValidateDescriptor(d, pair)
			}
			switch {
			case tc.Want == nil && rej != nil:
				t.Fatalf("rejected: %v", rej)
			case tc.Want == nil:
				if !bytes.Equal(d.Raw(), raw) {
					t.Fatalf("descriptor changed: %s", d.Raw())
				}
			case rej == nil:
				t.Fatal("accepted")
			case rej.Reason != tc.Want.Reason || !strings.Contains(rej.Detail, tc.Want.DetailContains):
				t.Fatalf("rejection = %v, want reason %s with %q in the detail", rej, tc.Want.Reason, tc.Want.DetailContains)
			}
		})
	}
}

func TestContractBodies(t *testing.T) {
	var doc struct {
		PrefillParams string `json:"prefill_params"`
		Cases         []struct {
			Name, Endpoint, Client, Leg string
			KV                          *string
			Want                        string
			WantFixture                 string `json:"want_fixture"`
		}
		Rejections []struct{ Name, Endpoint, Client, Param string }
	}
	loadContract(t, "bodies.json", &doc)
	nixl, err := LookupConnector("nixl")
	if err != nil {
		t.Fatal(err)
	}
	if string(nixl.PrefillParams()) != doc.PrefillParams {
		t.Fatalf("nixl prefill params = %s, vectors say %s", nixl.PrefillParams(), doc.PrefillParams)
	}
	for _, tc := range doc.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			b, err := ParseClientBody(contractEndpoint(tc.Endpoint), []byte(tc.Client))
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			if tc.Leg == "prefill" {
				got = b.AppendPrefillBody(nil, nixl.PrefillParams())
			} else {
				var kv []byte
				if tc.KV != nil {
					kv = []byte(*tc.KV)
				}
				got = b.AppendDecodeBody(nil, kv)
			}
			want := []byte(tc.Want)
			if tc.WantFixture != "" {
				want = repoFile(t, tc.WantFixture, true)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s body\n got %s\nwant %s", tc.Leg, got, want)
			}
		})
	}
	for _, tc := range doc.Rejections {
		t.Run("rejects "+tc.Name, func(t *testing.T) {
			_, err := ParseClientBody(contractEndpoint(tc.Endpoint), []byte(tc.Client))
			var bre *BadRequestError
			if !errors.As(err, &bre) || bre.Param != tc.Param {
				t.Fatalf("err = %v, want a bad request naming %q", err, tc.Param)
			}
		})
	}
}

type contractFaults struct {
	Timeouts struct {
		Prefill    float64 `json:"prefill_timeout_s"`
		FirstToken float64 `json:"first_token_timeout_s"`
		DecodeRead float64 `json:"decode_read_timeout_s"`
	}
	Durations [][2]any
	Kinds     []struct {
		Kind                string
		EngineStatus        int `json:"engine_status"`
		Status              int `json:"status"`
		Type                string
		Retriable           bool `json:"retriable"`
		CountsAgainstEngine bool `json:"counts_against_engine"`
		StreamFailure       bool `json:"stream_failure"`
	}
	Cases []contractEngineCase
}

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

func kindNamed(t *testing.T, name string) FaultKind {
	t.Helper()
	for k := FaultKind(1); k < 64; k++ {
		if k.String() == name {
			return k
		}
	}
	t.Fatalf("no fault kind %q", name)
	return 0
}

func TestContractFaultKinds(t *testing.T) {
	var doc contractFaults
	loadContract(t, "faults.json", &doc)
	for _, k := range doc.Kinds {
		f := &Fault{Kind: kindNamed(t, k.Kind), Status: k.EngineStatus, Detail: "d"}
		var env struct{ Error struct{ Type, Code string } }
		if err := json.Unmarshal(FaultEnvelope(f), &env); err != nil {
			t.Fatal(err)
		}
		if f.ClientStatus() != k.Status || env.Error.Type != k.Type || env.Error.Code != k.Kind || f.Retriable() != k.Retriable ||
			f.CountsAgainstEngine() != k.CountsAgainstEngine || f.StreamFailure() != k.StreamFailure {
			t.Errorf("%s (engine status %d): status %d type %s code %s retriable %v counts %v stream failure %v; vectors: %+v",
				k.Kind, k.EngineStatus, f.ClientStatus(), env.Error.Type, env.Error.Code, f.Retriable(), f.CountsAgainstEngine(), f.StreamFailure(), k)
		}
	}
	for _, d := range doc.Durations {
		if got := config.Seconds(d[0].(float64)).Duration().String(); got != d[1].(string) {
			t.Errorf("%v s is written %q, vectors say %q", d[0], got, d[1])
		}
	}
}

// TestContractEngineAnswers runs each case against a hostile test engine that answers with the
// case's scripted response.
func TestContractEngineAnswers(t *testing.T) {
	var doc contractFaults
	loadContract(t, "faults.json", &doc)
	var current atomic.Pointer[contractEngineCase]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		c := current.Load()
		resp := c.Response
		if resp.Then != "hang_headers" {
			body := []byte(resp.Body)
			if resp.BodyFixture != "" { // JSON files are served trimmed, SSE files as they are
				body = repoFile(t, resp.BodyFixture, !strings.HasSuffix(resp.BodyFixture, ".sse"))
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
	timeouts := config.Default().Engine
	timeouts.PrefillTimeoutS = config.Seconds(doc.Timeouts.Prefill)
	timeouts.FirstTokenTimeoutS = config.Seconds(doc.Timeouts.FirstToken)
	timeouts.DecodeReadTimeoutS = config.Seconds(doc.Timeouts.DecodeRead)
	c, err := NewEngineClient(config.Engine{Name: "hostile", URL: srv.URL, Role: config.RoleBoth}, timeouts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	for i := range doc.Cases {
		tc := &doc.Cases[i]
		t.Run(tc.Name, func(t *testing.T) {
			current.Store(tc)
			ctx := context.Background()
			prompt := `"prompt":"x"`
			if tc.Endpoint == "chat" {
				prompt = `"messages":[{"role":"user","content":"x"}]`
			}
			body, err := ParseClientBody(contractEndpoint(tc.Endpoint), []byte(`{"model":"m",`+prompt+`,"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			req := &Request{Body: body, BackendRequestID: "contract-1"}
			events := []string{}
			var fault error
			raised := ""
			if tc.Leg == "prefill" {
				res, err := c.Prefill(ctx, req)
				if err != nil {
					fault, raised = err, "prefill"
				} else if tc.Want.DescriptorFromBody {
					if want := kvOf(t, repoFile(t, tc.Response.BodyFixture, true)); !bytes.Equal(res.Descriptor(), want) {
						t.Fatalf("descriptor = %s, want %s", res.Descriptor(), want)
					}
				} else if res.HasDescriptor() {
					t.Fatalf("descriptor = %s, want none", res.Descriptor())
				}
			} else {
				stream, err := c.Decode(ctx, PrefillResult{}, req)
				if err != nil {
					fault, raised = err, "decode"
				} else {
					for {
						ev, err := stream.Next()
						// Next returns io.EOF itself after [DONE]; a Fault may wrap io.EOF (a
						// clean close before [DONE]) and is a failure, so no errors.Is here.
						if err == io.EOF {
							break
						}
						if err != nil {
							fault, raised = err, "stream"
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
				t.Fatalf("events %v, raised at %q (%v); want %v, raised at %q", events, raised, fault, want.Events, want.Raised)
			}
			if fault == nil {
				return
			}
			f, ok := AsFault(fault)
			if !ok {
				t.Fatalf("%v is not a Fault", fault)
			}
			if f.Kind.String() != want.Kind || f.ClientStatus() != want.Status || f.Detail != want.Message ||
				f.Reason != want.Reason || f.RetryAfter != want.RetryAfter {
				t.Fatalf("fault %s %d %q reason %q retry-after %q; want %s %d %q reason %q retry-after %q",
					f.Kind, f.ClientStatus(), f.Detail, f.Reason, f.RetryAfter, want.Kind, want.Status, want.Message, want.Reason, want.RetryAfter)
			}
			env := FaultEnvelope(f)
			switch {
			case want.Envelope != nil:
				if string(env) != *want.Envelope {
					t.Fatalf("envelope %s\nwant %s", env, *want.Envelope)
				}
			case want.EnvelopeFixture != "":
				if w := repoFile(t, want.EnvelopeFixture, true); !bytes.Equal(env, w) {
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
					e.Error.Type != errorType(want.Status) || e.Error.Param != nil {
					t.Fatalf("envelope %s (%v)", env, err)
				}
			}
		})
	}
}
