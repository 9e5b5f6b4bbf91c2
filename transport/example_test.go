package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// The engine-side API on its own: a prefill on one engine, its result passed as is to a decode
// on another, which validates the handoff and streams the tokens. The README's Go API section
// quotes this example line for line (tests/readme_test.go checks it): change both together.
func ExampleEngineClient() {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Tokens: 3}})
	if err != nil {
		panic(err)
	}
	defer fleet.Close()
	// A Provisioner resolves each engine (its URL, its connector, its KV side); each client is
	// built from its engine's spec and the engine section's timeouts.
	cfg := config.Default()
	cfg.Engines = []config.Engine{
		// The producer's KV side channel pinned, as an operator would (the simulator's is on a
		// free port, outside the NIXL range an unpinned producer may name).
		{Name: "p0", URL: fleet.Engine("p0").URL(), Role: config.RolePrefill, KV: config.KV{Endpoint: fleet.Engine("p0").KVEndpoint()}},
		{Name: "d0", URL: fleet.Engine("d0").URL(), Role: config.RoleDecode},
	}
	engines, err := transport.NewProvisioner(kv.Builtin(), cfg.ReservedPorts()).Engines(cfg.Engines, "example")
	if err != nil {
		panic(err)
	}
	producer := transport.NewEngineClient(engines[0], cfg.Engine, cfg.Server.MaxResponseBytes)
	consumer := transport.NewEngineClient(engines[1], cfg.Engine, cfg.Server.MaxResponseBytes)
	defer producer.Close()
	defer consumer.Close()

	body, err := wire.ParseClientBody(wire.EndpointCompletions, []byte(`{"model":"sim-model","prompt":"Hello","max_tokens":3}`))
	if err != nil {
		panic(err)
	}
	req := &transport.Request{Body: body, BackendRequestID: "example-1", Deadline: time.Now().Add(10 * time.Second)}
	ctx := context.Background()

	res, err := producer.Prefill(ctx, req) // one token, not streamed: the descriptor, producer, endpoint, backend ID
	if err != nil {
		panic(err)
	}
	fmt.Println(res.HasDescriptor(), res.Producer, res.Endpoint, res.BackendRequestID)

	params := res.Parameters() // a detached copy: changing it changes nothing Decode sends
	params["remote_host"] = "10.9.9.9"

	stream, err := consumer.Decode(ctx, res, req) // validates the handoff, returns at the first token
	if err != nil {
		panic(err)
	}
	defer stream.Close()
	var text strings.Builder
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(err)
		}
		if ev.Kind == wire.EventToken {
			var chunk struct {
				Choices []struct{ Text string } `json:"choices"`
			}
			json.Unmarshal(ev.Data, &chunk)
			text.WriteString(chunk.Choices[0].Text)
		}
	}
	fmt.Printf("%q\n", text.String())
	// Output:
	// true p0 completions example-1
	// " alpha beta gamma"
}
