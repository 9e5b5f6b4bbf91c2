package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// ProbeReport is what one probe transfer measured.
type ProbeReport struct {
	Prefill    time.Duration // the prefill leg (and the handoff checks)
	FirstToken time.Duration // decode start to first token
	Total      time.Duration
	Tokens     int
	// Descriptor is the handoff the producer made (nil for same-worker probes).
	Descriptor []byte
}

// probeBody is the probe's canned request: two tokens, greedy, so any engine answers fast.
const probeBody = `{"model":%q,"prompt":"narwhal probe","max_tokens":2,"temperature":0}`

// ProbeTransfer runs a real tiny inference through the attempt runner (Run), as a client
// request would run: the producer's connector plans the transfer, the prefill runs on producer,
// the handoff is validated for consumer, and the decode on consumer is read to [DONE]. Each leg
// is bounded by legTimeout. When producer and consumer are the same engine the decode runs
// without transfer parameters; with no consumer the probe ends once the producer made a
// handoff. A failure comes back as a *fault.Fault whose Phase says which side failed (a bad
// descriptor is the producer's: the prefill).
func ProbeTransfer(ctx context.Context, producer, consumer *EngineClient, model string, legTimeout time.Duration) (ProbeReport, error) {
	var rep ProbeReport
	body, err := wire.ParseClientBody(wire.EndpointCompletions, fmt.Appendf(nil, probeBody, model))
	if err != nil {
		return rep, fmt.Errorf("probe body: %w", err)
	}
	start := time.Now()
	req := &Request{Body: body, BackendRequestID: "probe-" + uuid.NewString()}
	out := Run(ctx, &Plan{Producer: producer, Consumer: consumer, FailOnMissing: true, LegTimeout: legTimeout}, req, nil)
	rep.Descriptor = out.Descriptor
	if !out.DecodeStarted.IsZero() {
		rep.Prefill = out.DecodeStarted.Sub(start)
	} else {
		rep.Prefill = time.Since(start)
	}
	if out.Fault != nil {
		return rep, out.Fault
	}
	if out.Stream == nil { // no consumer: the producer's handoff was the probe
		rep.Total = time.Since(start)
		return rep, nil
	}
	stream := out.Stream
	defer stream.Close()
	rep.FirstToken = stream.FirstTokenAt.Sub(out.DecodeStarted)
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			rep.Total = time.Since(start)
			return rep, nil
		}
		if err != nil {
			return rep, err
		}
		if ev.Kind == wire.EventToken {
			rep.Tokens++
		}
	}
}

// CheckContract validates an engine against the pinned contract: it serves the pinned model
// (with the pinned max_model_len), runs the pinned version, and is configured with the pinned
// connector. The error names the first mismatch.
func CheckContract(ctx context.Context, c *EngineClient, contract *config.EngineContract) error {
	if contract.Connector != "" && c.kv.Connector != contract.Connector {
		return fmt.Errorf("engine uses connector %q, the contract pins %q", c.kv.Connector, contract.Connector)
	}
	if contract.Model != "" || contract.MaxModelLen > 0 {
		models, err := c.Models(ctx)
		if err != nil {
			return err
		}
		found := false
		for _, m := range models {
			if contract.Model != "" && m.ID != contract.Model || m.Parent != nil {
				continue // a LoRA adapter has no max_model_len of its own
			}
			found = true
			if contract.MaxModelLen > 0 && m.MaxModelLen != contract.MaxModelLen {
				return fmt.Errorf("model %s has max_model_len %d, the contract pins %d", m.ID, m.MaxModelLen, contract.MaxModelLen)
			}
		}
		if !found {
			return fmt.Errorf("engine does not serve the pinned model %q", contract.Model)
		}
	}
	if contract.Version != "" {
		v, err := c.Version(ctx)
		if err != nil {
			return err
		}
		if v != contract.Version {
			return fmt.Errorf("engine runs version %q, the contract pins %q", v, contract.Version)
		}
	}
	return nil
}
