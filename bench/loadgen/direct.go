package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// directArm runs a request the way the router does, with the router's own engine client:
// parse the client body, prefill on a producer, hand the PrefillResult to a consumer's
// Decode, read the stream to [DONE]. Producers and consumers are picked round-robin.
type directArm struct {
	producers, consumers []*transport.EngineClient
	next                 atomic.Uint64
}

func newDirectArm(s Setup) (*directArm, error) {
	d := &directArm{}
	// The engines are provisioned as the router provisions them, with the router's engine
	// timeouts: the two arms differ only in the router.
	cfg := config.Default()
	cfg.Engine = s.Timeouts
	for _, e := range s.Engines {
		cfg.Engines = append(cfg.Engines, config.Engine{
			Name: e.Name, URL: e.URL, Role: config.Role(e.Role), Models: []string{s.Model},
			KV: config.KV{Connector: kv.NIXL, EngineID: e.EngineID, Endpoint: e.KVEndpoint, TransferModes: []string{"pull"}},
		})
	}
	if err := cfg.Validate(kv.Builtin()); err != nil {
		return nil, fmt.Errorf("direct arm: %w", err)
	}
	engines, err := transport.NewProvisioner(kv.Builtin(), cfg.ReservedPorts()).Engines(cfg.Engines, "direct")
	if err != nil {
		return nil, fmt.Errorf("direct arm: %w", err)
	}
	for _, e := range engines {
		c := transport.NewEngineClient(e, cfg.Engine, cfg.Server.MaxResponseBytes)
		if e.Role.CanPrefill() {
			d.producers = append(d.producers, c)
		}
		if e.Role.CanDecode() {
			d.consumers = append(d.consumers, c)
		}
	}
	if len(d.producers) == 0 || len(d.consumers) == 0 {
		return nil, errors.New("direct arm: the fleet needs a prefill-capable and a decode-capable engine")
	}
	return d, nil
}

// do runs one request that started at start (its scheduled time in open loop).
func (d *directArm) do(start time.Time, body []byte, maxTokens int, guard time.Duration) Outcome {
	o := Outcome{Started: start}
	n := d.next.Add(1)
	prod := d.producers[n%uint64(len(d.producers))]
	cons := d.consumers[n%uint64(len(d.consumers))]
	if cons == prod && len(d.consumers) > 1 {
		cons = d.consumers[(n+1)%uint64(len(d.consumers))]
	}

	cb, err := wire.ParseClientBody(wire.EndpointChat, body)
	if err != nil {
		o.Error = "bad request body: " + err.Error()
		return o
	}
	ctx := context.Background()
	req := &transport.Request{Body: cb, BackendRequestID: uuid.NewString(), Deadline: start.Add(guard)}
	res, err := prod.Prefill(ctx, req)
	if err != nil {
		o.Error = faultClass(err)
		return o
	}
	o.TTFT = res.Completed.Sub(start)
	if cons == prod {
		res = res.WithoutTransfer() // same-worker decode, as the router does it
	}
	s, err := cons.Decode(ctx, res, req)
	if err != nil {
		o.Error = faultClass(err)
		return o
	}
	defer s.Close()
	o.FirstByte = s.FirstTokenAt.Sub(start)
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			o.Error = faultClass(err)
			return o
		}
		switch ev.Kind {
		case wire.EventToken:
			o.Tokens++
		case wire.EventDone:
			o.Total = time.Since(start)
		}
	}
	if o.Tokens != maxTokens {
		o.Error = "short output"
		return o
	}
	o.OK = true
	return o
}

// faultClass names an engine-client error by leg and fault kind.
func faultClass(err error) string {
	if f, ok := fault.As(err); ok {
		if f.Status != 0 {
			return fmt.Sprintf("%s %s %d", f.Phase, f.Kind, f.Status)
		}
		return fmt.Sprintf("%s %s", f.Phase, f.Kind)
	}
	return "error: " + err.Error()
}
